package internet

import (
	"net/netip"

	"github.com/nsgate/nsgate/netplan"
)

// The fake internet's address plan. Every address below lives on lo of the
// sealed namespace (DefaultLayout adds them); documentation ranges stand in
// for the public internet (not in the built-in special ranges), the others are the special addresses
// the gateway must never let the worker reach.
const (
	AppV4      = "203.0.113.10"  // app.test, the approved app
	AppV6      = "2001:db8::10"  // app.test over IPv6
	OKV4       = "203.0.113.11"  // www.ok.test and any other *.ok.test
	RebindV4   = "203.0.113.12"  // rebind.ok.test before it rebinds
	MixedV4    = "203.0.113.13"  // the public half of mixed.ok.test
	StaticV4   = "203.0.113.14"  // static.test, approved through dns.hosts
	OtherV4    = "198.51.100.20" // unapproved.test, an unapproved server
	ResolverV4 = "192.0.2.53"    // a public resolver the worker must not reach directly
	// A small multi-host site (integration: learn mode): app.test's page
	// pulls a script from SiteAssetsV4 and images from SiteCDNV4; a page
	// variant adds SiteTrackerV4, which a learned policy must refuse.
	SiteCDNV4     = "203.0.113.31" // img1, img2, img3 and any other *.cdn.test
	SiteAssetsV4  = "203.0.113.32" // js.assets.test
	SiteTrackerV4 = "203.0.113.33" // tracker.test

	MetadataV4   = "169.254.169.254" // the cloud metadata service
	ECSV4        = "169.254.170.2"   // AWS ECS credentials
	AlibabaV4    = "100.100.100.200" // Alibaba metadata
	OracleV4     = "192.0.0.192"     // Oracle metadata
	AzureV4      = "168.63.129.16"   // Azure WireServer
	MetadataV6   = "fd00:ec2::254"   // AWS metadata over IPv6
	NAT64Meta    = "64:ff9b::a9fe:a9fe"
	SixToFour    = "2002:a9fe:a9fe::1"
	TeredoMeta   = "2001:0:4136:e378:8000:63bf:5601:5601" // client address 169.254.169.254
	CompatMeta   = "::a9fe:a9fe"                          // IPv4-compatible form (optional: some kernels refuse it on lo)
	PrivateV4    = "10.1.2.3"                             // a private service (private.ok.test)
	NAT64Private = "64:ff9b::a01:203"                     // NAT64 form of PrivateV4
	LinkLocalV4  = "169.254.1.1"
	CGNATV4      = "100.64.0.1"
	BenchV4      = "198.18.0.77" // the benchmarking range, where nsgate's fake-IP pool lies (bench.ok.test)

	// The host's own addresses: not on lo but on a link of their own
	// (HostLinkName, Layout.HostLink), as a host holds its public
	// addresses on eth0. A service listening there is the host's own.
	HostOwnV4 = "198.51.100.50"
	HostOwnV6 = "2001:db8:5::50"
	// HostLinkName is the link (one end of a veth pair) that holds them.
	HostLinkName = "labhost0"
	// HostRoute is a prefix routed as local on HostLinkName with no
	// address on any link (an AnyIP route), and HostRouteV4 an address
	// in it: the host's own as its addresses are.
	HostRoute   = "198.51.100.128/26"
	HostRouteV4 = "198.51.100.140"

	// UpstreamDNS is where the fake upstream DNS server listens; the lab
	// policy's dns.upstream points at it.
	UpstreamDNS = "127.0.0.53:53"
)

// Names of the fake internet (served by the fake upstream DNS, approved or
// not by the lab policy as their comments say).
const (
	AppName        = "app.test"        // approved on 80, 443, 8080, 8443
	OKName         = "www.ok.test"     // approved by *.ok.test on 8080
	RebindName     = "rebind.ok.test"  // TTL 0: RebindV4 first, then 127.0.0.1
	MixedName      = "mixed.ok.test"   // 127.0.0.1 and MixedV4
	PrivateName    = "private.ok.test" // PrivateV4
	MetaAName      = "meta.ok.test"    // MetadataV4
	LoopName       = "loop.ok.test"    // 127.0.0.1
	CNAMEName      = "cname.ok.test"   // CNAME metadata.google.internal
	AAAAName       = "aaaa.ok.test"    // AAAA MetadataV6 only
	BenchName      = "bench.ok.test"   // BenchV4: an answer in nsgate's fake pool from a resolver that is no nsgate
	HostOwnName    = "hostown.ok.test" // HostOwnV4: an answer that is the host's own address
	StaticName     = "static.test"     // dns.hosts StaticV4, approved on 8080
	QUICName       = "quic.test"       // dns.hosts AppV4, approved for QUIC on 443/udp
	MetaAliasName  = "meta-alias.test" // dns.hosts MetadataV4, "approved" on 80
	UnapprovedName = "unapproved.test" // OtherV4, not approved
	ExfilZone      = "exfil.test"      // any name below it is an exfiltration attempt
	SiteCDNZone    = "cdn.test"        // *.cdn.test: SiteCDNV4
	SiteAssetsName = "js.assets.test"  // SiteAssetsV4
	SiteTracker    = "tracker.test"    // SiteTrackerV4
)

// SiteCDNNames are the names the site's page loads images from.
var SiteCDNNames = []string{"img1." + SiteCDNZone, "img2." + SiteCDNZone, "img3." + SiteCDNZone}

// Gateway addresses as the worker sees them: those of nsgate's default
// address plan (netplan.Default, slirp4netns's plan), which
// `nsgate run` gives the worker.
var (
	GuestV4   = netplan.Default().Guest4().String()   // the worker
	GatewayV4 = netplan.Default().Gateway4().String() // the gateway
	DNSV4     = netplan.Default().DNS4().String()     // the gateway's DNS server
	GatewayV6 = netplan.Default().Gateway6().String() // the gateway over IPv6
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func ap(addr string, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(mustAddr(addr), port)
}
