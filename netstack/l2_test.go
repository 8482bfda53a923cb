package netstack

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/nsgate/nsgate/policy"
)

// TestTAP drives the gateway over an Ethernet (TAP-like) link: it must
// answer ARP for the gateway, then serve IP as on a TUN.
func TestTAP(t *testing.T) {
	gwMAC := tcpip.LinkAddress("\x02\x00\x00\x00\x00\x02")
	wMAC := tcpip.LinkAddress("\x02\x00\x00\x00\x01\x00")
	ep := channel.New(64, 1500, gwMAC)
	sink := &fakeSink{}
	pol := mustPolicy(t, testPolicy)
	g, err := New(Config{
		Link:   ethernet.New(ep),
		Policy: func() *policy.Policy { return pol },
		Audit:  sink,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	frame := func(dst tcpip.LinkAddress, etherType uint16, payload []byte) []byte {
		b := make([]byte, 14, 14+len(payload))
		copy(b[0:6], dst)
		copy(b[6:12], wMAC)
		binary.BigEndian.PutUint16(b[12:], etherType)
		return append(b, payload...)
	}
	inject := func(b []byte) {
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
		ep.InjectInbound(0, pkt)
		pkt.DecRef()
	}
	// next returns the next frame the gateway sends that matches pred.
	next := func(what string, pred func([]byte) bool) []byte {
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			pkt := ep.Read()
			if pkt == nil {
				time.Sleep(time.Millisecond)
				continue
			}
			b := pkt.ToView().AsSlice()
			pkt.DecRef()
			if pred(b) {
				return b
			}
		}
		t.Fatalf("no %s", what)
		return nil
	}

	arp := make([]byte, 28)
	binary.BigEndian.PutUint16(arp[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(arp[2:], 0x0800) // IPv4
	arp[4], arp[5] = 6, 4
	binary.BigEndian.PutUint16(arp[6:], 1) // request
	copy(arp[8:14], wMAC)
	copy(arp[14:18], mustAddr(Guest4).AsSlice())
	copy(arp[24:28], mustAddr(Gateway4).AsSlice())
	inject(frame("\xff\xff\xff\xff\xff\xff", 0x0806, arp))
	reply := next("ARP reply for the gateway", func(b []byte) bool {
		return len(b) >= 42 && binary.BigEndian.Uint16(b[12:]) == 0x0806 && binary.BigEndian.Uint16(b[20:]) == 2
	})
	if tcpip.LinkAddress(reply[22:28]) != gwMAC || netip.AddrFrom4([4]byte(reply[28:32])) != mustAddr(Gateway4) {
		t.Fatalf("ARP reply % x", reply)
	}

	inject(frame(gwMAC, 0x0800, icmpEcho(mustAddr(Guest4), mustAddr(Gateway4), 3, 3)))
	next("echo reply", func(b []byte) bool {
		typ, _, ok := icmpInfo(b[14:])
		return len(b) > 14 && tcpip.LinkAddress(b[0:6]) == wMAC && ok && typ == 0
	})

	inject(frame(gwMAC, 0x0800, tcpSyn(ap("10.0.2.100:40000"), ap("198.51.100.7:80"))))
	next("RST for a denied SYN", func(b []byte) bool {
		fl, ok := tcpFlags(b[14:])
		return len(b) > 14 && ok && fl&0x04 != 0
	})

	inject(frame(gwMAC, 0x0800, rawProto(mustAddr(Guest4), mustAddr("203.0.113.9"), 253)))
	next("administratively prohibited", func(b []byte) bool {
		typ, code, ok := icmpInfo(b[14:])
		return len(b) > 14 && ok && typ == 3 && code == 13
	})
}
