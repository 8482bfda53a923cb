package attack

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/lab/sealed"
)

// Config configures the attacker (`nsgate __attack`), which runs
// inside the worker.
type Config struct {
	// CAFile is the lab CA certificate (PEM) the controls verify HTTPS
	// against. Empty: HTTPS controls fail verification.
	CAFile string
	// UnixPath and Abstract are the host-side unix sockets to try.
	UnixPath, Abstract string
	// Self is the attacker's own executable, for helper processes
	// (default os.Executable). HelperArgs are the arguments that make it
	// a helper; the helper's own arguments follow them.
	Self       string
	HelperArgs []string
	// Only, when non-empty, restricts the run to these attempt IDs.
	Only []string
	// Timeout bounds one network operation (default 2 s).
	Timeout time.Duration
	// Cooldown is the least time between two attempts that share a key
	// (Attempt.Keys; default 1.1 s, just over the audit log's aggregation
	// window).
	Cooldown time.Duration
	// DNSServer is the gateway's resolver (default 10.0.2.3:53).
	DNSServer string

	// The containment attempts (containment.go): a token unique to the
	// run that names the files they write, nsgate's own files at their
	// host paths, the lab's work directory (shown read-only) and the
	// --rw directory. $HOME is the worker's own.
	Token                           string
	PolicyFile, AuditFile, AuditKey string
	WorkDir, RWDir                  string
}

// Observation is the attacker's report on one attempt: one JSON line on
// its standard output.
type Observation struct {
	ID       string    `json:"id"`
	Observed Outcome   `json:"observed"`
	Detail   string    `json:"detail"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	// Partial marks a progress report of an attempt still running (one
	// that may be ended from outside, as audit-fill-volume is): the last
	// one stands if no final observation follows.
	Partial bool `json:"partial,omitempty"`
	// Screenshot is the PNG of what a browser agent saw at the end of the
	// attempt, as a path relative to the evidence directory
	// (ScreenshotDir/ID.png); "" for attempts without a browser.
	Screenshot string `json:"screenshot,omitempty"`
}

// ScreenshotDir is the evidence directory's folder of the browser
// attempts' screenshots.
const ScreenshotDir = "screenshots"

// attacker is the state shared by the attempts of one run. It is used by
// one goroutine at a time.
type attacker struct {
	cfg    Config
	roots  *x509.CertPool
	marker string // printed by a shell that ran: proof of exec
	secret string // "exfiltrated" data, unique per run
	// progress reports how the running attempt is getting on (a Partial
	// observation).
	progress func(detail string)
}

// Run runs the catalogue's attempts (cfg.Only, if set; else all but
// those that need a run of their own, Attempt.Phase) in order,
// keeping cfg.Cooldown between attempts that share a key (Attempt.Keys)
// (it runs later attempts meanwhile), and calls emit with each
// Observation as it completes. It returns when every attempt has run or
// ctx is done. An unknown ID in cfg.Only is an error before anything
// runs.
func Run(ctx context.Context, cfg Config, emit func(Observation)) error {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = 1100 * time.Millisecond
	}
	if cfg.DNSServer == "" {
		cfg.DNSServer = internet.DNSV4 + ":53"
	}
	if cfg.Self == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable: %w", err)
		}
		cfg.Self = self
	}
	var todo []Attempt
	for _, at := range Catalogue() {
		if at.Phase == "" {
			todo = append(todo, at)
		}
	}
	if len(cfg.Only) > 0 {
		var sel []Attempt
		for _, id := range cfg.Only {
			at, ok := Find(id)
			if !ok {
				return fmt.Errorf("unknown attempt %q", id)
			}
			sel = append(sel, at)
		}
		todo = sel
	}
	if err := attackerSealed(); err != nil {
		return err
	}
	a := &attacker{cfg: cfg, marker: "nsgate-lab-exec-" + randHex(6), secret: randHex(8)}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return fmt.Errorf("read lab CA: %w", err)
		}
		a.roots = x509.NewCertPool()
		if !a.roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("lab CA %s: no certificate", cfg.CAFile)
		}
	}
	lastUse := make(map[string]time.Time)
	for len(todo) > 0 && ctx.Err() == nil {
		i, wait := nextAttempt(todo, lastUse, cfg.Cooldown, time.Now())
		if wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			continue
		}
		at := todo[i]
		todo = slices.Delete(todo, i, i+1)
		start := time.Now()
		a.progress = func(detail string) {
			emit(Observation{ID: at.ID, Observed: Errored, Detail: oneLine(detail), Start: start, End: time.Now(), Partial: true})
		}
		obs := a.runOne(ctx, at)
		for _, k := range at.Keys {
			lastUse[k] = obs.End
		}
		emit(obs)
	}
	return ctx.Err()
}

// attackerSealed refuses to attack from anywhere but a worker of nsgate
// (interfaces lo and tun0, tun0 holding the worker's 10.0.2.100) or a
// sealed namespace (lo only): on a real host the attempts would send
// packets to real metadata services and off the machine.
func attackerSealed() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, i := range ifs {
		if i.Name == "lo" || i.Name == "tun0" && holds(i, net.ParseIP(internet.GuestV4)) || sealed.FallbackTunnel(i) {
			continue
		}
		return fmt.Errorf("refusing to attack from a network namespace with interface %s: the attacker runs only as the worker of nsgate lab", i.Name)
	}
	return nil
}

// holds reports whether the interface has the address ip.
func holds(i net.Interface, ip net.IP) bool {
	addrs, _ := i.Addrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// nextAttempt picks the first attempt whose cooldown keys are all cool at
// now, or, when none is, says how long to wait for the first to be.
func nextAttempt(todo []Attempt, lastUse map[string]time.Time, cool time.Duration, now time.Time) (int, time.Duration) {
	var minWait time.Duration = -1
	for i, at := range todo {
		var wait time.Duration
		for _, k := range at.Keys {
			if t, ok := lastUse[k]; ok {
				wait = max(wait, t.Add(cool).Sub(now))
			}
		}
		if wait <= 0 {
			return i, 0
		}
		if minWait < 0 || wait < minWait {
			minWait = wait
		}
	}
	return 0, minWait
}

// runOne runs one attempt with a bound on its whole duration, turning a
// panic into an Errored observation.
func (a *attacker) runOne(ctx context.Context, at Attempt) (obs Observation) {
	obs = Observation{ID: at.ID, Start: time.Now()}
	defer func() {
		if p := recover(); p != nil {
			obs.Observed, obs.Detail = Errored, fmt.Sprintf("attacker panic: %v", p)
		}
		obs.End = time.Now()
	}()
	if at.run == nil {
		obs.Observed, obs.Detail = Errored, "planned, not built"
		return obs
	}
	actx, cancel := context.WithTimeout(ctx, 8*a.cfg.Timeout)
	defer cancel()
	r := at.run(actx, a)
	obs.Observed, obs.Detail = r.out, oneLine(r.detail)
	return obs
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// oneLine flattens s and bounds its length for the evidence table.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}

// dialer returns a dialer bounded by the operation timeout that resolves
// names through the worker's resolv.conf in pure Go.
func (a *attacker) dialer() *net.Dialer {
	return &net.Dialer{Timeout: a.cfg.Timeout, Resolver: &net.Resolver{PreferGo: true}}
}

// fetchOpts are the knobs of one HTTP fetch.
type fetchOpts struct {
	follow bool   // follow redirects (up to 5)
	verify bool   // verify TLS against the lab CA (else accept any certificate)
	host   string // Host header to send instead of the URL's
}

// fetched is what one HTTP fetch saw.
type fetched struct {
	status int
	target string   // the X-Lab-Target header of the last response
	hops   []string // the URLs redirected to, in order
	body   string
	err    error
}

// fetch GETs url with net/http (no proxy, no keep-alive). Redirect
// targets whose host inet_aton reads as a number are rewritten to the
// dotted address first, as browsers do.
func (a *attacker) fetch(ctx context.Context, url string, o fetchOpts) fetched {
	var f fetched
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           a.dialer().DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: a.roots, InsecureSkipVerify: !o.verify},
		DisableKeepAlives:     true,
		TLSHandshakeTimeout:   a.cfg.Timeout,
		ResponseHeaderTimeout: a.cfg.Timeout,
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{
		Transport: tr,
		Timeout:   4 * a.cfg.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// Read the new host as a browser's URL parser does: a
			// number that inet_aton accepts is an IPv4 address.
			if h := req.URL.Hostname(); h != "" {
				if ip, ok := ParseInetAton(h); ok && ip.String() != h {
					req.URL.Host = ip.String()
					if p := req.URL.Port(); p != "" {
						req.URL.Host += ":" + p
					}
					req.Host = req.URL.Host
				}
			}
			f.hops = append(f.hops, req.URL.String())
			if !o.follow {
				return http.ErrUseLastResponse
			}
			if len(via) >= 5 {
				return errors.New("stopped after 5 redirects")
			}
			return nil
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		f.err = err
		return f
	}
	if o.host != "" {
		req.Host = o.host
	}
	resp, err := cl.Do(req)
	if err != nil {
		f.err = err
		return f
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	f.status, f.target, f.body = resp.StatusCode, resp.Header.Get("X-Lab-Target"), strings.TrimSpace(string(b))
	return f
}

// describe summarises a fetch that got a response.
func (f fetched) describe() string {
	s := fmt.Sprintf("HTTP %d from target %q", f.status, f.target)
	if len(f.hops) > 0 {
		s += fmt.Sprintf(" after %d redirect(s), last to %s", len(f.hops), f.hops[len(f.hops)-1])
	}
	return s
}

// rawHTTP sends req as is over a connection to addr (a name is resolved
// through the gateway), over TLS when tlsCfg is set, and reads one
// response.
func (a *attacker) rawHTTP(ctx context.Context, addr string, tlsCfg *tls.Config, req string) fetched {
	var f fetched
	c, err := a.dialer().DialContext(ctx, "tcp", addr)
	if err != nil {
		f.err = err
		return f
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * a.cfg.Timeout))
	if tlsCfg != nil {
		tc := tls.Client(c, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			f.err = fmt.Errorf("tls handshake: %w", err)
			return f
		}
		c = tc
	}
	if _, err := io.WriteString(c, req); err != nil {
		f.err = fmt.Errorf("write request: %w", err)
		return f
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		f.err = fmt.Errorf("read response: %w", err)
		return f
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	f.status, f.target, f.body = resp.StatusCode, resp.Header.Get("X-Lab-Target"), strings.TrimSpace(string(b))
	return f
}

// banner connects to addr and reads what the server says first.
func (a *attacker) banner(ctx context.Context, network, addr string, tlsCfg *tls.Config) (string, error) {
	d := a.dialer()
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(a.cfg.Timeout))
	if tlsCfg != nil {
		tc := tls.Client(c, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return "", fmt.Errorf("tls handshake: %w", err)
		}
		c = tc
	}
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if n > 0 {
		return strings.TrimSpace(string(buf[:n])), nil
	}
	if err == nil {
		err = errors.New("no bytes")
	}
	return "", fmt.Errorf("connected, then %w", err)
}

// udpExchange sends payload to addr up to three times and waits for a
// reply after each.
func (a *attacker) udpExchange(ctx context.Context, addr string, payload []byte) ([]byte, error) {
	c, err := a.dialer().DialContext(ctx, "udp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	buf := make([]byte, 2048)
	per := a.cfg.Timeout / 3
	var last error
	for i := 0; i < 3 && ctx.Err() == nil; i++ {
		if _, err := c.Write(payload); err != nil {
			return nil, err
		}
		c.SetReadDeadline(time.Now().Add(per))
		n, err := c.Read(buf)
		if err == nil {
			return buf[:n], nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return nil, err
		}
		last = err
	}
	return nil, fmt.Errorf("no reply: %w", last)
}

// dnsAnswer is what one DNS exchange returned.
type dnsAnswer struct {
	rcode   dnsmessage.RCode
	answers []string // "TYPE value" for every answer record of the asked type
	other   []string // other answer records
}

func (d dnsAnswer) String() string {
	s := internet.RCodeName(d.rcode)
	if len(d.answers) == 0 && len(d.other) == 0 {
		return s + ", no answer"
	}
	return s + ": " + strings.Join(append(slices.Clone(d.answers), d.other...), ", ")
}

// dnsExchange sends one query for name (raw bytes, no escaping) and qtype
// to server over "udp" or "tcp".
func (a *attacker) dnsExchange(ctx context.Context, server, transport, name string, qtype dnsmessage.Type) (dnsAnswer, error) {
	var out dnsAnswer
	qn, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return out, fmt.Errorf("build name: %w", err)
	}
	var idb [2]byte
	rand.Read(idb[:])
	id := binary.BigEndian.Uint16(idb[:])
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: qn, Type: qtype, Class: dnsmessage.ClassINET}); err != nil {
		return out, fmt.Errorf("build query: %w", err)
	}
	msg, err := b.Finish()
	if err != nil {
		return out, fmt.Errorf("build query: %w", err)
	}
	c, err := (&net.Dialer{Timeout: a.cfg.Timeout}).DialContext(ctx, transport, server)
	if err != nil {
		return out, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(a.cfg.Timeout))
	var resp []byte
	if transport == "tcp" {
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)); err != nil {
			return out, err
		}
		var lb [2]byte
		if _, err := io.ReadFull(c, lb[:]); err != nil {
			return out, err
		}
		resp = make([]byte, binary.BigEndian.Uint16(lb[:]))
		if _, err := io.ReadFull(c, resp); err != nil {
			return out, err
		}
	} else {
		if _, err := c.Write(msg); err != nil {
			return out, err
		}
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			return out, err
		}
		resp = buf[:n]
	}
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return out, fmt.Errorf("parse reply: %w", err)
	}
	if h.ID != id {
		return out, errors.New("reply with another id")
	}
	out.rcode = h.RCode
	if err := p.SkipAllQuestions(); err != nil {
		return out, fmt.Errorf("parse reply: %w", err)
	}
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			break
		}
		val := internet.TypeName(rh.Type)
		switch rh.Type {
		case dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return out, err
			}
			val += " " + netip.AddrFrom4(r.A).String()
		case dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return out, err
			}
			val += " " + netip.AddrFrom16(r.AAAA).String()
		case dnsmessage.TypeTXT:
			r, err := p.TXTResource()
			if err != nil {
				return out, err
			}
			val += fmt.Sprintf(" %q", r.TXT)
		case dnsmessage.TypeCNAME:
			r, err := p.CNAMEResource()
			if err != nil {
				return out, err
			}
			val += " " + r.CNAME.String()
		default:
			if err := p.SkipAnswer(); err != nil {
				return out, err
			}
		}
		if rh.Type == qtype {
			out.answers = append(out.answers, val)
		} else {
			out.other = append(out.other, val)
		}
	}
	return out, nil
}

// errnoOf returns the errno inside err, or 0.
func errnoOf(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return 0
}

// isRefusal reports whether err is the kind of error a refusing gateway or
// sandbox produces (as opposed to a broken attacker).
func isRefusal(err error) bool {
	switch errnoOf(err) {
	case syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		syscall.EACCES, syscall.EPERM, syscall.ETIMEDOUT, syscall.EPIPE, syscall.EADDRNOTAVAIL:
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}

// shorten bounds s to n bytes for a progress line or a detail.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// rawStream sends parts over one connection to addr (a name is resolved
// through the gateway), each in a write of its own with a pause between:
// first pre, raw (a TLS record ahead of the ClientHello, say); then,
// when tlsCfg is set, a TLS handshake; then the parts, over TLS if it was
// made. It then reads up to n responses, and returns those it read, with
// the error that ended it (nil once n were read).
func (a *attacker) rawStream(ctx context.Context, addr string, pre []byte, tlsCfg *tls.Config, n int, parts ...string) ([]fetched, error) {
	c, err := a.dialer().DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * a.cfg.Timeout))
	if len(pre) > 0 {
		if _, err := c.Write(pre); err != nil {
			return nil, fmt.Errorf("write before the handshake: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if tlsCfg != nil {
		tc := tls.Client(c, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		c = tc
	}
	for i, p := range parts {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := io.WriteString(c, p); err != nil {
			return nil, fmt.Errorf("write part %d: %w", i+1, err)
		}
	}
	br := bufio.NewReader(c)
	var got []fetched
	for len(got) < n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return got, fmt.Errorf("read response %d: %w", len(got)+1, err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		got = append(got, fetched{status: resp.StatusCode, target: resp.Header.Get("X-Lab-Target"), body: strings.TrimSpace(string(b))})
	}
	return got, nil
}
