package lab

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nsgate/nsgate/audit"
	"github.com/nsgate/nsgate/lab/attack"
	"github.com/nsgate/nsgate/lab/internet"
	"github.com/nsgate/nsgate/lab/judge"
	"github.com/nsgate/nsgate/tlsca"
)

// The lab's side of the credential attempts (attack.PhaseCredentials):
// two fake upstreams that record every request, a secret only the lab
// knows, one `nsgate run` of their own under a policy that terminates
// TLS for both upstreams and brokers the secret to one of them, and the
// judgement of each attempt on what the worker saw, what the upstreams
// got and the run's own audit log.

// credHit is one request a fake upstream received.
type credHit struct {
	time          time.Time
	target        string
	method, uri   string
	auth          string
	secret, place bool // the secret, a placeholder anywhere in the request
}

// credUpstreams are the phase's fake upstreams.
type credUpstreams struct {
	secret string
	ca     *tlsca.CA
	mu     sync.Mutex
	hits   []credHit
	srvs   []*http.Server
}

var placeholderRE = regexp.MustCompile(`(?i)` + attack.CredPlaceholderPrefix + `[0-9a-f]{40}`)

func startCredUpstreams(secret string) (*credUpstreams, error) {
	ca, err := tlsca.New(tlsca.Options{})
	if err != nil {
		return nil, err
	}
	u := &credUpstreams{secret: secret, ca: ca}
	for _, s := range []struct {
		target, name string
		port         int
		protos       []string
	}{
		{"creds-api", attack.CredAPIName, attack.CredAPIPort, []string{"http/1.1"}},
		{"creds-other", attack.CredOtherName, attack.CredOtherPort, []string{"h2", "http/1.1"}},
	} {
		ln, err := net.Listen("tcp", net.JoinHostPort(internet.AppV4, strconv.Itoa(s.port)))
		if err != nil {
			u.close()
			return nil, fmt.Errorf("the %s upstream: %w", s.name, err)
		}
		name := s.name
		srv := &http.Server{
			Handler:           u.handler(s.target),
			TLSConfig:         &tls.Config{NextProtos: s.protos, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(name) }},
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          log.New(io.Discard, "", 0),
		}
		if len(s.protos) == 1 {
			srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		}
		u.srvs = append(u.srvs, srv)
		go srv.ServeTLS(ln, "", "")
	}
	return u, nil
}

func (u *credUpstreams) handler(target string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var all bytes.Buffer
		fmt.Fprintf(&all, "%s %s %s\n", r.Method, r.RequestURI, r.Host)
		r.Header.Write(&all)
		all.Write(body)
		h := credHit{time: time.Now(), target: target, method: r.Method, uri: r.RequestURI, auth: r.Header.Get("Authorization"),
			secret: bytes.Contains(all.Bytes(), []byte(u.secret)), place: placeholderRE.Match(all.Bytes())}
		u.mu.Lock()
		u.hits = append(u.hits, h)
		u.mu.Unlock()
		auth := r.Header.Get("Authorization")
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			u.serveWS(w, target)
			return
		}
		if up := r.Header.Get("Upgrade"); up != "" {
			// Any other protocol (Docker's attach, Kubernetes' SPDY
			// exec): switch, then talk raw, starting with the echo.
			c, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n\r\ntunnel-echo %s\n", up, auth)
			rw.Flush()
			return
		}
		switch r.URL.Path {
		case "/echo":
			// An echo endpoint: it reflects what it got.
			w.Header().Set("X-Echo", auth)
			fmt.Fprintf(w, "echo %s\n", auth)
			return
		case "/echo-trailer":
			// In a declared trailer and an undeclared one, after the body.
			w.Header().Set("Trailer", "X-Echo-Trailer")
			io.WriteString(w, "the echo is in the trailers\n")
			w.Header().Set("X-Echo-Trailer", auth)
			w.Header().Set(http.TrailerPrefix+"X-Late", auth)
			return
		case "/echo-103":
			w.Header().Set("Link", "</s?t="+url.QueryEscape(auth)+">; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "the echo was in the 103\n")
			return
		case "/echo-deflate":
			w.Header().Set("Content-Encoding", "deflate")
			fw, _ := flate.NewWriter(w, flate.BestSpeed)
			fmt.Fprintf(fw, "echo %s\n", auth)
			fw.Close()
			return
		case "/echo-encoded":
			// The echo in forms every client decodes (percent-encoded,
			// HTML character references, UTF-16), gzipped behind an empty
			// first Content-Encoding that hides the gzip from a check of
			// the first value alone.
			w.Header()["Content-Encoding"] = []string{"", "gzip"}
			zw := gzip.NewWriter(w)
			fmt.Fprintf(zw, "pct: %s\nhtml: %s\nutf16: %s\n", attack.EncodeEvery(auth, "%%%02X"), attack.EncodeEvery(auth, "&#%d;"), attack.UTF16LE(auth))
			// And the mixes real encoders write: Python's quote keeping
			// '/', .NET's JSON escaping '+', html/template in an
			// unquoted attribute.
			fmt.Fprintf(zw, "quote: %s\njson: %s\nattr: %s\n",
				strings.NewReplacer("+", "%2B", "=", "%3D", " ", "%20").Replace(auth),
				strings.NewReplacer("+", `\u002B`).Replace(auth),
				strings.NewReplacer("+", "&#43;", "=", "&#61;").Replace(auth))
			zw.Close()
			return
		case "/echo-case":
			// Quoted upper- and lower-cased, as an error page may.
			fmt.Fprintf(w, "echo-case: %s | %s\n", strings.ToUpper(auth), strings.ToLower(auth))
			return
		case "/echo-doc":
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader("echo-doc: "+auth+"\n"))
			return
		}
		fmt.Fprintf(w, "%s ok\n", target)
	})
}

// serveWS answers a WebSocket upgrade and records each message it gets
// as a hit (uri "ws-message"), echoing it back.
func (u *credUpstreams) serveWS(w http.ResponseWriter, target string) {
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: lab\r\n\r\n")
	rw.Flush()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for {
		var hdr [2]byte
		if _, err := io.ReadFull(rw, hdr[:]); err != nil {
			return
		}
		n := int(hdr[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			io.ReadFull(rw, b[:])
			n = int(b[0])<<8 | int(b[1])
		case 127:
			return
		}
		var mask [4]byte
		if hdr[1]&0x80 != 0 {
			io.ReadFull(rw, mask[:])
		}
		if n > 1<<20 {
			return
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(rw, p); err != nil {
			return
		}
		for i := range p {
			p[i] ^= mask[i%4]
		}
		if hdr[0]&0x0f == 0x8 {
			return
		}
		u.mu.Lock()
		u.hits = append(u.hits, credHit{time: time.Now(), target: target, method: "WS", uri: "ws-message",
			secret: bytes.Contains(p, []byte(u.secret)), place: placeholderRE.Match(p)})
		u.mu.Unlock()
		if n <= 125 {
			rw.Write(append([]byte{0x81, byte(n)}, p...))
			rw.Flush()
		}
	}
}

func (u *credUpstreams) all() []credHit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]credHit(nil), u.hits...)
}

func (u *credUpstreams) close() {
	for _, s := range u.srvs {
		s.Close()
	}
}

// credPolicy is the phase's policy: both upstreams terminated, request
// rules on the api, the credential from the secret file, and a zone of
// names resolved upstream for the DNS leak.
func credPolicy(secretFile, upstreamCA string) string {
	return fmt.Sprintf(`version: 1
allow:
  - host: %[1]s
    ports: [%[2]d]
    tls: terminate
    requests:
      - methods: [GET]
        paths: ["/v1/**", "/echo", "/echo-trailer", "/echo-103", "/echo-deflate", "/echo-doc", "/echo-case", "/echo-encoded"]
      - methods: [POST]
        paths: ["/v1/upload"]
      - methods: [GET]
        paths: ["/search"]
        query: {q: "repo:lab/*"}
  - host: %[3]s
    ports: [%[4]d]
    tls: terminate
  - host: "*.%[5]s"
    ports: [443]
dns:
  upstream: ["%[6]s"]
  hosts:
    %[1]s: [%[7]s]
    %[3]s: [%[7]s]
tls:
  upstream_ca: %[8]s
credentials:
  - name: lab-api
    from: {file: %[9]s}
    placeholder_env: %[10]s
    hosts: [%[1]s]
    header: Authorization
    format: "Bearer {}"
`, attack.CredAPIName, attack.CredAPIPort, attack.CredOtherName, attack.CredOtherPort, attack.CredLeakZone,
		internet.UpstreamDNS, internet.AppV4, upstreamCA, secretFile, attack.CredPlaceholderEnv)
}

// credRecord says which of the run's records evidence attempt id.
func credRecord(id string, rec audit.Record) bool {
	var f struct {
		Action, Host, Path, Where, Reason, Rule string
	}
	json.Unmarshal(rec.Raw, &f)
	cred := rec.Name == "credential" && f.Action == "deny"
	req := rec.Name == "request"
	switch id {
	case "control-credentials":
		return req && f.Action == "allow" && f.Path == "/v1/ok"
	case "creds-echo", "creds-echo-trailer", "creds-echo-early-hints", "creds-echo-encoding", "creds-echo-range", "creds-echo-case", "creds-echo-encoded":
		return req && f.Action == "allow" && f.Path == attack.CredEchoPaths[id]
	case "creds-other-host":
		return cred && f.Host == attack.CredOtherName
	case "creds-in-body":
		return cred && strings.HasPrefix(f.Where, "body")
	case "creds-in-query":
		return cred && f.Where == "the URL"
	case "creds-in-dns":
		return cred && f.Where == "a DNS name"
	case "creds-path-confusion":
		return req && f.Action == "deny" && f.Host == attack.CredAPIName && f.Rule != "credential" && !strings.HasPrefix(f.Reason, "fronting") && !strings.Contains(f.Reason, "override")
	case "creds-upgrade-tunnel":
		return req && f.Action == "deny" && strings.Contains(f.Reason, "Upgrade")
	case "creds-query-pollution":
		return req && f.Action == "deny" && f.Path == "/search"
	case "creds-method-override", "creds-method-override-form":
		return req && f.Action == "deny" && strings.Contains(f.Reason, "override")
	case "creds-ws-placeholder":
		return cred && f.Where == "a WebSocket message"
	case "creds-fronting":
		return req && f.Action == "deny" && strings.HasPrefix(f.Reason, "fronting")
	}
	return false
}

// credDecision is the Decision a request or credential record carries,
// read from the record as written (package audit's reader leaves these
// events undecoded).
func credDecision(rec audit.Record) *judge.Decision {
	var f struct {
		Action, Rule, Reason, Method, Host, Path, Where, Credential string
		Status                                                      int
	}
	json.Unmarshal(rec.Raw, &f)
	d := &judge.Decision{Seq: rec.Seq, Event: rec.Name, Action: f.Action, Rule: f.Rule, Reason: f.Reason}
	switch {
	case d.Reason != "":
	case rec.Name == "request":
		d.Reason = fmt.Sprintf("%s %s%s %d", f.Method, f.Host, f.Path, f.Status)
	default:
		d.Reason = "credential " + f.Credential + " seen in " + f.Where
	}
	return d
}

// runCredentials runs the credential attempts (attack.PhaseCredentials)
// in one `nsgate run` of their own and judges each. It also returns the
// run's audit log (in the evidence folder), or "" if the run never began.
func runCredentials(ctx context.Context, cfg Config, ats []attack.Attempt, h *attack.HostEnv, env, breakArgs []string, inet *internet.Internet) ([]judge.Result, string) {
	var out []judge.Result
	failAll := func(why string) ([]judge.Result, string) {
		for _, at := range ats {
			r := ownRunResult(at)
			r.Control, r.End = at.Control(), time.Now()
			out = append(out, erroredResult(r, why))
		}
		return out, ""
	}
	base := filepath.Join(h.Work, filepath.Dir(attack.CredSecretFile))
	own := filepath.Join(labNsgateDir(h.Work), "credentials")
	for _, d := range []string{base, own} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return failAll(err.Error())
		}
		os.Chmod(d, 0o755)
	}
	raw := make([]byte, 16)
	rand.Read(raw)
	// With the bytes encoders escape ('/', '+', '='), as AWS secret keys
	// hold: the scrub must know their escaped forms (creds-echo-encoded).
	secret := attack.CredSecretPrefix + hex.EncodeToString(raw[:8]) + "/" + hex.EncodeToString(raw[8:12]) + "+" + hex.EncodeToString(raw[12:]) + "="
	secretFile := filepath.Join(h.Work, attack.CredSecretFile)
	// Readable by anyone on the host: only nsgate's view hides it.
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o644); err != nil {
		return failAll(err.Error())
	}
	os.Chmod(secretFile, 0o644)
	up, err := startCredUpstreams(secret)
	if err != nil {
		return failAll(err.Error())
	}
	defer up.close()
	caFile := filepath.Join(own, "upstream-ca.pem")
	pol := filepath.Join(own, "policy.yaml")
	if err := os.WriteFile(caFile, up.ca.PEM(), 0o644); err != nil {
		return failAll(err.Error())
	}
	if err := os.WriteFile(pol, []byte(credPolicy(secretFile, caFile)), 0o644); err != nil {
		return failAll(err.Error())
	}
	logFile := filepath.Join(cfg.Evidence, judge.EvidenceAuditCredentials)
	var ids []string
	for _, at := range ats {
		ids = append(ids, at.ID)
	}
	args := append([]string{"run", "--policy", pol, "--audit", logFile, "--audit-key", h.AuditKey, "--ro", h.Work, "--quiet"}, breakArgs...)
	args = append(args, "--", cfg.Self)
	args = append(args, cfg.AttackArgs...)
	args = append(args, "--json", "--only", strings.Join(ids, ","), "--token", h.Token, "--work-dir", h.Work)
	obs, code, stderr, err := runAll(ctx, cfg, env, args)
	if err != nil {
		return failAll(err.Error())
	}
	recs, rerr := audit.ReadRecordsFile(logFile)
	hits := up.all()
	dnsHits := inet.Hits()
	command := cfg.Self + " " + strings.Join(args, " ")
	for _, at := range ats {
		res := ownRunResult(at)
		res.Control = at.Control()
		o, ok := obs[at.ID]
		if !ok {
			res.End = time.Now()
			out = append(out, erroredResult(res, fmt.Sprintf("the run (exit %d) reported no observation: %s", code, judge.LastLines(stderr, 3))))
			continue
		}
		res.Start, res.End, res.Detail = o.Start, o.End, o.Detail
		// A record belongs to the attempt if written during it (or just
		// after, before the next attempt began).
		until := o.End.Add(time.Second)
		for _, p := range obs {
			if p.Start.After(o.Start) && p.Start.Before(until) {
				until = p.Start
			}
		}
		out = append(out, judgeCred(at, o, res, secret, hits, dnsHits, recs, rerr, until, command))
	}
	return out, logFile
}

// judgeCred judges one credential attempt.
func judgeCred(at attack.Attempt, o attack.Observation, res judge.Result, secret string, hits []credHit, dnsHits []internet.Hit, recs []audit.Record, rerr error, until time.Time, command string) judge.Result {
	in := func(t time.Time) bool { return !t.Before(o.Start) && !t.After(o.End) }
	var mine []credHit
	nSecret, nPlace, nAuthSecret := 0, 0, 0
	for _, hh := range hits {
		if !in(hh.time) {
			continue
		}
		mine = append(mine, hh)
		if hh.secret {
			nSecret++
		}
		if hh.place {
			nPlace++
		}
		if hh.auth == "Bearer "+secret {
			nAuthSecret++
		}
		res.Hits = append(res.Hits, internet.Hit{Time: hh.time, Target: hh.target, Addr: hh.target,
			Detail: fmt.Sprintf("%s %s (secret: %v, placeholder: %v)", hh.method, placeholderRE.ReplaceAllString(strings.ReplaceAll(hh.uri, secret, "SECRET"), "PLACEHOLDER"), hh.secret, hh.place)})
	}
	for _, dh := range dnsHits {
		if in(dh.Time) && placeholderRE.MatchString(dh.Detail) {
			nPlace++
			res.Hits = append(res.Hits, internet.Hit{Time: dh.Time, Target: dh.Target, Addr: dh.Addr, Detail: "a DNS query carrying the placeholder"})
		}
	}
	for _, rec := range recs {
		if credRecord(at.ID, rec) && !rec.Time.Before(o.Start) && rec.Time.Before(until) {
			res.AuditSeqs = append(res.AuditSeqs, rec.Seq)
			res.Audit = append(res.Audit, rec.Raw)
			// The decision: a credential deny before the request record
			// it refused.
			if res.Decision == nil || rec.Name == "credential" && res.Decision.Event != "credential" {
				res.Decision = credDecision(rec)
			}
		}
	}
	res.HostCheck = fmt.Sprintf("%s: %d requests at the fake upstreams during the attempt, %d carrying the secret (%d in Authorization), %d carrying a placeholder; %d records of the run's log attributed (%s)",
		at.HostCheck, len(mine), nSecret, nAuthSecret, nPlace, len(res.AuditSeqs), command)
	leakedToWorker := strings.Contains(o.Detail, secret)
	if leakedToWorker {
		res.Detail = strings.ReplaceAll(res.Detail, secret, "SECRET")
	}
	gotThrough := func(why string) judge.Result {
		res.Observed, res.Pass, res.Why = attack.Allowed, false, "got through: "+why
		return res
	}
	switch {
	case o.Observed == attack.Errored:
		return erroredResult(res, res.Detail)
	case leakedToWorker:
		return gotThrough("the worker saw the secret")
	case at.Control():
		res.Observed = o.Observed
		switch {
		case o.Observed != attack.Allowed:
			res.Why = "the control failed: " + res.Detail
		case len(mine) != 1 || nAuthSecret != 1 || nPlace != 0:
			res.Why = fmt.Sprintf("the upstream got %d requests, %d with the secret in Authorization, %d with a placeholder; want exactly 1, 1, 0", len(mine), nAuthSecret, nPlace)
		case len(res.AuditSeqs) == 0:
			res.Why = "no request allow record for /v1/ok"
		default:
			res.Pass = true
		}
		return res
	case o.Observed == attack.Allowed:
		return gotThrough(res.Detail)
	case at.SetupHits > 0:
		// SetupHits requests are allowed and carry the secret in
		// Authorization (an echo's, a WebSocket's upgrade); what is
		// judged is what comes back, or that nothing followed them.
		switch {
		case nPlace > 0 || nSecret != nAuthSecret:
			return gotThrough(fmt.Sprintf("the upstream got %d requests or messages carrying a placeholder and %d carrying the secret outside Authorization", nPlace, nSecret-nAuthSecret))
		case len(mine) != at.SetupHits || nAuthSecret != at.SetupHits:
			res.Observed = o.Observed
			res.Why = fmt.Sprintf("the upstream got %d requests, %d with the secret in Authorization; want %d, each with it", len(mine), nAuthSecret, at.SetupHits)
			return res
		case at.Audit != attack.AuditNone && len(res.AuditSeqs) == 0:
			res.Observed = o.Observed
			res.Why = "no " + at.Audit.String() + " record for it in the run's log"
			return res
		}
	case nSecret > 0 || nPlace > 0:
		return gotThrough(fmt.Sprintf("the worker saw a refusal, but the upstreams got %d requests carrying the secret and %d carrying a placeholder", nSecret, nPlace))
	case len(mine) > 0:
		return gotThrough(fmt.Sprintf("the worker saw a refusal, but the upstreams got %d requests", len(mine)))
	}
	res.Observed = attack.Blocked
	switch {
	case at.Audit == attack.AuditDeny && rerr != nil:
		res.Why = "blocked, but the run's log could not be read: " + rerr.Error()
	case at.Audit == attack.AuditDeny && len(res.AuditSeqs) == 0:
		res.Why = "blocked, but the run's log has no deny record for it"
	default:
		res.Pass = true
	}
	return res
}

// runAll runs `nsgate ARGS` and collects every final observation it
// printed, by attempt.
func runAll(ctx context.Context, cfg Config, env, args []string) (map[string]attack.Observation, int, string, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, cfg.Self, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr := &tail{max: 8 << 10}
	cmd.Stderr = stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, "", err
	}
	obs := map[string]attack.Observation{}
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var o attack.Observation
		if json.Unmarshal(sc.Bytes(), &o) == nil && o.ID != "" && !o.Partial {
			obs[o.ID] = o
		}
	}
	code := attack.ExitCode(cmd.Wait())
	return obs, code, stderr.String(), nil
}
