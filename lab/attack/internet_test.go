package attack

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/nsgate/nsgate/lab/internet"
)

// freePort finds a port free for both TCP and UDP on 127.0.0.1.
func freePort(t *testing.T) uint16 {
	t.Helper()
	for i := 0; i < 20; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err == nil {
			pc.Close()
			return uint16(port)
		}
	}
	t.Fatal("no free port")
	return 0
}

// loopbackInternet starts a small layout on 127.0.0.1 (no namespace
// needed) and returns it with its service addresses by name.
func loopbackInternet(t *testing.T) (*internet.Internet, map[string]string) {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	addrs := map[string]string{}
	svc := func(name, target string, k internet.Kind, body string, names ...string) internet.Service {
		a := netip.AddrPortFrom(lo, freePort(t))
		addrs[name] = a.String()
		return internet.Service{Target: target, Addr: a, Kind: k, Body: body, Names: names}
	}
	l := internet.Layout{
		Services: []internet.Service{
			svc("app", "app", internet.KindHTTP, "hello from app", internet.AppName),
			svc("apps", "app", internet.KindHTTPS, "hello from app over tls", internet.AppName),
			svc("meta", "metadata", internet.KindHTTP, "fake metadata"),
			svc("ssh", "app-port", internet.KindBanner, "SSH-2.0-test"),
			svc("dot", "resolver", internet.KindTLS, "dot"),
			svc("echo", "unapproved", internet.KindEcho, ""),
		},
		DNS:         []internet.DNSListener{{Addr: netip.AddrPortFrom(lo, freePort(t)), Target: "upstream-dns"}},
		Zone:        internet.DefaultZone(),
		ExfilZone:   internet.ExfilZone,
		UnixSockets: true,
		Approved:    []string{"app", "upstream-dns"},
	}
	addrs["dns"] = l.DNS[0].Addr.String()
	in, err := internet.Start(l, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in, addrs
}

func TestInternetServices(t *testing.T) {
	in, addrs := loopbackInternet(t)
	a := testAttacker()
	a.roots = in.CA().Pool()
	ctx := context.Background()

	f := a.fetch(ctx, "http://"+addrs["app"]+"/", fetchOpts{host: internet.AppName})
	if f.err != nil || f.target != "app" || f.body != "hello from app" {
		t.Errorf("app: %+v", f)
	}
	f = a.fetch(ctx, "http://"+addrs["app"]+"/", fetchOpts{host: internet.UnapprovedName})
	if f.err != nil || f.target != internet.TargetFronted {
		t.Errorf("a Host the app does not serve must be served and counted as fronted: %+v", f)
	}
	f = a.fetch(ctx, "http://"+addrs["app"]+"/redirect?to="+url.QueryEscape("http://"+addrs["meta"]+"/"), fetchOpts{follow: true, host: internet.AppName})
	if f.err != nil || f.target != "metadata" || len(f.hops) != 1 {
		t.Errorf("the open redirect to the metadata server: %+v", f)
	}
	f = a.rawHTTP(ctx, addrs["apps"], &tls.Config{ServerName: internet.AppName, RootCAs: in.CA().Pool()}, "GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
	if f.err != nil || f.target != "app" {
		t.Errorf("HTTPS verified against the lab CA: %+v", f)
	}
	f = a.rawHTTP(ctx, addrs["apps"], &tls.Config{ServerName: internet.UnapprovedName, InsecureSkipVerify: true}, "GET / HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
	if f.err != nil || f.target != internet.TargetFronted {
		t.Errorf("an SNI the app does not serve: %+v", f)
	}
	if b, err := a.banner(ctx, "tcp", addrs["ssh"], nil); err != nil || b != "SSH-2.0-test" {
		t.Errorf("banner: %q %v", b, err)
	}
	if b, err := a.banner(ctx, "tcp", addrs["dot"], &tls.Config{InsecureSkipVerify: true}); err != nil || b != "dot" {
		t.Errorf("tls banner: %q %v", b, err)
	}
	if r, err := a.udpExchange(ctx, addrs["echo"], []byte("ping")); err != nil || string(r) != "ping" {
		t.Errorf("echo: %q %v", r, err)
	}
	for _, p := range []string{in.UnixPath(), in.AbstractName()} {
		if b, err := a.banner(ctx, "unix", p, nil); err != nil || !strings.HasPrefix(b, "unix:") {
			t.Errorf("unix socket %s: %q %v", p, b, err)
		}
	}
	if _, err := a.dnsExchange(ctx, addrs["dns"], "udp", "x1."+internet.ExfilZone, 16); err != nil {
		t.Errorf("dns: %v", err)
	}

	for _, tc := range []struct {
		target string
		want   int64
	}{
		{"app", 5}, {internet.TargetFronted, 2}, {"metadata", 1}, {"app-port", 1}, {"resolver", 1}, {"unapproved", 1},
		{internet.TargetUnix, 1}, {internet.TargetUnixAbstract, 1}, {"upstream-dns", 1}, {internet.TargetExfil, 1},
	} {
		if got := in.TargetHits(tc.target); got != tc.want {
			t.Errorf("target %s: %d hits, want %d", tc.target, got, tc.want)
		}
	}
	if got := in.HitsAt(addrs["meta"] + "/tcp"); got != 1 {
		t.Errorf("HitsAt(meta) = %d", got)
	}
	if in.HitsAt("192.0.2.1:1/tcp") != 0 {
		t.Error("an unknown key has hits")
	}
	hits := in.Hits()
	for i := 1; i < len(hits); i++ {
		if hits[i].Time.Before(hits[i-1].Time) {
			t.Fatal("hits are not in time order")
		}
	}
	if !in.Approved("app") || in.Approved("metadata") {
		t.Error("Approved is wrong")
	}
	var fronted int64
	for _, tc := range in.Counts() {
		if tc.Target == internet.TargetFronted {
			if tc.Approved {
				t.Error("fronted is approved")
			}
			fronted += tc.Hits
		}
	}
	if fronted != 2 {
		t.Errorf("Counts has %d fronted hits, want 2", fronted)
	}
}
