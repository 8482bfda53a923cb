package podnet

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/intercept"
	"github.com/nsgate/nsgate/internal/hostpath"
	"github.com/nsgate/nsgate/policy"
)

func testEngine(t *testing.T) *intercept.Engine {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte("version: 1\nallow:\n  - host: api.example.test\n    ports: [443]\n    tls: terminate\n"+
		"credentials:\n  - name: api\n    from: {env: IT_SECRET}\n    placeholder_env: API_TOKEN\n    hosts: [api.example.test]\n    header: Authorization\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := intercept.NewEngine(p, func(k string) string {
		if k == "IT_SECRET" {
			return "s3cret-value-0123"
		}
		return ""
	}, nil)
	if err != nil || e == nil {
		t.Fatalf("engine: %v %v", e, err)
	}
	return e
}

// TestWriteCA: the certificate file holds the run's CA certificate and
// nothing else (no key); the bundle holds it after the host's roots; an
// existing file of the caller's is rewritten in place (a bind mount of it
// shows the new CA); a link at the name is refused; asking for a file
// when the policy terminates nothing is an error.
func TestWriteCA(t *testing.T) {
	e := testEngine(t)
	dir := t.TempDir()
	cert, bundle := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(bundle, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(bundle)
	if err := WriteCA(e, hostpath.Default(), cert, bundle, ""); err != nil {
		t.Fatal(err)
	}
	c, _ := os.ReadFile(cert)
	b, _ := os.ReadFile(bundle)
	if !bytes.Equal(c, e.CA.PEM()) {
		t.Errorf("certificate file %q, want the CA's PEM", c)
	}
	blk, rest := pem.Decode(c)
	if blk == nil || blk.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("certificate file is not one PEM certificate: %q", c)
	}
	if crt, err := x509.ParseCertificate(blk.Bytes); err != nil || !crt.IsCA {
		t.Errorf("certificate: %v, CA %v", err, crt != nil && crt.IsCA)
	}
	for name, data := range map[string][]byte{"cert": c, "bundle": b} {
		if bytes.Contains(data, []byte("PRIVATE KEY")) {
			t.Errorf("%s file holds a private key", name)
		}
	}
	if !bytes.HasSuffix(b, e.CA.PEM()) || bytes.Contains(b, []byte("old\n")) {
		t.Errorf("bundle does not end with the CA, or keeps the old content")
	}
	after, _ := os.Stat(bundle)
	if !os.SameFile(before, after) {
		t.Errorf("the bundle was replaced by another file, not rewritten in place")
	}

	link := filepath.Join(dir, "link.pem")
	if err := os.Symlink(filepath.Join(dir, "target"), link); err != nil {
		t.Fatal(err)
	}
	if err := WriteCA(e, hostpath.Default(), link, "", ""); err == nil {
		t.Errorf("a link at the certificate's name was followed")
	}
	if _, err := os.Lstat(filepath.Join(dir, "target")); err == nil {
		t.Errorf("the link's target was created")
	}
	if err := WriteCA(nil, hostpath.Default(), filepath.Join(dir, "none.pem"), "", ""); err == nil || !strings.Contains(err.Error(), "terminates no TLS") {
		t.Errorf("no CA: %v, want an error saying the policy terminates no TLS", err)
	}
	ph := filepath.Join(dir, "placeholders.env")
	if err := WriteCA(e, hostpath.Default(), "", "", ph); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(ph); !strings.HasPrefix(string(b), "API_TOKEN=nsgph") || strings.Contains(string(b), "s3cret") {
		t.Errorf("placeholders file %q, want API_TOKEN=<placeholder> and no secret", b)
	}
	if err := WriteCA(nil, hostpath.Default(), "", "", ""); err != nil {
		t.Errorf("nothing asked: %v", err)
	}
}
