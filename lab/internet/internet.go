package internet

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/sealed"
)

// Kind is what a fake server speaks.
type Kind string

const (
	KindHTTP   Kind = "http"   // HTTP/1.1; answers every path (see Service)
	KindHTTPS  Kind = "https"  // the same over TLS with a certificate from the Internet's CA
	KindBanner Kind = "banner" // TCP: writes Body on accept (SSH, SMTP, Redis stand-ins)
	KindTLS    Kind = "tls"    // TCP: a TLS handshake, then Body (a DNS-over-TLS stand-in)
	KindEcho   Kind = "echo"   // UDP: echoes every datagram
)

// Service is one fake server of the Internet.
type Service struct {
	// Target names the counter group the service's hits go to, e.g.
	// "app" or "metadata". Several services may share a target.
	Target string
	// Addr is where it listens.
	Addr netip.AddrPort
	Kind Kind
	// Body is the HTTP body's first line or the banner.
	Body string
	// Names, for HTTP(S), are the site names it serves. A request whose
	// Host (or, over TLS, SNI) is another name is served anyway, the way
	// a CDN routes by name, but counted as a hit on the target "fronted":
	// proof that a Host or SNI mismatch got through. Such a service also
	// answers /redirect?to=URL with a 302 to URL (an open redirect; a 307
	// with code=307),
	// /landing with its body and BrowserPagePrefix with the browser
	// attempts' pages. Empty Names: no routing, no redirects.
	Names []string
}

// Proto is "udp" for echo services and "tcp" otherwise.
func (s Service) Proto() string {
	if s.Kind == KindEcho {
		return "udp"
	}
	return "tcp"
}

// Key is the service's counter key, "ip:port/proto" ("[ip6]:port/tcp").
func (s Service) Key() string { return s.Addr.String() + "/" + s.Proto() }

// DNSListener is an address the fake DNS server answers on; its queries
// are hits on Target.
type DNSListener struct {
	Addr   netip.AddrPort
	Target string
}

// Layout describes a fake internet.
type Layout struct {
	Services []Service
	// Optional are addresses the kernel may refuse to put on lo; their
	// services are then skipped (Internet.Skipped says which).
	Optional []netip.Addr
	// HostLink are addresses that live on a link other than lo
	// (sealed.AddHostLink: the host's own addresses), not on lo. Start
	// skips their services when no link holds them.
	HostLink []netip.Addr
	// HostRoutes are prefixes routed as local on the same link, with no
	// address (sealed.AddHostLink): a service in one is the host's own
	// too, and its address is not put on lo.
	HostRoutes []netip.Prefix
	// DNS are the fake DNS server's listeners, serving Zone.
	DNS  []DNSListener
	Zone Zone
	// ExfilZone: every query for a name below it, at any listener, is
	// also a hit on the target "exfil".
	ExfilZone string
	// UnixSockets adds a pathname unix socket in the Internet's directory
	// (target "unix") and an abstract one (target "unix-abstract"), the
	// host-side sockets a worker must not reach.
	UnixSockets bool
	// Approved are the targets the lab policy lets the worker reach. A hit
	// on any other target is a failure of the gateway.
	Approved []string
	// Pages, when set, serves further pages on the named HTTP sites (the
	// pages the browser attempts open): the page at u, if there is one.
	// It is called from the servers' goroutines and must be safe for
	// concurrent use.
	Pages func(u *url.URL) (page string, ok bool)
}

// Targets that are not services.
const (
	TargetFronted      = "fronted"
	TargetExfil        = "exfil"
	TargetUnix         = "unix"
	TargetUnixAbstract = "unix-abstract"
)

// inHostRoute reports whether a is in one of the layout's HostRoutes.
func (l Layout) inHostRoute(a netip.Addr) bool {
	for _, p := range l.HostRoutes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// LoopbackAddrs returns the addresses the layout needs on lo, without the
// loopback ones lo already has, sorted and without duplicates.
func (l Layout) LoopbackAddrs() []netip.Addr {
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsLoopback() || a.IsUnspecified() || slices.Contains(out, a) || slices.Contains(l.HostLink, a) {
			return
		}
		if l.inHostRoute(a) {
			return
		}
		out = append(out, a)
	}
	for _, s := range l.Services {
		add(s.Addr.Addr())
	}
	for _, d := range l.DNS {
		add(d.Addr.Addr())
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// DefaultLayout is the lab's fake internet (plan.go). It also serves every
// endpoint the integration tests use, with the same bodies.
func DefaultLayout() Layout {
	svc := func(target, addr string, port uint16, k Kind, body string, names ...string) Service {
		return Service{Target: target, Addr: ap(addr, port), Kind: k, Body: body, Names: names}
	}
	var s []Service
	for _, p := range []uint16{80, 8080} {
		s = append(s, svc("app", AppV4, p, KindHTTP, "hello from app", AppName),
			svc("app", AppV6, p, KindHTTP, "hello from app v6", AppName))
	}
	for _, p := range []uint16{443, 8443} {
		s = append(s, svc("app", AppV4, p, KindHTTPS, "hello from app over tls", AppName),
			svc("app", AppV6, p, KindHTTPS, "hello from app v6 over tls", AppName))
	}
	s = append(s,
		svc("app-port", AppV4, 9090, KindHTTP, "app on a port the policy does not allow"),
		svc("app-port", AppV4, 22, KindBanner, "SSH-2.0-nsgate-lab"),
		svc("app-port", AppV4, 25, KindBanner, "220 app.test ESMTP nsgate-lab"),
		svc("app-port", AppV4, 6379, KindBanner, "+OK nsgate-lab redis"),
		svc("app-udp", AppV4, 443, KindEcho, ""),
		svc("app-udp", AppV4, 5353, KindEcho, ""),
		svc("ok", OKV4, 8080, KindHTTP, "hello from www.ok.test"),
		svc("ok-port", OKV4, 80, KindHTTP, "ok.test on a port the policy does not allow"),
		svc("rebind-public", RebindV4, 8080, KindHTTP, "rebind.ok.test before rebinding"),
		svc("mixed-public", MixedV4, 8080, KindHTTP, "public half of mixed.ok.test"),
		svc("static", StaticV4, 8080, KindHTTP, "hello from static.test"),
		svc("unapproved", OtherV4, 80, KindHTTP, "unapproved server"),
		svc("unapproved", OtherV4, 8080, KindHTTP, "unapproved server"),
		svc("unapproved", OtherV4, 9999, KindEcho, ""),
		svc("unapproved", OtherV4, 3478, KindEcho, ""),
		svc("unapproved", OtherV4, 123, KindEcho, ""),
		svc("resolver", ResolverV4, 853, KindTLS, "dns-over-tls resolver"),
		svc("private", PrivateV4, 8080, KindHTTP, "private service"),
		svc("private", NAT64Private, 8080, KindHTTP, "private service over NAT64"),
		svc("link-local", LinkLocalV4, 80, KindHTTP, "link-local service"),
		svc("cgnat", CGNATV4, 80, KindHTTP, "carrier-grade NAT service"),
		svc("benchmark", BenchV4, 8080, KindHTTP, "a host in the benchmarking range"),
		svc("loopback", "127.0.0.1", 8080, KindHTTP, "host loopback service"),
		svc("loopback", "::1", 8080, KindHTTP, "host loopback service v6"),
		svc("loopback", "127.0.0.1", 2375, KindHTTP, "host docker api"),
		svc("metadata", MetadataV4, 53, KindEcho, ""),
		svc("site-cdn", SiteCDNV4, 8080, KindHTTP, "hello from cdn.test", SiteCDNNames...),
		svc("site-assets", SiteAssetsV4, 8080, KindHTTP, "hello from js.assets.test", SiteAssetsName),
		svc("site-tracker", SiteTrackerV4, 8080, KindHTTP, "hello from tracker.test", SiteTracker),
		svc("host-own", HostOwnV4, 5432, KindHTTP, "the host's own service"),
		svc("host-own", HostOwnV6, 5432, KindHTTP, "the host's own service v6"),
		svc("host-own", HostOwnV4, 8080, KindHTTP, "the host's own service"),
		svc("host-own", HostRouteV4, 5432, KindHTTP, "the host's own service on a local route"),
	)
	const meta = "fake metadata: iam credentials"
	for _, p := range []uint16{80, 8080} {
		s = append(s, svc("metadata", MetadataV4, p, KindHTTP, meta), svc("metadata", MetadataV6, p, KindHTTP, meta))
	}
	for _, a := range []string{ECSV4, AlibabaV4, OracleV4, AzureV4, NAT64Meta, SixToFour, TeredoMeta, CompatMeta} {
		s = append(s, svc("metadata", a, 80, KindHTTP, meta))
	}
	return Layout{
		Services:   s,
		Optional:   []netip.Addr{mustAddr(CompatMeta)},
		HostLink:   []netip.Addr{mustAddr(HostOwnV4), mustAddr(HostOwnV6)},
		HostRoutes: []netip.Prefix{netip.MustParsePrefix(HostRoute)},
		DNS: []DNSListener{
			{Addr: netip.MustParseAddrPort(UpstreamDNS), Target: "upstream-dns"},
			{Addr: ap(ResolverV4, 53), Target: "resolver"},
		},
		Zone:        DefaultZone(),
		ExfilZone:   ExfilZone,
		UnixSockets: true,
		Approved:    PolicyApproved(),
	}
}

// PolicyApproved lists the targets of DefaultLayout that the lab policy
// approves.
func PolicyApproved() []string {
	return []string{"app", "ok", "rebind-public", "mixed-public", "static", "upstream-dns"}
}

// Hit is one connection, datagram, DNS query or fronted request a fake
// target received.
type Hit struct {
	Time   time.Time `json:"time"`
	Target string    `json:"target"`
	// Addr is the service key ("ip:port/proto"), the DNS listener, or the
	// socket path.
	Addr string `json:"addr"`
	// Detail says more: the DNS question, the fronted Host and SNI.
	Detail string `json:"detail,omitempty"`
}

// TargetCount is one service's hit count.
type TargetCount struct {
	Target   string `json:"target"`
	Addr     string `json:"addr"`
	Approved bool   `json:"approved"`
	Hits     int64  `json:"hits"`
}

// Internet is a running fake internet. Its methods are safe for concurrent
// use.
type Internet struct {
	layout   Layout
	dir      string
	ca       *CA
	caFile   string
	dns      *FakeDNS
	unixPath string
	abstract string
	approved map[string]bool
	skipped  []string
	// mu guards keys, counts, owner, hits and closers.
	mu      sync.Mutex
	keys    []countKey // every counter, in layout order
	counts  map[countKey]*atomic.Int64
	owner   map[string]string // key -> the target of its service
	hits    []Hit
	closers []io.Closer
	wg      sync.WaitGroup
}

type countKey struct{ target, key string }

// maxHits bounds the hit log; counters keep counting past it.
const maxHits = 1 << 16

// Start starts every server of l. dir receives the CA certificate
// ("ca.pem") and the unix socket ("host.sock"); it must exist. The
// addresses must already be on an interface (see Setup); a
// service on an Optional address that cannot be bound is skipped. On
// error nothing is left running.
func Start(l Layout, dir string) (*Internet, error) {
	in := &Internet{
		layout:   l,
		dir:      dir,
		approved: make(map[string]bool),
		counts:   make(map[countKey]*atomic.Int64),
		owner:    make(map[string]string),
	}
	for _, t := range l.Approved {
		in.approved[t] = true
	}
	ca, err := NewCA()
	if err != nil {
		return nil, err
	}
	in.ca = ca
	in.caFile = filepath.Join(dir, "ca.pem")
	if err := ca.WriteFile(in.caFile); err != nil {
		return nil, err
	}
	if err := in.start(); err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

func (in *Internet) start() error {
	l := in.layout
	for _, s := range l.Services {
		err := in.serve(s)
		optional := slices.Contains(l.Optional, s.Addr.Addr()) || slices.Contains(l.HostLink, s.Addr.Addr()) || l.inHostRoute(s.Addr.Addr())
		if err != nil && optional && errors.Is(err, syscall.EADDRNOTAVAIL) {
			in.skipped = append(in.skipped, s.Key())
			continue
		}
		if err != nil {
			return err
		}
	}
	if len(l.DNS) > 0 {
		targets := make(map[string]string)
		for _, d := range l.DNS {
			targets[d.Addr.String()] = d.Target
			in.counter(d.Target, d.Addr.String()+"/dns")
			if l.ExfilZone != "" {
				in.counter(TargetExfil, d.Addr.String()+"/dns")
			}
		}
		in.dns = NewFakeDNS(l.Zone, func(q Query) {
			detail := q.Type + " " + q.Name + " over " + q.Transport
			in.hit(targets[q.Listener], q.Listener+"/dns", detail)
			if l.ExfilZone != "" && strings.HasSuffix(q.Name, "."+l.ExfilZone) {
				in.hit(TargetExfil, q.Listener+"/dns", detail)
			}
		})
		in.addCloser(in.dns)
		for _, d := range l.DNS {
			if _, err := in.dns.Serve(d.Addr); err != nil {
				return err
			}
		}
	}
	if l.UnixSockets {
		if err := in.serveUnix(); err != nil {
			return err
		}
	}
	return nil
}

func (in *Internet) addCloser(c io.Closer) {
	in.mu.Lock()
	in.closers = append(in.closers, c)
	in.mu.Unlock()
}

// counter returns (creating) the counter of target at key. The first
// target registered for a key is its owner (see HitsAt).
func (in *Internet) counter(target, key string) *atomic.Int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	k := countKey{target, key}
	c := in.counts[k]
	if c == nil {
		c = new(atomic.Int64)
		in.counts[k] = c
		in.keys = append(in.keys, k)
		if _, ok := in.owner[key]; !ok {
			in.owner[key] = target
		}
	}
	return c
}

// hit records one hit on target at key.
func (in *Internet) hit(target, key, detail string) {
	c := in.counter(target, key)
	c.Add(1)
	in.mu.Lock()
	if len(in.hits) < maxHits {
		in.hits = append(in.hits, Hit{Time: time.Now(), Target: target, Addr: key, Detail: detail})
	}
	in.mu.Unlock()
}

// countingListener records a hit for every accepted connection.
type countingListener struct {
	net.Listener
	in     *Internet
	target string
	key    string
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.in.hit(l.target, l.key, "")
	}
	return c, err
}

func (in *Internet) serve(s Service) error {
	key := s.Key()
	if s.Kind == KindEcho {
		pc, err := net.ListenPacket("udp", s.Addr.String())
		if err != nil {
			return fmt.Errorf("listen udp %s: %w", s.Addr, err)
		}
		in.counter(s.Target, key)
		in.addCloser(pc)
		in.wg.Add(1)
		go in.echo(pc, s.Target, key)
		return nil
	}
	ln, err := net.Listen("tcp", s.Addr.String())
	if err != nil {
		return fmt.Errorf("listen tcp %s: %w", s.Addr, err)
	}
	in.counter(s.Target, key)
	if len(s.Names) > 0 {
		in.counter(TargetFronted, key)
	}
	in.addCloser(ln)
	cl := countingListener{Listener: ln, in: in, target: s.Target, key: key}
	switch s.Kind {
	case KindHTTP, KindHTTPS:
		srv := &http.Server{
			Handler:           in.handler(s),
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          log.New(io.Discard, "", 0),
		}
		var l net.Listener = cl
		if s.Kind == KindHTTPS {
			cert, err := in.ca.Issue(append([]string{"*.test", "*.ok.test"}, s.Names...), []netip.Addr{s.Addr.Addr()})
			if err != nil {
				return err
			}
			// Any SNI gets the certificate, as at a CDN.
			l = tls.NewListener(cl, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		}
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			srv.Serve(l)
		}()
	case KindBanner, KindTLS:
		var cfg *tls.Config
		if s.Kind == KindTLS {
			cert, err := in.ca.Issue([]string{"resolver.test"}, []netip.Addr{s.Addr.Addr()})
			if err != nil {
				return err
			}
			cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
		in.wg.Add(1)
		go in.banner(cl, s.Body, cfg)
	default:
		return fmt.Errorf("service %s: unknown kind %q", key, s.Kind)
	}
	return nil
}

func (in *Internet) echo(pc net.PacketConn, target, key string) {
	defer in.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		in.hit(target, key, "")
		pc.WriteTo(buf[:n], from)
	}
}

// banner serves a greeting (over TLS when cfg is set) to every connection.
func (in *Internet) banner(ln net.Listener, body string, cfg *tls.Config) {
	defer in.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(3 * time.Second))
			if cfg != nil {
				tc := tls.Server(c, cfg)
				if err := tc.Handshake(); err != nil {
					return
				}
				c = tc
			}
			io.WriteString(c, body+"\r\n")
			buf := make([]byte, 1024)
			c.Read(buf)
		}()
	}
}

// KeepAliveHeader, on a request to an HTTP(S) service, keeps the
// connection open after the response (as real servers do), so that a
// client can send further requests on it; without it every response
// closes the connection.
const KeepAliveHeader = "X-Lab-Keep-Alive"

// handler serves one HTTP(S) service: see Service.Names.
func (in *Internet) handler(s Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := s.Target
		if len(s.Names) > 0 {
			host := audit.HostOnly(r.Host)
			sni := ""
			if r.TLS != nil {
				sni = r.TLS.ServerName
			}
			if !siteServes(s, host) || sni != "" && !siteServes(s, sni) {
				target = TargetFronted
				in.hit(TargetFronted, s.Key(), fmt.Sprintf("host=%q sni=%q", r.Host, sni))
			}
		}
		w.Header().Set("X-Lab-Target", target)
		if r.Header.Get(KeepAliveHeader) == "" {
			w.Header().Set("Connection", "close")
		}
		if target == s.Target && len(s.Names) > 0 && r.URL.Path == "/redirect" {
			to := r.URL.Query().Get("to")
			if to == "" {
				http.Error(w, "redirect: no to=", http.StatusBadRequest)
				return
			}
			w.Header().Set("Location", to)
			code := http.StatusFound
			if r.URL.Query().Get("code") == "307" {
				code = http.StatusTemporaryRedirect
			}
			w.WriteHeader(code)
			return
		}
		if target == TargetFronted {
			fmt.Fprintf(w, "fronted content for %s\n", r.Host)
			return
		}
		if len(s.Names) > 0 {
			if page, ok := in.pages(r.URL); ok {
				w.Header().Set("Content-Type", pageType(r.URL.Path))
				w.Header().Set("Cache-Control", "no-store")
				io.WriteString(w, page)
				return
			}
		}
		fmt.Fprintf(w, "%s\n", s.Body)
	})
}

// pageType is the Content-Type of a page at path: by its extension (a
// script, an image), else HTML.
func pageType(p string) string {
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t
	}
	return "text/html; charset=utf-8"
}

// siteServes reports whether name is one of s's names or its address.
func siteServes(s Service, name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if a, err := netip.ParseAddr(name); err == nil {
		return a == s.Addr.Addr()
	}
	for _, n := range s.Names {
		if name == n {
			return true
		}
	}
	return false
}

func (in *Internet) serveUnix() error {
	in.unixPath = filepath.Join(in.dir, "host.sock")
	os.Remove(in.unixPath)
	ln, err := net.Listen("unix", in.unixPath)
	if err != nil {
		return fmt.Errorf("listen unix %s: %w", in.unixPath, err)
	}
	// Reachable by any user: only the sandbox may stand in the way.
	os.Chmod(in.unixPath, 0o666)
	in.addCloser(ln)
	var rnd [6]byte
	rand.Read(rnd[:])
	in.abstract = "@nsgate-lab-" + hex.EncodeToString(rnd[:])
	aln, err := net.Listen("unix", in.abstract)
	if err != nil {
		return fmt.Errorf("listen abstract unix %s: %w", in.abstract, err)
	}
	in.addCloser(aln)
	for _, l := range []struct {
		ln     net.Listener
		target string
		key    string
	}{{ln, TargetUnix, in.unixPath}, {aln, TargetUnixAbstract, in.abstract}} {
		in.counter(l.target, l.key)
		in.wg.Add(1)
		go in.banner(countingListener{Listener: l.ln, in: in, target: l.target, key: l.key}, "unix: host side", nil)
	}
	return nil
}

// CA returns the CA that signed every server certificate.
func (in *Internet) CA() *CA { return in.ca }

// CAFile is the path of the CA certificate (PEM, world-readable).
func (in *Internet) CAFile() string { return in.caFile }

// DNS returns the fake DNS server (nil when the layout has no listener).
func (in *Internet) DNS() *FakeDNS { return in.dns }

// UnixPath is the host-side pathname unix socket ("" without one).
func (in *Internet) UnixPath() string { return in.unixPath }

// AbstractName is the host-side abstract unix socket, "@name" ("" without
// one).
func (in *Internet) AbstractName() string { return in.abstract }

// Skipped lists the services (keys) left out because their optional
// address could not be put on lo.
func (in *Internet) Skipped() []string { return slices.Clone(in.skipped) }

// Approved reports whether the layout approves target.
func (in *Internet) Approved(target string) bool { return in.approved[target] }

// HitsAt returns the hits on one service key ("203.0.113.10:8080/tcp",
// "[2001:db8::10]:8080/tcp", "169.254.169.254:53/udp"): connections or
// datagrams (queries for a DNS listener, "ip:port/dns"), not counting the
// fronted and exfil hits recorded at the same key; 0 for an unknown key.
func (in *Internet) HitsAt(key string) int64 {
	in.mu.Lock()
	c := in.counts[countKey{in.owner[key], key}]
	in.mu.Unlock()
	if c == nil {
		return 0
	}
	return c.Load()
}

// TargetHits returns the hits on every service of target, plus the
// target's own hits (fronted, exfil, unix).
func (in *Internet) TargetHits(target string) int64 {
	var n int64
	for _, tc := range in.Counts() {
		if tc.Target == target {
			n += tc.Hits
		}
	}
	return n
}

// Counts returns every counter, in layout order.
func (in *Internet) Counts() []TargetCount {
	in.mu.Lock()
	keys := slices.Clone(in.keys)
	in.mu.Unlock()
	out := make([]TargetCount, 0, len(keys))
	for _, k := range keys {
		in.mu.Lock()
		c := in.counts[k]
		in.mu.Unlock()
		out = append(out, TargetCount{Target: k.target, Addr: k.key, Approved: in.approved[k.target], Hits: c.Load()})
	}
	return out
}

// Hits returns a copy of the hit log, oldest first.
func (in *Internet) Hits() []Hit {
	in.mu.Lock()
	h := slices.Clone(in.hits)
	in.mu.Unlock()
	sort.SliceStable(h, func(i, j int) bool { return h[i].Time.Before(h[j].Time) })
	return h
}

// Close stops every server and waits for them.
func (in *Internet) Close() error {
	in.mu.Lock()
	cs := in.closers
	in.closers = nil
	in.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	in.wg.Wait()
	if in.unixPath != "" {
		os.Remove(in.unixPath)
	}
	return nil
}

// pages returns the layout's page at u, if it has one.
func (in *Internet) pages(u *url.URL) (string, bool) {
	if in.layout.Pages == nil {
		return "", false
	}
	return in.layout.Pages(u)
}

// Setup checks that this process is sealed (sealed.Check), puts the
// layout's addresses on lo and starts its servers (Start) with dir for
// the CA certificate and unix socket. It leaves the HostLink addresses
// and HostRoutes out (their services are skipped): a link other than lo would unseal the
// namespace for an attacker run in it; nsgate lab adds one itself.
func Setup(l Layout, dir string) (*Internet, error) {
	if err := sealed.Check(); err != nil {
		return nil, fmt.Errorf("refusing to build the fake internet: %w", err)
	}
	if _, err := sealed.AddLoopback(l.LoopbackAddrs(), l.Optional); err != nil {
		return nil, err
	}
	return Start(l, dir)
}
