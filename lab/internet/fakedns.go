package internet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Record is what the fake upstream DNS server answers for one name.
type Record struct {
	// Addrs are the A (IPv4) and AAAA (IPv6) answers, in this order.
	Addrs []netip.Addr
	// Later, when non-nil, replaces Addrs for every A or AAAA query after
	// the first A query of the name: a DNS rebinding attack.
	Later []netip.Addr
	// CNAME, when set, is answered instead of addresses; the server
	// follows it within its own zone and adds the target's records.
	CNAME string
	// TXT are the TXT answers.
	TXT []string
	// TTL of the answers in seconds; the zero value is a TTL of 0.
	TTL uint32
}

// Zone maps names to records. Keys are lower case without a trailing dot;
// a key "*.example.test" answers every name with one or more labels before
// example.test that has no key of its own. A Zone must not be modified
// while a FakeDNS serves it.
type Zone map[string]Record

// lookup returns the record for name (lower case, no trailing dot).
func (z Zone) lookup(name string) (Record, bool) {
	if r, ok := z[name]; ok {
		return r, true
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			if r, ok := z["*"+name[i:]]; ok {
				return r, true
			}
		}
	}
	return Record{}, false
}

// Query is one question the fake DNS server received.
type Query struct {
	Time time.Time `json:"time"`
	// Listener is the "ip:port" the query arrived at.
	Listener string `json:"listener"`
	// Transport is "udp" or "tcp".
	Transport string `json:"transport"`
	// Name is the question name in lower case without its trailing dot,
	// bytes as they came (not escaped).
	Name string `json:"name"`
	// Type is the question type ("A", "TXT", or "TYPE65" and the like).
	Type string `json:"type"`
	// RCode is the answer's response code ("NOERROR", "NXDOMAIN", ...).
	RCode string `json:"rcode"`
}

// FakeDNS is a small authoritative DNS server over UDP and TCP serving a
// Zone. It logs every query (see Queries and OnQuery). Its methods are safe
// for concurrent use.
type FakeDNS struct {
	zone Zone
	// onQuery, if set, is called for every query from the serving
	// goroutine; it must not block.
	onQuery func(Query)

	// mu guards rebinds, queries and closers.
	mu      sync.Mutex
	rebinds map[string]int // name -> A queries answered so far
	queries []Query
	closers []io.Closer
	wg      sync.WaitGroup
}

// maxQueryLog bounds the query log; later queries are still answered and
// passed to OnQuery.
const maxQueryLog = 1 << 16

// NewFakeDNS returns a server for zone. onQuery may be nil.
func NewFakeDNS(zone Zone, onQuery func(Query)) *FakeDNS {
	return &FakeDNS{zone: zone, onQuery: onQuery, rebinds: make(map[string]int)}
}

// Serve starts answering on addr over UDP and TCP and returns once both
// listeners are bound, with the address they are bound to (port 0 picks
// a free UDP port, and TCP takes the same). It may be called for several
// addresses; queries are logged with the address given here.
func (d *FakeDNS) Serve(addr netip.AddrPort) (netip.AddrPort, error) {
	pick := addr.Port() == 0
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", addr.String())
		if err != nil {
			return addr, fmt.Errorf("fake dns: listen udp %s: %w", addr, err)
		}
		at := addr
		if pick {
			at = netip.AddrPortFrom(addr.Addr(), uint16(pc.LocalAddr().(*net.UDPAddr).Port))
		}
		ln, err := net.Listen("tcp", at.String())
		if err != nil {
			pc.Close()
			// A picked UDP port may be taken for TCP by someone else:
			// pick another.
			if pick && errors.Is(err, syscall.EADDRINUSE) && try < 20 {
				continue
			}
			return at, fmt.Errorf("fake dns: listen tcp %s: %w", at, err)
		}
		addr = at
		return addr, d.serve(pc, ln, addr)
	}
}

// serve starts the two serving goroutines.
func (d *FakeDNS) serve(pc net.PacketConn, ln net.Listener, addr netip.AddrPort) error {
	d.mu.Lock()
	d.closers = append(d.closers, pc, ln)
	d.mu.Unlock()
	d.wg.Add(2)
	go d.serveUDP(pc, addr.String())
	go d.serveTCP(ln, addr.String())
	return nil
}

// Close stops every listener and waits for the serving goroutines.
func (d *FakeDNS) Close() error {
	d.mu.Lock()
	cs := d.closers
	d.closers = nil
	d.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	d.wg.Wait()
	return nil
}

// Queries returns a copy of the query log, oldest first.
func (d *FakeDNS) Queries() []Query {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Query(nil), d.queries...)
}

func (d *FakeDNS) serveUDP(pc net.PacketConn, listener string) {
	defer d.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp := d.answer(buf[:n], listener, "udp"); resp != nil {
			if len(resp) > 512 {
				resp = truncate(resp)
			}
			pc.WriteTo(resp, from)
		}
	}
}

func (d *FakeDNS) serveTCP(ln net.Listener, listener string) {
	defer d.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer c.Close()
			var lb [2]byte
			for {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(c, lb[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(lb[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				resp := d.answer(msg, listener, "tcp")
				if resp == nil {
					return
				}
				out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
				if _, err := c.Write(append(out, resp...)); err != nil {
					return
				}
			}
		}()
	}
}

// truncate cuts a UDP reply to its header and question with TC set.
func truncate(resp []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	h.Truncated = true
	b := dnsmessage.NewBuilder(nil, h)
	b.StartQuestions()
	b.Question(q)
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// answer parses one query and builds the reply; nil drops it.
func (d *FakeDNS) answer(msg []byte, listener, transport string) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	rec, found := d.zone.lookup(name)
	if !found {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	if found {
		d.addAnswers(&b, q.Name, name, q.Type, rec, 0)
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	qu := Query{Time: time.Now(), Listener: listener, Transport: transport, Name: name, Type: TypeName(q.Type), RCode: RCodeName(rh.RCode)}
	d.mu.Lock()
	if len(d.queries) < maxQueryLog {
		d.queries = append(d.queries, qu)
	}
	d.mu.Unlock()
	if d.onQuery != nil {
		d.onQuery(qu)
	}
	return out
}

// addAnswers appends rec's answers for qtype under owner; depth bounds
// CNAME chasing.
func (d *FakeDNS) addAnswers(b *dnsmessage.Builder, owner dnsmessage.Name, name string, qtype dnsmessage.Type, rec Record, depth int) {
	hdr := dnsmessage.ResourceHeader{Name: owner, Class: dnsmessage.ClassINET, TTL: rec.TTL}
	if rec.CNAME != "" {
		target, err := dnsmessage.NewName(strings.TrimSuffix(rec.CNAME, ".") + ".")
		if err != nil {
			return
		}
		b.CNAMEResource(hdr, dnsmessage.CNAMEResource{CNAME: target})
		if qtype == dnsmessage.TypeCNAME || depth >= 8 {
			return
		}
		tname := strings.ToLower(strings.TrimSuffix(rec.CNAME, "."))
		if next, ok := d.zone.lookup(tname); ok {
			d.addAnswers(b, target, tname, qtype, next, depth+1)
		}
		return
	}
	switch qtype {
	case dnsmessage.TypeA, dnsmessage.TypeAAAA:
		addrs := d.addrsFor(name, qtype, rec)
		for _, a := range addrs {
			switch {
			case qtype == dnsmessage.TypeA && a.Is4():
				b.AResource(hdr, dnsmessage.AResource{A: a.As4()})
			case qtype == dnsmessage.TypeAAAA && a.Is6() && !a.Is4In6():
				b.AAAAResource(hdr, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
	case dnsmessage.TypeTXT:
		if len(rec.TXT) > 0 {
			b.TXTResource(hdr, dnsmessage.TXTResource{TXT: rec.TXT})
		}
	}
}

// addrsFor applies the rebinding rule: the first A query of a name with
// Later gets Addrs, every address query after it gets Later.
func (d *FakeDNS) addrsFor(name string, qtype dnsmessage.Type, rec Record) []netip.Addr {
	if rec.Later == nil {
		return rec.Addrs
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.rebinds[name]
	if qtype == dnsmessage.TypeA {
		d.rebinds[name] = n + 1
	}
	if n == 0 {
		return rec.Addrs
	}
	return rec.Later
}

// ResetRebinding makes every rebinding name answer its first addresses
// again at its next A query, so a test can replay a rebinding attack.
func (d *FakeDNS) ResetRebinding() {
	d.mu.Lock()
	clear(d.rebinds)
	d.mu.Unlock()
}

// TypeName is the name of a query type as the fake DNS logs it ("A",
// "AAAA", "TXT", ...).
func TypeName(t dnsmessage.Type) string {
	s := t.String()
	return strings.TrimPrefix(s, "Type")
}

// RCodeName is the name of a response code as the fake DNS logs it
// ("NOERROR", "NXDOMAIN", ...).
func RCodeName(rc dnsmessage.RCode) string {
	switch rc {
	case dnsmessage.RCodeSuccess:
		return "NOERROR"
	case dnsmessage.RCodeNameError:
		return "NXDOMAIN"
	case dnsmessage.RCodeRefused:
		return "REFUSED"
	case dnsmessage.RCodeServerFailure:
		return "SERVFAIL"
	case dnsmessage.RCodeFormatError:
		return "FORMERR"
	}
	return strings.TrimPrefix(rc.String(), "RCode")
}

// DefaultZone is the fake upstream's zone for the lab plan (plan.go).
func DefaultZone() Zone {
	a := mustAddr
	return Zone{
		AppName:                    {Addrs: []netip.Addr{a(AppV4), a(AppV6)}, TXT: []string{"v=lab-txt-must-not-reach-the-worker"}, TTL: 60},
		"*.ok.test":                {Addrs: []netip.Addr{a(OKV4)}, TTL: 60},
		OKName:                     {Addrs: []netip.Addr{a(OKV4)}, TTL: 60},
		RebindName:                 {Addrs: []netip.Addr{a(RebindV4)}, Later: []netip.Addr{a("127.0.0.1")}, TTL: 0},
		MixedName:                  {Addrs: []netip.Addr{a("127.0.0.1"), a(MixedV4)}, TTL: 60},
		PrivateName:                {Addrs: []netip.Addr{a(PrivateV4)}, TTL: 60},
		MetaAName:                  {Addrs: []netip.Addr{a(MetadataV4)}, TTL: 60},
		LoopName:                   {Addrs: []netip.Addr{a("127.0.0.1")}, TTL: 60},
		CNAMEName:                  {CNAME: "metadata.google.internal", TTL: 60},
		AAAAName:                   {Addrs: []netip.Addr{a(MetadataV6)}, TTL: 60},
		BenchName:                  {Addrs: []netip.Addr{a(BenchV4)}, TTL: 60},
		HostOwnName:                {Addrs: []netip.Addr{a(HostOwnV4)}, TTL: 60},
		"metadata.google.internal": {Addrs: []netip.Addr{a(MetadataV4)}, TTL: 60},
		UnapprovedName:             {Addrs: []netip.Addr{a(OtherV4)}, TTL: 60},
		"*." + ExfilZone:           {Addrs: []netip.Addr{a(OtherV4)}, TXT: []string{"exfil-ack"}, TTL: 60},
		"ok.test":                  {Addrs: []netip.Addr{a(OKV4)}, TTL: 60},
		"evilok.test":              {Addrs: []netip.Addr{a(OtherV4)}, TTL: 60},
		"ok.test.evil.test":        {Addrs: []netip.Addr{a(OtherV4)}, TTL: 60},
		"*." + SiteCDNZone:         {Addrs: []netip.Addr{a(SiteCDNV4)}, TTL: 60},
		SiteAssetsName:             {Addrs: []netip.Addr{a(SiteAssetsV4)}, TTL: 60},
		SiteTracker:                {Addrs: []netip.Addr{a(SiteTrackerV4)}, TTL: 60},
	}
}
