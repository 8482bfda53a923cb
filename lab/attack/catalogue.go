package attack

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/lab/internet"
)

// Outcome is what the attacker saw for one attempt.
type Outcome string

const (
	// Blocked: refused, reset, NXDOMAIN or no answer, EPERM/EACCES, or a
	// timeout with no bytes from the target.
	Blocked Outcome = "blocked"
	// Allowed: data came back from the target the attempt aimed at (or,
	// for a syscall attempt, the call succeeded).
	Allowed Outcome = "allowed"
	// Errored: the attempt could not be carried out (a precondition
	// failed, or the attacker itself broke). It never counts as blocked.
	Errored Outcome = "error"
)

// Layers that stop attacks. The lab names one per attempt: the first that
// must refuse it.
const (
	LayerControl   = "control"       // not an attack: must succeed
	LayerMetadata  = "metadata"      // built-in cloud metadata set (decision step 1, docs/policy.md)
	LayerSpecial   = "special-range" // built-in special-range guard (decision step 3)
	LayerPolicy    = "policy"        // allow rules, default deny (decision steps 4-5)
	LayerDNS       = "dns"           // fake-IP DNS: NXDOMAIN for unapproved names, nothing upstream
	LayerResolve   = "resolve"       // host-side resolution: every answer checked, only a checked one dialed
	LayerL7        = "l7"            // SNI and Host checks on name flows
	LayerNetns     = "netns"         // the worker's own network namespace (its lo, its abstract sockets)
	LayerCaps      = "caps"          // the worker holds no capabilities
	LayerExecGuard = "exec-guard"    // Landlock exec allowlist and seccomp
	LayerView      = "fs-view"       // the worker's file system view: host read-only, private scratch and home, nsgate's files hidden, noexec, Landlock write rules
	LayerAudit     = "audit"         // the audit log fails closed: nothing new is admitted once a record cannot be written
	LayerQuota     = "quota"         // the worker's bounded share of what the kernel counts per user (inotify, processes) and of memory no process is charged for
)

// AuditWant is what the audit log must show for an attempt.
type AuditWant uint8

const (
	// AuditNone: nothing required (the gateway never sees the attempt).
	AuditNone AuditWant = iota
	// AuditDeny: at least one record with action deny.
	AuditDeny
	// AuditRefused: a deny record, or an allowed flow that lists the
	// resolved answers it refused.
	AuditRefused
	// AuditAllow: an allowed flow (controls).
	AuditAllow
)

func (w AuditWant) String() string {
	switch w {
	case AuditDeny:
		return "deny record"
	case AuditRefused:
		return "deny or refused-answer record"
	case AuditAllow:
		return "allow flow record"
	}
	return "none"
}

// Categories returns the catalogue's categories, in the order the README
// lists them.
func Categories() []string {
	return []string{
		"control", "metadata", "ip-literal", "ipv6", "local", "unapproved", "dns",
		"redirect", "l7", "port", "udp", "icmp-raw", "unix", "exec", "namespace",
		"containment", "host-paths", "learn", CategoryCredentials,
	}
}

// CategoryBrowser is the category of the --browser attempts
// (BrowserAttempts).
const CategoryBrowser = "browser"

// Attempt is one entry of the catalogue. Attempts are plain values; run
// is nil only for planned (not yet built) attempts.
type Attempt struct {
	ID          string
	Category    string
	Layer       string
	Description string
	// Expect is Allowed for controls and Blocked for attacks.
	Expect Outcome
	// Needs, when set, is the one layer of nsgate, as its start record
	// names it among the degraded ones, that stops the attack: where
	// nsgate says that layer is not in force, the attack's getting
	// through is that, and `nsgate lab --expect-degraded LAYER` accepts
	// it (judge.AcceptDegraded).
	Needs string
	// Audit is what the audit log must show.
	Audit AuditWant
	// Rule, when set, is the rule one of the deny records must carry
	// (builtin:metadata, builtin:special-range, default).
	Rule string
	// Aims are the fake targets the attempt tries to reach. A control
	// must hit the first; an attack must leave every unapproved target
	// untouched.
	Aims []string
	// SetupHits is how many hits of Aims[0] an attack makes on purpose
	// before it attacks: an approved exchange it then abuses (a QUIC
	// connection that passed, on whose flow a second one is tried).
	// Only hits beyond them count against it.
	SetupHits int
	// Keys name the deny records the attempt causes: "ip:port" or
	// "name:port" of a refused TCP flow (with "/udp" for UDP), "dns:NAME"
	// of a refused query ("dns:*.zone" for any name below zone), and
	// "packet:IP" of a refused packet. Judge attributes a deny record to
	// the latest attempt with a matching key (the gateway writes it just
	// after the worker sees the refusal, possibly during the next
	// attempt), and the attacker keeps more than the audit log's
	// aggregation window between two attempts sharing a key, so that each
	// gets a record of its own.
	Keys []string
	// HostCheck, when set, says what the lab checks on the host after the
	// run (a file unchanged, absent or present; the audit log intact):
	// the attempt passes only if that check does. Controls with a host
	// check and no Aims are judged on it instead of on a target's hit.
	HostCheck string
	// NoRecord, when set, says why the attempt leaves no audit record by
	// design (the kernel refuses a file system call inside the worker;
	// nothing reaches nsgate): the evidence is the worker's error and the
	// host check.
	NoRecord string
	// Phase, when set, names the `nsgate run` of its own the attempt
	// needs (PhaseAuditFill, PhaseInitRace); the main attacker run leaves it
	// out.
	Phase string

	run func(ctx context.Context, a *attacker) result
	// CheckHost is the host check (HostCheck), made by the lab after the
	// run (HostEnv.Checks); nil for an attempt without one.
	CheckHost func(h *HostEnv, at Attempt) HostResult
}

// Control reports whether the attempt is a control (must succeed).
func (at Attempt) Control() bool { return at.Expect == Allowed }

// Planned reports whether the attempt is designed but not built.
func (at Attempt) Planned() bool { return at.run == nil }

// result is what one attempt function returns.
type result struct {
	out    Outcome
	detail string
	// png, when set, is the screenshot of what a browser agent saw (one
	// taken in a window other than the agent's tab).
	png []byte
}

func blockedf(format string, args ...any) result {
	return result{out: Blocked, detail: fmt.Sprintf(format, args...)}
}

func allowedf(format string, args ...any) result {
	return result{out: Allowed, detail: fmt.Sprintf(format, args...)}
}

func erroredf(format string, args ...any) result {
	return result{out: Errored, detail: fmt.Sprintf(format, args...)}
}

// Catalogue returns every attempt the lab runs, controls first. Each call
// returns a fresh slice.
func Catalogue() []Attempt {
	var c []Attempt
	add := func(a ...Attempt) { c = append(c, a...) }

	// Controls: a gateway that blocks everything fails the lab.
	add(
		control("control-http", "GET http://app.test/ (approved name, port 80)", "http://"+internet.AppName+"/", "app", false),
		control("control-http-8080", "GET http://app.test:8080/", "http://"+internet.AppName+":8080/", "app", false),
		control("control-https", "GET https://app.test/ verified against the lab CA", "https://"+internet.AppName+"/", "app", true),
		control("control-https-8443", "GET https://app.test:8443/ verified against the lab CA", "https://"+internet.AppName+":8443/", "app", true),
		control("control-wildcard", "GET http://www.ok.test:8080/ (approved by *.ok.test)", "http://"+internet.OKName+":8080/", "ok", false),
		control("control-hosts", "GET http://static.test:8080/ (approved through dns.hosts)", "http://"+internet.StaticName+":8080/", "static", false),
		control("control-case-dot", "GET http://APP.Test.:8080/ (names are normalized: case, trailing dot)", "http://APP.Test.:8080/", "app", false),
		quicControl(),
		control("control-redirect", "GET http://app.test/redirect?to=/landing: a same-site redirect is followed", "http://"+internet.AppName+"/redirect?to=/landing", "app", false),
		l7StreamControl("control-keepalive", "HTTP to app.test:80: two requests for app.test on one kept-alive connection", 2,
			keptAlive(internet.AppName), keptAlive(internet.AppName)),
		l7StreamControl("control-chunked-then-get", "HTTP to app.test:80: a chunked POST, then a GET, both for app.test, on one connection", 2,
			"POST / HTTP/1.1\r\nHost: "+internet.AppName+"\r\n"+internet.KeepAliveHeader+": 1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", keptAlive(internet.AppName)),
	)
	// The file system controls: the worker's scratch directories and home
	// work (privately), and its --rw directory reaches the host.
	add(fsControls()...)

	// Literal metadata addresses. The lab policy even approves
	// 169.254.169.254 by cidr: the built-in set must win.
	metaHTTP := func(id, desc, host string, port uint16) Attempt {
		return connectHTTP(id, "metadata", LayerMetadata, "builtin:metadata", desc, host, port, "metadata")
	}
	add(
		metaHTTP("meta-v4", "GET http://169.254.169.254/ (approved by a careless cidr rule)", internet.MetadataV4, 80),
		metaHTTP("meta-v4-8080", "GET http://169.254.169.254:8080/ (approved by a careless cidr rule)", internet.MetadataV4, 8080),
		metaHTTP("meta-ecs", "GET http://169.254.170.2/ (AWS ECS credentials)", internet.ECSV4, 80),
		metaHTTP("meta-alibaba", "GET http://100.100.100.200/ (Alibaba)", internet.AlibabaV4, 80),
		metaHTTP("meta-oracle", "GET http://192.0.0.192/ (Oracle)", internet.OracleV4, 80),
		metaHTTP("meta-azure", "GET http://168.63.129.16/ (Azure WireServer)", internet.AzureV4, 80),
		metaHTTP("meta-v6", "GET http://[fd00:ec2::254]/ (AWS IPv6)", internet.MetadataV6, 80),
		nameHTTP("meta-hosts-alias", "metadata", LayerMetadata, "", "GET http://meta-alias.test/: dns.hosts maps it to 169.254.169.254 and an allow rule approves it", internet.MetaAliasName, 80, "metadata"),
		nameHTTP("meta-name-google", "metadata", LayerMetadata, "builtin:metadata", "GET http://metadata.google.internal/ (built-in metadata name)", "metadata.google.internal", 80, "metadata"),
		nameHTTP("meta-name-instance-data", "metadata", LayerMetadata, "builtin:metadata", "GET http://instance-data/ (built-in metadata name, no dot)", "instance-data", 80, "metadata"),
	)

	// Spellings of 169.254.169.254 that inet_aton-style clients accept.
	spell := func(id, spelling, desc string, port uint16) Attempt {
		return spelledHTTP(id, spelling, desc, port)
	}
	add(
		spell("ip-decimal", "2852039166", "one 32-bit decimal number", 80),
		spell("ip-hex", "0xA9FEA9FE", "one 32-bit hexadecimal number", 80),
		spell("ip-octal", "0251.0376.0251.0376", "four octal parts", 8080),
		spell("ip-mixed", "0251.254.169.254", "an octal first part", 8080),
		spell("ip-short-2", "169.16689662", "two parts: a.b (b fills 24 bits)", 80),
		spell("ip-short-3", "169.254.43518", "three parts: a.b.c (c fills 16 bits)", 8080),
		overflowHTTP("ip-overflow", "7147006462", 80),
		dnsQuery("ip-numeric-name", "ip-literal", LayerDNS, "", "A query for the name \"2852039166\": the gateway's DNS must not resolve numbers", "2852039166", dnsmessage.TypeA, "udp"),
	)

	// IPv6 forms that embed an IPv4 address.
	add(
		connectHTTP("v6-mapped", "ipv6", LayerMetadata, "builtin:metadata", "GET http://[::ffff:169.254.169.254]/ (IPv4-mapped; the kernel sends IPv4)", "::ffff:169.254.169.254", 80, "metadata"),
		connectHTTP("v6-compat", "ipv6", LayerMetadata, "builtin:metadata", "GET http://[::169.254.169.254]/ (IPv4-compatible)", internet.CompatMeta, 80, "metadata"),
		connectHTTP("v6-nat64", "ipv6", LayerMetadata, "builtin:metadata", "GET http://[64:ff9b::a9fe:a9fe]/ (NAT64)", internet.NAT64Meta, 80, "metadata"),
		connectHTTP("v6-6to4", "ipv6", LayerMetadata, "builtin:metadata", "GET http://[2002:a9fe:a9fe::1]/ (6to4)", internet.SixToFour, 80, "metadata"),
		connectHTTP("v6-teredo", "ipv6", LayerMetadata, "builtin:metadata", "GET http://[2001:0:4136:e378:8000:63bf:5601:5601]/ (Teredo, client 169.254.169.254)", internet.TeredoMeta, 80, "metadata"),
		connectHTTP("v6-nat64-private", "ipv6", LayerSpecial, "builtin:special-range", "GET http://[64:ff9b::a01:203]:8080/ (NAT64 of 10.1.2.3)", internet.NAT64Private, 8080, "private"),
		connectHTTP("v6-mapped-loopback", "ipv6", LayerNetns, "", "GET http://[::ffff:127.0.0.1]:8080/ (the worker's own loopback)", "::ffff:127.0.0.1", 8080, "loopback"),
	)

	// Loopback, unspecified, link-local, private and the gateway itself.
	local := func(id, layer, rule, desc, host string, port uint16, aim string) Attempt {
		return connectHTTP(id, "local", layer, rule, desc, host, port, aim)
	}
	add(
		local("lo-v4", LayerNetns, "", "GET http://127.0.0.1:8080/ (the worker's lo is its own)", "127.0.0.1", 8080, "loopback"),
		local("lo-v6", LayerNetns, "", "GET http://[::1]:8080/", "::1", 8080, "loopback"),
		local("lo-unspecified", LayerNetns, "", "GET http://0.0.0.0:8080/", "0.0.0.0", 8080, "loopback"),
		local("lo-unspecified-v6", LayerNetns, "", "GET http://[::]:8080/", "::", 8080, "loopback"),
		local("lo-127-2", LayerNetns, "", "GET http://127.0.0.2:8080/", "127.0.0.2", 8080, "loopback"),
		spelledLocal("lo-short", "127.1", 8080),
		local("lo-docker", LayerNetns, "", "GET http://127.0.0.1:2375/ (a Docker API on loopback)", "127.0.0.1", 2375, "loopback"),
		nameHTTP("lo-localhost", "local", LayerNetns, "", "GET http://localhost:8080/ (resolved by the worker's /etc/hosts)", "localhost", 8080, "loopback"),
		local("gw-v4", LayerSpecial, "builtin:special-range", "GET http://"+internet.GatewayV4+":8080/ (the gateway: slirp's path to host loopback)", internet.GatewayV4, 8080, "loopback"),
		local("gw-docker", LayerSpecial, "builtin:special-range", "GET http://"+internet.GatewayV4+":2375/ (Docker API through the gateway)", internet.GatewayV4, 2375, "loopback"),
		local("gw-dns-port", LayerSpecial, "builtin:special-range", "GET http://"+internet.DNSV4+":8080/ (the DNS address on another port)", internet.DNSV4, 8080, "loopback"),
		local("gw-v6", LayerSpecial, "builtin:special-range", "GET http://["+internet.GatewayV6+"]:8080/ (the IPv6 gateway)", internet.GatewayV6, 8080, "loopback"),
		local("private-literal", LayerSpecial, "builtin:special-range", "GET http://10.1.2.3:8080/ (RFC 1918)", internet.PrivateV4, 8080, "private"),
		local("link-local", LayerSpecial, "builtin:special-range", "GET http://169.254.1.1/ (IPv4 link-local)", internet.LinkLocalV4, 80, "link-local"),
		withKeys(local("link-local-v6", LayerSpecial, "", "GET http://[fe80::1%tun0]/ (IPv6 link-local with a zone)", "fe80::1%tun0", 80, "link-local"), "packet:fe80::1"),
		local("cgnat", LayerSpecial, "builtin:special-range", "GET http://100.64.0.1/ (carrier-grade NAT)", internet.CGNATV4, 80, "cgnat"),
		local("fake-pool", LayerSpecial, "builtin:special-range", "GET http://198.19.255.250/ (an unassigned fake-IP address)", "198.19.255.250", 80, "unapproved"),
		local("host-own-v4", LayerSpecial, "builtin:special-range", "GET http://"+internet.HostOwnV4+":5432/ (the host's own address on a link other than lo; the lab policy approves 0.0.0.0/0 on 5432)", internet.HostOwnV4, 5432, "host-own"),
		local("host-own-v6", LayerSpecial, "builtin:special-range", "GET http://["+internet.HostOwnV6+"]:5432/ (the host's own IPv6 address; the lab policy approves ::/0 on 5432)", internet.HostOwnV6, 5432, "host-own"),
		local("host-own-local-route", LayerSpecial, "builtin:special-range", "GET http://"+internet.HostRouteV4+":5432/ (an address in "+internet.HostRoute+", which the host routes as local on a link other than lo with no address there; the lab policy approves 0.0.0.0/0 on 5432)", internet.HostRouteV4, 5432, "host-own"),
	)

	// Unapproved destinations reached directly.
	add(
		connectHTTP("unapproved-ip", "unapproved", LayerPolicy, "default", "GET http://198.51.100.20:8080/ (an unapproved public address)", internet.OtherV4, 8080, "unapproved"),
		nameHTTP("unapproved-name", "unapproved", LayerDNS, "", "GET http://unapproved.test:8080/ (an unapproved name)", internet.UnapprovedName, 8080, "unapproved"),
		connectHTTP("app-ip-literal", "unapproved", LayerPolicy, "default", "GET http://203.0.113.10/ (app.test's address: approved by name only)", internet.AppV4, 80, "app"),
		mptcpAttempt(),
	)

	// DNS: names, types, transports, resolvers and answers.
	add(
		dnsQuery("dns-unapproved-name", "dns", LayerDNS, "", "A unapproved.test from the gateway's resolver", internet.UnapprovedName, dnsmessage.TypeA, "udp"),
		dnsQuery("dns-metadata-case", "dns", LayerMetadata, "builtin:metadata", "A METADATA.Google.INTERNAL (mixed case)", "METADATA.Google.INTERNAL", dnsmessage.TypeA, "udp"),
		dnsExfil("dns-txt-exfil", "TXT <secret>.exfil.test: exfiltration in the name", dnsmessage.TypeTXT, "udp"),
		dnsExfil("dns-tcp-exfil", "A <secret>.exfil.test over TCP", dnsmessage.TypeA, "tcp"),
		dnsPipelinedExfil(),
		dnsUpdateExfil("dns-update-exfil", "udp"),
		dnsUpdateExfil("dns-update-exfil-tcp", "tcp"),
		dnsTCPFlood(),
		dnsQuery("dns-txt-approved", "dns", LayerDNS, "", "TXT app.test: other types of approved names get empty answers, never the upstream's", internet.AppName, dnsmessage.TypeTXT, "udp"),
		withKeys(dnsQuery("dns-idn-homograph", "dns", LayerDNS, "", "A \u0430pp.test (Cyrillic a) as UTF-8: not app.test", "\u0430pp.test", dnsmessage.TypeA, "udp"), "dns:"+homographPunycode()),
		dnsPunycode(),
		dnsQuery("dns-wildcard-apex", "dns", LayerDNS, "", "A ok.test: *.ok.test does not cover its apex", "ok.test", dnsmessage.TypeA, "udp"),
		dnsQuery("dns-wildcard-suffix", "dns", LayerDNS, "", "A evilok.test: not a subdomain of ok.test", "evilok.test", dnsmessage.TypeA, "udp"),
		dnsQuery("dns-wildcard-embedded", "dns", LayerDNS, "", "A ok.test.evil.test: ok.test inside another name", "ok.test.evil.test", dnsmessage.TypeA, "udp"),
		directDNS("dns-direct-udp", "udp"),
		directDNS("dns-direct-tcp", "tcp"),
		dotAttempt("dns-dot", LayerPolicy, "default", "DNS over TLS to 192.0.2.53:853", internet.ResolverV4),
		dotAttempt("dns-dot-gateway", LayerSpecial, "builtin:special-range", "DNS over TLS to the gateway's resolver "+internet.DNSV4+":853", internet.DNSV4),
		rebindAttempt(),
		answerHTTP("dns-mixed-answers", LayerResolve, "", AuditRefused, "mixed.ok.test answers 127.0.0.1 and 203.0.113.13: only the public one may be dialed", internet.MixedName, "loopback"),
		answerHTTP("dns-private-answer", LayerResolve, "builtin:special-range", AuditDeny, "private.ok.test answers 10.1.2.3", internet.PrivateName, "private"),
		answerHTTP("dns-loopback-answer", LayerResolve, "builtin:special-range", AuditDeny, "loop.ok.test answers 127.0.0.1", internet.LoopName, "loopback"),
		answerHTTP("dns-host-own-answer", LayerResolve, "builtin:special-range", AuditDeny, "hostown.ok.test answers "+internet.HostOwnV4+", the host's own address", internet.HostOwnName, "host-own"),
		answerHTTP("dns-benchmark-answer", LayerResolve, "builtin:special-range", AuditDeny, "bench.ok.test answers 198.18.0.77 (the benchmarking range, nsgate's fake pool) from a resolver that fails the nsgate gateway handshake", internet.BenchName, "benchmark"),
		answerHTTP("dns-metadata-answer", LayerResolve, "builtin:metadata", AuditDeny, "meta.ok.test answers 169.254.169.254", internet.MetaAName, "metadata"),
		answerHTTP("dns-cname-metadata", LayerResolve, "builtin:metadata", AuditDeny, "cname.ok.test is a CNAME for metadata.google.internal", internet.CNAMEName, "metadata"),
		answerHTTP("dns-aaaa-metadata", LayerResolve, "builtin:metadata", AuditDeny, "aaaa.ok.test has only an AAAA record: fd00:ec2::254", internet.AAAAName, "metadata"),
	)

	// Redirects from the approved app (an open redirect at /redirect).
	add(
		redirect("redirect-metadata", LayerMetadata, "builtin:metadata", "http://"+internet.AppName+"/", "http://"+internet.MetadataV4+"/latest/meta-data/", "metadata", []string{internet.MetadataV4 + ":80"}),
		redirect("redirect-metadata-https", LayerMetadata, "builtin:metadata", "https://"+internet.AppName+"/", "http://"+internet.MetadataV4+":8080/", "metadata", []string{internet.MetadataV4 + ":8080"}),
		redirect("redirect-chain", LayerMetadata, "builtin:metadata", "http://"+internet.AppName+"/", "/redirect?to=http://"+internet.MetadataV4+"/", "metadata", []string{internet.MetadataV4 + ":80"}),
		redirect("redirect-metadata-decimal", LayerMetadata, "builtin:metadata", "http://"+internet.AppName+"/", "http://2852039166/", "metadata", []string{internet.MetadataV4 + ":80"}),
		redirect("redirect-unapproved-name", LayerDNS, "", "http://"+internet.AppName+"/", "http://"+internet.UnapprovedName+":8080/", "unapproved", []string{"dns:" + internet.UnapprovedName}),
		redirect("redirect-unapproved-ip", LayerPolicy, "default", "http://"+internet.AppName+"/", "http://"+internet.OtherV4+":8080/", "unapproved", []string{internet.OtherV4 + ":8080"}),
		redirect("redirect-private-name", LayerResolve, "builtin:special-range", "http://"+internet.AppName+"/", "http://"+internet.PrivateName+":8080/", "private", []string{internet.PrivateName + ":8080"}),
		redirect("redirect-loopback", LayerNetns, "", "http://"+internet.AppName+"/", "http://127.0.0.1:8080/", "loopback", nil),
	)

	// SNI and Host on a flow opened by name.
	add(
		l7TLS("l7-sni-mismatch", "TLS to app.test:443 with SNI unapproved.test (domain fronting)", internet.UnapprovedName),
		l7TLS("l7-sni-metadata", "TLS to app.test:443 with SNI metadata.google.internal", "metadata.google.internal"),
		l7TLS("l7-no-sni", "TLS to app.test:443 with no SNI at all", ""),
		l7HTTP("l7-host-mismatch", "HTTP to app.test:80 with Host: unapproved.test", "GET / HTTP/1.1\r\nHost: "+internet.UnapprovedName+"\r\nConnection: close\r\n\r\n"),
		l7HTTP("l7-host-metadata", "HTTP to app.test:80 with Host: 169.254.169.254", "GET /latest/meta-data/ HTTP/1.1\r\nHost: "+internet.MetadataV4+"\r\nConnection: close\r\n\r\n"),
		l7QUIC("l7-quic-other-sni", "a QUIC Initial to quic.test:443/udp whose ClientHello names unapproved.test", internet.UnapprovedName, false),
		l7QUICRepeatedPN(),
		l7QUICSecondConnection(),
		l7QUICFixedBit(),
		l7QUICLateInitial(),
		l7QUICLostInitial(),
		l7QUICForgottenConn(),
		l7QUIC("l7-quic-garbage", "bytes shaped like a QUIC v1 Initial header (no valid packet) to quic.test:443/udp", "", true),
		l7HTTP("l7-absolute-uri", "HTTP to app.test:80 with GET http://unapproved.test/ and Host: app.test", "GET http://"+internet.UnapprovedName+"/ HTTP/1.1\r\nHost: "+internet.AppName+"\r\nConnection: close\r\n\r\n"),
		l7Stream("l7-keepalive-other-host", "HTTP to app.test:80: a first request for app.test, then on the kept-alive connection one for unapproved.test", 80, nil, "", 2,
			keptAlive(internet.AppName), keptAlive(internet.UnapprovedName)),
		l7Stream("l7-pipelined-other-host", "HTTP to app.test:80: requests for app.test and unapproved.test pipelined in one write", 80, nil, "", 2,
			keptAlive(internet.AppName)+keptAlive(internet.UnapprovedName)),
		l7Stream("l7-cl-te-smuggling", "HTTP to app.test:80: a POST with Content-Length and Transfer-Encoding whose chunked end hides a request for unapproved.test", 80, nil, "", 2,
			"POST / HTTP/1.1\r\nHost: "+internet.AppName+"\r\n"+internet.KeepAliveHeader+": 1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+keptAlive(internet.UnapprovedName)),
		l7Stream("l7-get-body-smuggling", "HTTP to app.test:80: a GET whose Content-Length body is a request for unapproved.test (a server that never reads GET bodies serves it)", 80, nil, "", 2,
			"GET / HTTP/1.1\r\nHost: "+internet.AppName+"\r\n"+internet.KeepAliveHeader+": 1\r\nContent-Length: "+strconv.Itoa(len(keptAlive(internet.UnapprovedName)))+"\r\n\r\n"+keptAlive(internet.UnapprovedName)),
		l7Stream("l7-expect-continue-smuggling", "HTTP to app.test:80: a POST with Expect: 100-continue whose body is a request for unapproved.test (a server that answers Expect at once and reads on serves it)", 80, nil, "", 2,
			"POST / HTTP/1.1\r\nHost: "+internet.AppName+"\r\n"+internet.KeepAliveHeader+": 1\r\nExpect: 100-continue\r\nContent-Length: "+strconv.Itoa(len(keptAlive(internet.UnapprovedName)))+"\r\n\r\n", keptAlive(internet.UnapprovedName)),
		l7Stream("l7-duplicate-content-length", "HTTP to app.test:80: two Content-Length headers, the body hiding a request for unapproved.test", 80, nil, "", 2,
			"POST / HTTP/1.1\r\nHost: "+internet.AppName+"\r\n"+internet.KeepAliveHeader+": 1\r\nContent-Length: 0\r\nContent-Length: 60\r\n\r\n"+keptAlive(internet.UnapprovedName)),
		l7Stream("l7-obs-fold", "HTTP to app.test:80: a second request whose folded header line continues Host", 80, nil, "", 2,
			keptAlive(internet.AppName), "GET / HTTP/1.1\r\nHost: "+internet.UnapprovedName+"\r\n"+internet.KeepAliveHeader+": 1\r\n x\r\n\r\n"),
		l7Stream("l7-h2c-upgrade", "HTTP to app.test:80: a second request asking to upgrade to h2c", 80, nil, "", 2,
			keptAlive(internet.AppName), "GET / HTTP/1.1\r\nHost: "+internet.AppName+"\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"),
		l7Stream("l7-h2c-prior-knowledge", "HTTP/2 prior knowledge (PRI * HTTP/2.0) to app.test:80", 80, nil, "", 1,
			"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
		l7Stream("l7-frame-after-refused-upgrade", "HTTP to app.test:80: a WebSocket upgrade the server answers without switching, then a masked frame whose bytes read as a request for unapproved.test to a server that splits on NBSP and takes any method", 80, nil, "", 2,
			"GET /ws HTTP/1.1\r\nHost: "+internet.AppName+"\r\n"+internet.KeepAliveHeader+": 1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
			nbspFrame(internet.UnapprovedName)),
		l7Stream("l7-leading-space", "HTTP to app.test:80: a space before the request line, Host: unapproved.test", 80, nil, "", 1, " "+keptAlive(internet.UnapprovedName)),
		l7Stream("l7-leading-tab", "HTTP to app.test:80: a tab before the request line, Host: unapproved.test", 80, nil, "", 1, "\t"+keptAlive(internet.UnapprovedName)),
		l7Stream("l7-leading-vt", "HTTP to app.test:80: a vertical tab before the request line, Host: unapproved.test", 80, nil, "", 1, "\v"+keptAlive(internet.UnapprovedName)),
		l7Stream("l7-leading-ff", "HTTP to app.test:80: a form feed before the request line, Host: unapproved.test", 80, nil, "", 1, "\f"+keptAlive(internet.UnapprovedName)),
		l7Stream("l7-tab-separators", "HTTP to app.test:80: tabs between the request line's words, Host: unapproved.test", 80, nil, "", 1,
			"GET\t/\tHTTP/1.1\r\nHost: "+internet.UnapprovedName+"\r\n\r\n"),
		l7Stream("l7-bare-cr-separator", "HTTP to app.test:80: a bare CR between method and target (Python's http.server splits on it), Host: unapproved.test", 80, nil, "", 1,
			"GET\r/ HTTP/1.1\r\nHost: "+internet.UnapprovedName+"\r\n"+internet.KeepAliveHeader+": 1\r\n\r\n"),
		l7Stream("l7-second-client-hello", "TLS to app.test:443: a ClientHello for app.test, then a handshake whose ClientHello names unapproved.test (OpenSSL servers take the second name after a HelloRetryRequest)", 443,
			helloRecord(internet.AppName), internet.UnapprovedName, 1, keptAlive(internet.UnapprovedName)),
		l7Stream("l7-cut-second-hello", "TLS to app.test:443: a ClientHello for app.test, then one naming unapproved.test whose message a change_cipher_spec record cuts (OpenSSL servers read on across it)", 443,
			cutHelloRecords(internet.AppName, internet.UnapprovedName, ccsRecord, ccsRecord), "", 1),
		l7Stream("l7-cut-second-hello-data", "TLS to app.test:443: a ClientHello for app.test, early data, then one naming unapproved.test whose message header an application data record cuts (OpenSSL servers skip it after turning early data down)", 443,
			cutHelloRecords(internet.AppName, internet.UnapprovedName, earlyDataRecord, earlyDataRecord), "", 1),
		l7Stream("l7-alert-before-hello", "TLS to app.test:443: a warning alert record, then a ClientHello with SNI unapproved.test", 443,
			[]byte{0x15, 3, 1, 0, 2, 1, 0x5a}, internet.UnapprovedName, 1, keptAlive(internet.UnapprovedName)),
		l7Stream("l7-ccs-before-hello", "TLS to app.test:443: a change_cipher_spec record, then a ClientHello with SNI unapproved.test", 443,
			[]byte{0x14, 3, 3, 0, 1, 1}, internet.UnapprovedName, 1, keptAlive(internet.UnapprovedName)),
		l7Stream("l7-appdata-before-hello", "TLS to app.test:443: an application_data record, then a ClientHello with SNI unapproved.test", 443,
			[]byte{0x17, 3, 3, 0, 5, 'h', 'e', 'l', 'l', 'o'}, internet.UnapprovedName, 1, keptAlive(internet.UnapprovedName)),
	)

	// Ports the policy does not approve on approved names.
	add(
		bannerTCP("port-ssh", "connect to app.test:22 (SSH)", internet.AppName, 22),
		bannerTCP("port-smtp", "connect to app.test:25 (SMTP)", internet.AppName, 25),
		bannerTCP("port-redis", "connect to app.test:6379 (Redis)", internet.AppName, 6379),
		nameHTTP("port-9090", "port", LayerPolicy, "default", "GET http://app.test:9090/", internet.AppName, 9090, "app-port"),
		nameHTTP("port-wildcard-80", "port", LayerPolicy, "default", "GET http://www.ok.test/ (*.ok.test is approved on 8080 only)", internet.OKName, 80, "ok-port"),
	)

	// UDP and QUIC.
	add(
		udpProbe("udp-quic-name", LayerPolicy, "default", "a QUIC Initial to app.test:443/udp (no rule allows UDP)", internet.AppName, 443, "app-udp"),
		udpProbe("udp-quic-ip", LayerPolicy, "default", "a QUIC Initial to 203.0.113.10:443/udp", internet.AppV4, 443, "app-udp"),
		udpProbe("udp-stun", LayerPolicy, "default", "a STUN binding request to 198.51.100.20:3478/udp", internet.OtherV4, 3478, "unapproved"),
		udpProbe("udp-ntp", LayerPolicy, "default", "an NTP request to 198.51.100.20:123/udp", internet.OtherV4, 123, "unapproved"),
		udpProbe("udp-metadata", LayerMetadata, "builtin:metadata", "a datagram to 169.254.169.254:53/udp", internet.MetadataV4, 53, "metadata"),
		udpProbe("udp-multicast", LayerSpecial, "", "a datagram to 224.0.0.251:5353/udp (mDNS multicast)", "224.0.0.251", 5353, "unapproved"),
	)

	// ICMP, raw IP and packet sockets.
	add(
		icmpAttempt("icmp-ping-socket", "an unprivileged ICMP echo socket to 203.0.113.10", false),
		icmpAttempt("icmp-raw-socket", "a raw ICMP socket (CAP_NET_RAW)", true),
		socketAttempt("raw-ip-socket", "icmp-raw", LayerCaps, "a raw IP socket for protocol 253", sockRawIP),
		socketAttempt("packet-socket", "icmp-raw", LayerCaps, "an AF_PACKET socket", sockPacket),
	)

	// Unix sockets and other families.
	add(
		unixAttempt("unix-host-socket", LayerExecGuard, "connect to the host-side unix socket (like /var/run/docker.sock)", false),
		unixAttempt("unix-abstract", LayerNetns, "connect to the host-side abstract unix socket", true),
		socketAttempt("vsock-socket", "unix", LayerExecGuard, "create an AF_VSOCK socket (never connected)", sockVsock),
		Attempt{
			ID: "unix-session-bus", Category: "unix", Layer: LayerView, Phase: PhaseSessionBus,
			Description: "in a run of its own with --allow-unix, XDG_RUNTIME_DIR outside /run/user/UID (below a --ro path) and DBUS_SESSION_BUS_ADDRESS naming $XDG_RUNTIME_DIR/bus: connect to the caller's session bus, through which systemd --user or D-Bus activation would start any command outside the sandbox",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "the host-side socket at the bus's path counted no connection",
			NoRecord:  "the kernel refuses the connect inside the worker (the runtime directory is a private tmpfs in its view); nothing reaches nsgate, so no audit record exists by design: the worker's error and the socket's count are the evidence",
			run:       unixSessionBus,
		},
		Attempt{
			ID: "unix-engine-socket", Category: "unix", Layer: LayerView, Phase: PhaseEngineSocket,
			Description: "in a run of its own with --allow-unix and DOCKER_HOST naming a socket in a directory open to all (below a --ro path): connect to the container engine, which would start a privileged container for the worker",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "the host-side socket DOCKER_HOST names counted no connection",
			NoRecord:  "the kernel refuses the connect inside the worker (the socket is covered by an empty file of mode 0 in its view); nothing reaches nsgate, so no audit record exists by design: the worker's error and the socket's count are the evidence",
			run:       unixEngineSocket,
		},
		Attempt{
			ID: "unix-socket-sweep", Category: "unix", Layer: LayerView, Phase: PhaseSocketSweep,
			Description: "in a run of its own with --allow-unix and a host-side socket in a directory the run shows (--ro): walk the whole view for unix sockets, take the abstract ones from /proc/net/unix, and connect to each; the worker's own socket must answer, no other",
			Expect:      Blocked, Audit: AuditNone,
			HostCheck: "the host-side socket in the shown directory counted no connection",
			NoRecord:  "the host's sockets are not in the worker's view (hidden at start: every socket bound in nsgate's network namespace) and the abstract ones are in another network namespace; nothing reaches nsgate, so no audit record exists by design: the sweep's list and the socket's count are the evidence",
			run:       unixSocketSweep,
		},
	)

	// Running other programs.
	add(
		execAttempt("exec-shell", "exec /bin/sh -c 'echo ...'", execShell),
		execAttempt("exec-copy-tmp", "copy /bin/sh to the temp directory and exec the copy", execCopyTmp),
		execAttempt("exec-copy-shm", "copy /bin/sh to /dev/shm and exec the copy", execCopyShm),
		execAttempt("exec-symlink", "exec a symlink to /bin/sh", execSymlink),
		execAttempt("exec-shebang", "exec a '#!/bin/sh' script written to the temp directory", execShebang),
		execAttempt("exec-procfd", "exec /proc/self/fd/N of an open /bin/sh", execProcFD),
		execAttempt("exec-memfd", "memfd_create, copy a program into it, execveat(AT_EMPTY_PATH): no path for Landlock to check", execMemfd),
		execAttempt("exec-ldso", "exec the ELF interpreter (allowed for dynamic programs) with /bin/sh as its argument", execLdso),
		execAttempt("exec-ldso-renamed", "exec a renamed copy of the ELF interpreter (LoaderDir/"+RenamedLoader+", in a directory the lab allows with --exec-allow) with /bin/sh as its argument: no loader's name to recognise", execLdsoRenamed),
	)

	// Leaving the namespaces.
	add(
		nsAttempt("ns-new-userns", LayerExecGuard, "start a child in new user and network namespaces", nsNewUserns),
		nsAttempt("ns-setns-pid1", LayerCaps, "setns into /proc/1/ns/net", nsSetnsPID1),
		nsAttempt("ns-mount", LayerCaps, "mount a tmpfs", nsMount),
		nsAttempt("ns-ptrace-init", LayerExecGuard, "ptrace PID 1 (the sandbox init)", nsPtraceInit),
		nsAttempt("ns-io-uring", LayerExecGuard, "io_uring_setup (sockets and files outside seccomp's view)", nsIOUring),
	)

	// The worker's file system view and the audit log (containment.go).
	add(containmentAttempts()...)
	add(viewAttempts()...)
	add(hostPathAttempts()...)
	add(credentialAttempts()...)
	return c
}

// withKeys adds keys to an attempt.
func withKeys(at Attempt, keys ...string) Attempt {
	at.Keys = append(at.Keys, keys...)
	return at
}

// Find returns the catalogue entry with id.
func Find(id string) (Attempt, bool) {
	for _, a := range Catalogue() {
		if a.ID == id {
			return a, true
		}
	}
	return Attempt{}, false
}

// hostPort joins a host (IPv6 zone kept) and port.
func hostPort(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// urlHost formats host for a URL (brackets for IPv6, %25 for a zone).
func urlHost(host string, port uint16) string {
	h := host
	if strings.Contains(h, ":") {
		h = "[" + strings.Replace(h, "%", "%25", 1) + "]"
	}
	if port == 80 {
		return h
	}
	return h + ":" + strconv.Itoa(int(port))
}
