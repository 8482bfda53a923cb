package netstack

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/dns"
	"github.com/nsgate/nsgate/policy"
)

// blockHarness is a gateway with the real DNS server, the block page on
// (through the Config or the policy's dns.block_page).
func blockHarness(t *testing.T, viaPolicy bool) (*harness, *dns.Server) {
	t.Helper()
	src := testPolicy
	if viaPolicy {
		src += "dns: {block_page: true}\n"
	}
	pol := mustPolicy(t, src)
	var srv *dns.Server
	h := newHarness(t, func(c *Config) {
		var err error
		srv, err = dns.New(dns.Config{Policy: func() *policy.Policy { return pol }, Audit: c.Audit, IPv6: true, BlockPage: !viaPolicy})
		if err != nil {
			t.Fatal(err)
		}
		c.Policy = func() *policy.Policy { return pol }
		c.Names = srv
		c.BlockPage = !viaPolicy
	})
	return h, srv
}

// lookup asks srv for name's A or AAAA record and returns the answer and
// the reply's rcode.
func lookup(t *testing.T, srv *dns.Server, name string, qtype dnsmessage.Type) (netip.Addr, dnsmessage.RCode) {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: qtype, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	var p dnsmessage.Parser
	h, err := p.Start(srv.ServeDNS(msg, false))
	if err != nil {
		t.Fatalf("reply: %v", err)
	}
	p.SkipAllQuestions()
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			return netip.Addr{}, h.RCode
		}
		switch rh.Type {
		case dnsmessage.TypeA:
			r, _ := p.AResource()
			return netip.AddrFrom4(r.A), h.RCode
		case dnsmessage.TypeAAAA:
			r, _ := p.AAAAResource()
			return netip.AddrFrom16(r.AAAA), h.RCode
		}
		p.SkipAnswer()
	}
}

// blockGet opens a flow from the worker to a:port, sends a GET with
// accept and returns the response and its body.
func blockGet(t *testing.T, h *harness, a netip.Addr, port uint16, accept string) (*http.Response, string) {
	t.Helper()
	c, err := h.dialTCP(netip.AddrPortFrom(a, port).String())
	if err != nil {
		t.Fatalf("dial %v:%d: %v (the block page should complete the handshake)", a, port, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /latest/x?q=1 HTTP/1.1\r\nHost: whatever.example\r\nAccept: "+accept+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read the block page: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestBlockPageHTTP(t *testing.T) {
	for _, viaPolicy := range []bool{false, true} {
		name := "flag"
		if viaPolicy {
			name = "policy"
		}
		t.Run(name, func(t *testing.T) {
			h, srv := blockHarness(t, viaPolicy)
			a, rc := lookup(t, srv, "evil.test", dnsmessage.TypeA)
			if rc != dnsmessage.RCodeSuccess || !netip.MustParsePrefix("198.18.0.0/15").Contains(a) {
				t.Fatalf("evil.test A = %v %v, want a fake address with NOERROR", a, rc)
			}
			resp, body := blockGet(t, h, a, 80, "text/html,application/xhtml+xml,*/*;q=0.8")
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Nsgate-Refused") != "evil.test" ||
				resp.Header.Get("X-Nsgate-Rule") != "default" || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") {
				t.Fatalf("block page: %s %v", resp.Status, resp.Header)
			}
			for _, want := range []string{"Refused by policy: evil.test", "evil.test:80", "default", "not a network fault"} {
				if !strings.Contains(body, want) {
					t.Errorf("page lacks %q:\n%s", want, body)
				}
			}
			if strings.Contains(body, "whatever.example") || strings.Contains(body, "/latest/x") {
				t.Errorf("the page quotes what the worker sent:\n%s", body)
			}
			ev, _ := h.sink.waitEvent(t, "flow deny evil.test", func(e audit.Event) bool {
				f, ok := e.(audit.Flow)
				return ok && f.Host == "evil.test"
			})
			if f := ev.(audit.Flow); f.Action != "deny" || f.Rule != "default" || !strings.Contains(f.Reason, "block page") {
				t.Errorf("flow record %+v, want a denial that names the block page", f)
			}
			h.sink.waitEvent(t, "dns deny evil.test with its answer", func(e audit.Event) bool {
				d, ok := e.(audit.DNS)
				return ok && d.QName == "evil.test" && d.Action == "deny" && len(d.Answer) == 1 && d.Answer[0] == a.String()
			})
			if d := h.dialer.list(); len(d) != 0 {
				t.Errorf("dialled %v for a refused name", d)
			}
		})
	}
}

func TestBlockPageForms(t *testing.T) {
	h, srv := blockHarness(t, false)
	a, _ := lookup(t, srv, "evil.test", dnsmessage.TypeAAAA)
	if !a.Is6() {
		t.Fatalf("evil.test AAAA = %v, want a fake IPv6 address", a)
	}
	resp, body := blockGet(t, h, a, 8443, "application/json")
	var v struct {
		Refused    bool
		Host, Rule string
		Port       int
		Reason, By string
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || !v.Refused || v.Host != "evil.test" || v.Port != 8443 || v.By != "nsgate" {
		t.Fatalf("json page %q (%v): %+v", body, err, v)
	}
	_, body = blockGet(t, h, a, 8443, "*/*")
	if !strings.HasPrefix(body, "nsgate refused by policy: evil.test:8443 (rule default") || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("text page %q", body)
	}
	// An allowed name on a port no rule allows: the page says so.
	a, _ = lookup(t, srv, "app.test", dnsmessage.TypeA)
	resp, body = blockGet(t, h, a, 81, "*/*")
	if resp.Header.Get("X-Nsgate-Refused") != "app.test" || !strings.Contains(body, "app.test:81") {
		t.Fatalf("app.test:81: %v %q", resp.Header, body)
	}
	if d := h.dialer.list(); len(d) != 0 {
		t.Errorf("dialled %v", d)
	}
}

func TestBlockPageMetadataKeepsNXDOMAIN(t *testing.T) {
	_, srv := blockHarness(t, false)
	for _, n := range []string{"metadata.google.internal", "metadata", "instance-data.ec2.internal"} {
		if a, rc := lookup(t, srv, n, dnsmessage.TypeA); rc != dnsmessage.RCodeNameError || a.IsValid() {
			t.Errorf("%s: %v %v, want NXDOMAIN: a metadata name is never answered", n, a, rc)
		}
	}
}

// TestBlockPageTLS: a ClientHello to the block page gets an access_denied
// alert (no page is drawn over TLS) and the flow's denial is recorded.
func TestBlockPageTLS(t *testing.T) {
	h, srv := blockHarness(t, false)
	a, _ := lookup(t, srv, "evil.test", dnsmessage.TypeA)
	c, err := h.dialTCP(netip.AddrPortFrom(a, 443).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	err = tls.Client(c, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("handshake: %v, want an access_denied alert", err)
	}
	h.sink.waitEvent(t, "flow deny evil.test:443", func(e audit.Event) bool {
		f, ok := e.(audit.Flow)
		return ok && f.Host == "evil.test" && f.Action == "deny" && strings.HasSuffix(f.Dst, ":443")
	})
}

// TestBlockPageNotHTTP: bytes that are neither HTTP nor TLS get a close
// and nothing else.
func TestBlockPageNotHTTP(t *testing.T) {
	h, srv := blockHarness(t, false)
	a, _ := lookup(t, srv, "evil.test", dnsmessage.TypeA)
	c, err := h.dialTCP(netip.AddrPortFrom(a, 25).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "\x00\x01garbage\r\n\r\n")
	got, _ := io.ReadAll(c)
	if len(got) != 0 {
		t.Fatalf("got %q, want nothing", got)
	}
}
