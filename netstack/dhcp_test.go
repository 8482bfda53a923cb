package netstack

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/nsgate/nsgate/policy"
)

// dhcpLink is a gateway on an Ethernet link, the test playing a DHCP
// client on the other end.
type dhcpLink struct {
	g    *Gateway
	sink *fakeSink
	ep   *channel.Endpoint
	mac  net.HardwareAddr
}

func newDHCPLink(t *testing.T, dhcp bool) *dhcpLink {
	t.Helper()
	ep := channel.New(64, 1500, tcpip.LinkAddress("\x52\x55\x0a\x00\x02\x02"))
	pol := mustPolicy(t, testPolicy)
	sink := &fakeSink{}
	g, err := New(Config{
		Link:   ethernet.New(ep),
		Policy: func() *policy.Policy { return pol },
		Audit:  sink,
		Names:  &fakeNames{},
		DHCP:   dhcp,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return &dhcpLink{g: g, sink: sink, ep: ep, mac: net.HardwareAddr{0x0e, 0, 0, 0, 0, 0x15}}
}

// send broadcasts m from 0.0.0.0:68, as a client without an address does.
func (l *dhcpLink) send(m *dhcpv4.DHCPv4) { l.sendBytes(m.ToBytes()) }

// sendBytes broadcasts payload from 0.0.0.0:68 to port 67.
func (l *dhcpLink) sendBytes(payload []byte) {
	ip := udp4Packet(netip.IPv4Unspecified(), netip.AddrFrom4([4]byte{255, 255, 255, 255}), 68, 67, payload)
	b := make([]byte, 14, 14+len(ip))
	copy(b[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:12], l.mac)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(append(b, ip...))})
	l.ep.InjectInbound(0, pkt)
	pkt.DecRef()
}

// reply returns the next DHCP message the gateway sends, checking that it
// goes from 10.0.2.2:67 to the broadcast address, port 68; nil if none
// comes within d.
func (l *dhcpLink) reply(t *testing.T, d time.Duration) *dhcpv4.DHCPv4 {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		pkt := l.ep.Read()
		if pkt == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		b := pkt.ToView().AsSlice()
		pkt.DecRef()
		if len(b) < 14+28 || binary.BigEndian.Uint16(b[12:]) != 0x0800 || b[14+9] != protoUDP {
			continue
		}
		ip := b[14:]
		if src, dst := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])); src != mustAddr(Gateway4) || dst != netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			t.Fatalf("DHCP reply from %s to %s, want from the gateway to the broadcast address", src, dst)
		}
		if sp, dp := binary.BigEndian.Uint16(ip[20:]), binary.BigEndian.Uint16(ip[22:]); sp != 67 || dp != 68 {
			t.Fatalf("DHCP reply ports %d -> %d", sp, dp)
		}
		m, err := dhcpv4.FromBytes(ip[28:])
		if err != nil {
			t.Fatalf("reply is not DHCP: %v", err)
		}
		return m
	}
	return nil
}

// TestDHCP: discover, offer, request, ack, as udhcpc does it; the lease is
// the worker's address with the gateway and the DNS address.
func TestDHCP(t *testing.T) {
	l := newDHCPLink(t, true)
	disc, err := dhcpv4.NewDiscovery(l.mac)
	if err != nil {
		t.Fatal(err)
	}
	l.send(disc)
	offer := l.reply(t, 2*time.Second)
	if offer == nil {
		t.Fatal("no offer")
	}
	check := func(m *dhcpv4.DHCPv4, typ dhcpv4.MessageType) {
		t.Helper()
		if m.MessageType() != typ || m.TransactionID != disc.TransactionID || !m.YourIPAddr.Equal(net.ParseIP(Guest4)) ||
			m.SubnetMask().String() != "ffffff00" || len(m.Router()) != 1 || !m.Router()[0].Equal(net.ParseIP(Gateway4)) ||
			len(m.DNS()) != 1 || !m.DNS()[0].Equal(net.ParseIP(DNS4)) || !m.ServerIdentifier().Equal(net.ParseIP(Gateway4)) ||
			m.IPAddressLeaseTime(0) != dhcpLease {
			t.Errorf("%s: %s", typ, m.Summary())
		}
	}
	check(offer, dhcpv4.MessageTypeOffer)
	req, err := dhcpv4.NewRequestFromOffer(offer)
	if err != nil {
		t.Fatal(err)
	}
	l.send(req)
	ack := l.reply(t, 2*time.Second)
	if ack == nil {
		t.Fatal("no ack")
	}
	check(ack, dhcpv4.MessageTypeAck)

	// Another address: a nak.
	other, _ := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.15"))))
	l.send(other)
	if nak := l.reply(t, 2*time.Second); nak == nil || nak.MessageType() != dhcpv4.MessageTypeNak {
		t.Errorf("request for 10.0.2.15: %v, want a nak", nak)
	}
	if st := l.g.Stats(); st.DHCPReplies != 3 || st.UDPDenied != 0 {
		t.Errorf("DHCPReplies %d, UDPDenied %d; want 3 and 0 (gVisor delivers the broadcast answers locally too: they are not flows)", st.DHCPReplies, st.UDPDenied)
	}
	if d := l.sink.dump(); d != "" {
		t.Errorf("audit records for the DHCP exchange, want none:%s", d)
	}
}

// TestDHCPOff: without Config.DHCP the request is a packet from 0.0.0.0,
// which the filter refuses like any source other than the worker's.
func TestDHCPOff(t *testing.T) {
	l := newDHCPLink(t, false)
	disc, _ := dhcpv4.NewDiscovery(l.mac)
	l.send(disc)
	if m := l.reply(t, 200*time.Millisecond); m != nil {
		t.Fatalf("answered %s without DHCP", m.MessageType())
	}
	if st := l.g.Stats(); st.DHCPReplies != 0 || st.PacketsRefused != 1 {
		t.Errorf("stats %+v, want the discover refused", st)
	}
}

// TestDHCPBadInput: what is not a DHCP request (garbage, a cut message, a
// reply sent to the server) gets no answer, is counted as malformed and
// recorded nowhere; a good request after it is still answered.
func TestDHCPBadInput(t *testing.T) {
	l := newDHCPLink(t, true)
	disc, err := dhcpv4.NewDiscovery(l.mac)
	if err != nil {
		t.Fatal(err)
	}
	good := disc.ToBytes()
	offer, _ := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer))
	offer.OpCode = dhcpv4.OpcodeBootReply
	bad := [][]byte{
		nil,
		[]byte("garbage, not bootp"),
		good[:100],      // cut inside the fixed header
		offer.ToBytes(), // a reply, not a request
	}
	for _, p := range bad {
		l.sendBytes(p)
	}
	if m := l.reply(t, 300*time.Millisecond); m != nil {
		t.Fatalf("an answer to bad input: %s", m.Summary())
	}
	if st := l.g.Stats(); st.Malformed < uint64(len(bad)) || st.DHCPReplies != 0 {
		t.Errorf("Malformed %d, DHCPReplies %d; want at least %d and 0", st.Malformed, st.DHCPReplies, len(bad))
	}
	if d := l.sink.dump(); d != "" {
		t.Errorf("audit records for bad DHCP input, want none:%s", d)
	}
	l.send(disc)
	if m := l.reply(t, 2*time.Second); m == nil || m.MessageType() != dhcpv4.MessageTypeOffer {
		t.Errorf("after the bad input, a discover got %v, want an offer", m)
	}
}
