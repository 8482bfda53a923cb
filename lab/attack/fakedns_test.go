package attack

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/lab/internet"
)

func startFakeDNS(t *testing.T, zone internet.Zone, onQuery func(internet.Query)) (*internet.FakeDNS, string) {
	t.Helper()
	d := internet.NewFakeDNS(zone, onQuery)
	addr, err := d.Serve(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, addr.String()
}

func testAttacker() *attacker {
	return &attacker{cfg: Config{Timeout: 2 * time.Second}, marker: "m", secret: "s"}
}

func TestFakeDNSAnswers(t *testing.T) {
	var seen atomic.Int64
	d, server := startFakeDNS(t, internet.DefaultZone(), func(internet.Query) { seen.Add(1) })
	a := testAttacker()
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		qtype     dnsmessage.Type
		transport string
		want      string // substring of the answer's String()
		why       string
	}{
		{internet.AppName, dnsmessage.TypeA, "udp", "A " + internet.AppV4, "the approved app"},
		{"APP.Test.", dnsmessage.TypeAAAA, "tcp", "AAAA " + internet.AppV6, "case and trailing dot, over TCP"},
		{internet.AppName, dnsmessage.TypeTXT, "udp", "v=lab-txt", "TXT the gateway must not pass on"},
		{"anything.ok.test", dnsmessage.TypeA, "udp", "A " + internet.OKV4, "the wildcard"},
		{"a.b.exfil.test", dnsmessage.TypeA, "udp", "A " + internet.OtherV4, "the exfiltration zone answers"},
		{internet.CNAMEName, dnsmessage.TypeA, "udp", "A " + internet.MetadataV4, "a CNAME is chased within the zone"},
		{internet.AAAAName, dnsmessage.TypeA, "udp", "NOERROR, no answer", "no A record, only AAAA"},
		{"nothing.test", dnsmessage.TypeA, "udp", "NXDOMAIN", "unknown names"},
		{internet.MixedName, dnsmessage.TypeA, "udp", "A 127.0.0.1, A " + internet.MixedV4, "both answers, private first"},
	} {
		ans, err := a.dnsExchange(ctx, server, tc.transport, tc.name, tc.qtype)
		if err != nil {
			t.Errorf("%s (%s): %v", tc.name, tc.why, err)
			continue
		}
		if !strings.Contains(ans.String(), tc.want) {
			t.Errorf("%s %s (%s): %s, want %q", internet.TypeName(tc.qtype), tc.name, tc.why, ans, tc.want)
		}
	}
	qs := d.Queries()
	if int64(len(qs)) != seen.Load() || len(qs) != 9 {
		t.Errorf("logged %d queries, callback saw %d, want 9", len(qs), seen.Load())
	}
	if qs[1].Transport != "tcp" || qs[1].Name != "app.test" || qs[1].Type != "AAAA" || qs[1].Listener != server {
		t.Errorf("second query logged as %+v", qs[1])
	}
}

func TestFakeDNSRebinds(t *testing.T) {
	_, server := startFakeDNS(t, internet.DefaultZone(), nil)
	a := testAttacker()
	var got []string
	for i := 0; i < 3; i++ {
		if i == 1 {
			// AAAA queries do not advance the rebinding.
			a.dnsExchange(context.Background(), server, "udp", internet.RebindName, dnsmessage.TypeAAAA)
		}
		ans, err := a.dnsExchange(context.Background(), server, "udp", internet.RebindName, dnsmessage.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join(ans.answers, ","))
	}
	want := []string{"A " + internet.RebindV4, "A 127.0.0.1", "A 127.0.0.1"}
	if !slices.Equal(got, want) {
		t.Errorf("rebinding answers %v, want %v", got, want)
	}
}

func TestFakeDNSTruncates(t *testing.T) {
	long := make([]string, 40)
	for i := range long {
		long[i] = strings.Repeat("x", 60)
	}
	_, server := startFakeDNS(t, internet.Zone{"big.test": {TXT: long, TTL: 1}}, nil)
	a := testAttacker()
	ans, err := a.dnsExchange(context.Background(), server, "udp", "big.test", dnsmessage.TypeTXT)
	if err != nil || len(ans.answers) != 0 {
		t.Errorf("over UDP: %v %v, want a truncated empty reply", ans, err)
	}
	ans, err = a.dnsExchange(context.Background(), server, "tcp", "big.test", dnsmessage.TypeTXT)
	if err != nil || len(ans.answers) != 1 {
		t.Errorf("over TCP: %v %v, want the whole TXT record", ans, err)
	}
}
