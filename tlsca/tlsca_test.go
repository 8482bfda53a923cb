package tlsca

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLeafVerifies(t *testing.T) {
	ca, err := New(Options{Names: []string{"api.example.test", "*.svc.test"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"api.example.test", "a.svc.test"} {
		leaf, err := ca.Leaf(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: ca.Pool()}); err != nil {
			t.Errorf("%s: verify: %v", name, err)
		}
	}
}

func TestNameConstraints(t *testing.T) {
	ca, err := New(Options{Names: []string{"api.example.test"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"other.test", "example.test", "xapi.example.test"} {
		if _, err := ca.Leaf(name); err == nil {
			t.Errorf("%s: issued a leaf outside the constraints", name)
		}
	}
	// The constraint is in the certificate too: a verifier refuses a
	// leaf the CA's key signs for another name, whoever made it.
	if !ca.cert.PermittedDNSDomainsCritical || len(ca.cert.PermittedDNSDomains) != 1 {
		t.Fatalf("constraints not in the certificate: %v", ca.cert.PermittedDNSDomains)
	}
	evil, err := ca.issue("evil.test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := evil.Leaf.Verify(x509.VerifyOptions{DNSName: "evil.test", Roots: ca.Pool()}); err == nil {
		t.Error("a leaf outside the constraints verified")
	}
}

func TestCAShape(t *testing.T) {
	ca, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Certificate()
	if !c.IsCA || !c.MaxPathLenZero || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("not a path-length-0 CA: %+v", c)
	}
	if life := c.NotAfter.Sub(c.NotBefore); life > CAValidity+2*time.Hour {
		t.Errorf("CA valid for %v", life)
	}
	if c.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key %v", c.PublicKeyAlgorithm)
	}
	p := string(ca.PEM())
	if !strings.HasPrefix(p, "-----BEGIN CERTIFICATE-----") || strings.Contains(p, "PRIVATE") {
		t.Errorf("PEM: %q", p)
	}
	for _, s := range []string{fmt.Sprint(ca), fmt.Sprintf("%v %+v %#v", ca, ca, ca)} {
		if strings.Contains(s, "D:") || strings.Contains(s, "PrivateKey") {
			t.Errorf("formatting shows the key: %s", s)
		}
	}
}

func TestCacheBoundedAndReused(t *testing.T) {
	ca, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := ca.Leaf("a.test")
	a2, _ := ca.Leaf("A.test.")
	if a1 != a2 {
		t.Error("second Leaf for the same name issued again")
	}
	for i := 0; i < MaxCached+10; i++ {
		if _, err := ca.Leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := ca.Cached(); n != MaxCached {
		t.Errorf("cache holds %d, bound %d", n, MaxCached)
	}
	if a3, _ := ca.Leaf("a.test"); a3 == a1 {
		t.Error("evicted leaf still served")
	}
}

func TestLeafReissuedWhenOld(t *testing.T) {
	now := time.Now()
	ca, err := New(Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	l1, _ := ca.Leaf("a.test")
	now = now.Add(LeafValidity * 3 / 4)
	l2, _ := ca.Leaf("a.test")
	if l1 == l2 {
		t.Error("leaf past half its life served again")
	}
}

func TestConcurrentLeaf(t *testing.T) {
	ca, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := ca.Leaf(fmt.Sprintf("h%d.test", i%4)); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if ca.Cached() != 4 {
		t.Errorf("cached %d", ca.Cached())
	}
}

func TestHandshake(t *testing.T) {
	ca, err := New(Options{Names: []string{"api.example.test"}})
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	srv := tls.Server(c1, &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return ca.Leaf(h.ServerName)
	}})
	go srv.Handshake()
	cl := tls.Client(c2, &tls.Config{ServerName: "api.example.test", RootCAs: ca.Pool()})
	if err := cl.Handshake(); err != nil {
		t.Fatal(err)
	}
}
