// Package tlsca is the certificate authority of one nsgate run: an ECDSA
// P-256 key and self-signed certificate made in memory at start, and leaf
// certificates for the names the policy terminates, issued on demand and
// cached.
//
// The CA's private key lives only in this process's memory: nothing here
// writes it, marshals it or returns it. Only the certificate (public) is
// exported, as PEM, for the worker's trust stores. The CA is name
// constrained to the names it was made for, so a leaf for any other name
// fails verification even if a worker were tricked into signing requests
// with it.
package tlsca

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"time"
)

// Validity bounds. The CA lives a day (a run longer than that is reissued
// by a restart; clients seldom check a CA's notAfter against a running
// connection); leaves live a day too, and both start an hour in the past
// so that a worker whose clock lags a little still accepts them.
const (
	CAValidity   = 24 * time.Hour
	LeafValidity = 24 * time.Hour
	clockSkew    = time.Hour
	// MaxCached bounds the leaf cache; the least recently used leaf goes.
	MaxCached = 256
)

// CA is a run's certificate authority. It is safe for concurrent use.
type CA struct {
	key     *ecdsa.PrivateKey // never leaves this struct
	cert    *x509.Certificate
	der     []byte
	permits []string // the name constraints (exact names and suffixes), lower case
	now     func() time.Time

	mu    sync.Mutex // guards cache and lru
	cache map[string]*list.Element
	lru   *list.List // of *entry, most recent first
}

type entry struct {
	name string
	cert *tls.Certificate
}

// Options configure New.
type Options struct {
	// Names are the host names (exact, or "*.suffix") the CA may issue
	// for; they become its permitted DNS name constraints. Empty means no
	// constraint (tests only: a run always names its terminated hosts).
	Names []string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// New makes a CA in memory.
func New(o Options) (*CA, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	var permits []string
	for _, n := range o.Names {
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		n = strings.TrimPrefix(n, "*")
		if n != "" {
			permits = append(permits, n)
		}
	}
	t := now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "nsgate run CA " + serial.Text(16)[:8], Organization: []string{"nsgate"}},
		NotBefore:             t.Add(-clockSkew),
		NotAfter:              t.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	if len(permits) > 0 {
		tmpl.PermittedDNSDomainsCritical = true
		tmpl.PermittedDNSDomains = permits
		// No IP SANs at all: the CA issues for names only.
		tmpl.ExcludedIPRanges = []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	return &CA{key: key, cert: cert, der: der, permits: permits, now: now,
		cache: make(map[string]*list.Element), lru: list.New()}, nil
}

func randSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// Certificate returns the CA's certificate (public; the caller must not
// change it).
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// PEM returns the CA's certificate as one PEM block.
func (c *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.der})
}

// Pool returns a new pool holding only the CA, for tests and clients.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// ErrNotPermitted is returned by Leaf for a name outside the CA's
// constraints.
var ErrNotPermitted = errors.New("name outside the run CA's constraints")

// permitted reports whether name falls within the constraints.
func (c *CA) permitted(name string) bool {
	if len(c.permits) == 0 {
		return true
	}
	for _, p := range c.permits {
		if strings.HasPrefix(p, ".") {
			if strings.HasSuffix(name, p) && len(name) > len(p) {
				return true
			}
			continue
		}
		if name == p || strings.HasSuffix(name, "."+p) {
			return true
		}
	}
	return false
}

// Leaf returns a certificate for the DNS name (lower case, no trailing
// dot), issuing and caching it on first use. A cached leaf past half its
// life is reissued.
func (c *CA) Leaf(name string) (*tls.Certificate, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" || len(name) > 253 {
		return nil, errors.New("leaf: bad name")
	}
	if !c.permitted(name) {
		return nil, fmt.Errorf("leaf %s: %w", name, ErrNotPermitted)
	}
	now := c.now()
	c.mu.Lock()
	if el, ok := c.cache[name]; ok {
		e := el.Value.(*entry)
		if now.Before(e.cert.Leaf.NotAfter.Add(-LeafValidity / 2)) {
			c.lru.MoveToFront(el)
			c.mu.Unlock()
			return e.cert, nil
		}
		c.lru.Remove(el)
		delete(c.cache, name)
	}
	c.mu.Unlock()

	cert, err := c.issue(name, now)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.cache[name]; ok { // another goroutine won the race
		c.lru.MoveToFront(el)
		return el.Value.(*entry).cert, nil
	}
	c.cache[name] = c.lru.PushFront(&entry{name: name, cert: cert})
	for c.lru.Len() > MaxCached {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.cache, old.Value.(*entry).name)
	}
	return cert, nil
}

// Cached reports how many leaves the cache holds.
func (c *CA) Cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

func (c *CA) issue(name string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf key: %w", err)
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(LeafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(c.cert.NotAfter) {
		tmpl.NotAfter = c.cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("leaf %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf %s: %w", name, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, c.der}, PrivateKey: key, Leaf: leaf}, nil
}

// String names the CA without its key.
func (c *CA) String() string { return "tlsca(" + c.cert.Subject.CommonName + ")" }

// GoString is String, so that %#v cannot print the key either.
func (c *CA) GoString() string { return c.String() }
