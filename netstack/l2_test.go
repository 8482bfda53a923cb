package netstack

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
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

// TestTAPAnswersOnlyForItsOwn: on an Ethernet link the stack is
// promiscuous, but the gateway answers ARP requests and IPv6 neighbour
// solicitations only for its own addresses (the gateway and the DNS
// address). A request for another address in the subnet gets no answer:
// each is sent before one for an own address, and the first answer that
// comes back must be that one's.
func TestTAPAnswersOnlyForItsOwn(t *testing.T) {
	gwMAC := tcpip.LinkAddress("\x02\x00\x00\x00\x00\x02")
	wMAC := tcpip.LinkAddress("\x02\x00\x00\x00\x01\x00")
	ep := channel.New(256, 1500, gwMAC)
	pol := mustPolicy(t, testPolicy)
	g, err := New(Config{
		Link:   ethernet.New(ep),
		Policy: func() *policy.Policy { return pol },
		Audit:  &fakeSink{},
		IPv6:   true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	inject := func(dst tcpip.LinkAddress, etherType uint16, payload []byte) {
		b := make([]byte, 14, 14+len(payload))
		copy(b[0:6], dst)
		copy(b[6:12], wMAC)
		binary.BigEndian.PutUint16(b[12:], etherType)
		b = append(b, payload...)
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
		ep.InjectInbound(0, pkt)
		pkt.DecRef()
	}
	// answer returns the address the next ARP reply or neighbour
	// advertisement the gateway sends is for.
	answer := func(what string) netip.Addr {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			pkt := ep.Read()
			if pkt == nil {
				time.Sleep(time.Millisecond)
				continue
			}
			b := pkt.ToView().AsSlice()
			pkt.DecRef()
			switch {
			case len(b) >= 42 && binary.BigEndian.Uint16(b[12:]) == 0x0806 && binary.BigEndian.Uint16(b[20:]) == 2:
				return netip.AddrFrom4([4]byte(b[28:32]))
			case len(b) >= 14+40+24 && binary.BigEndian.Uint16(b[12:]) == 0x86dd && b[14+6] == 58 && b[14+40] == 136:
				return netip.AddrFrom16([16]byte(b[14+40+8 : 14+40+24]))
			}
		}
		t.Fatalf("no answer to %s", what)
		return netip.Addr{}
	}
	arpReq := func(target string) []byte {
		a := make([]byte, 28)
		binary.BigEndian.PutUint16(a[0:], 1)
		binary.BigEndian.PutUint16(a[2:], 0x0800)
		a[4], a[5] = 6, 4
		binary.BigEndian.PutUint16(a[6:], 1)
		copy(a[8:14], wMAC)
		copy(a[14:18], mustAddr(Guest4).AsSlice())
		copy(a[24:28], mustAddr(target).AsSlice())
		return a
	}
	for _, own := range []string{Gateway4, DNS4} {
		for _, other := range []string{"10.0.2.50", "10.0.2.1", "10.0.2.254", "203.0.113.9"} {
			inject("\xff\xff\xff\xff\xff\xff", 0x0806, arpReq(other))
			inject("\xff\xff\xff\xff\xff\xff", 0x0806, arpReq(own))
			if got := answer("ARP for " + own); got != mustAddr(own) {
				t.Errorf("ARP: asked for %s then %s, first reply is for %s; want no reply for %s", other, own, got, other)
				answer("ARP for " + own) // the own one's reply follows
			}
		}
	}
	ns := func(target string) []byte {
		src, tgt := mustAddr(Guest6), mustAddr(target)
		tb := tgt.As16()
		dst := netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: tb[13], 14: tb[14], 15: tb[15]})
		icmp := make([]byte, 24+8)
		icmp[0] = 135
		copy(icmp[8:24], tb[:])
		icmp[24], icmp[25] = 1, 1 // source link-layer address option
		copy(icmp[26:32], wMAC)
		h := header.ICMPv6(icmp)
		h.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{
			Header: h, Src: tcpip.AddrFrom16(src.As16()), Dst: tcpip.AddrFrom16(dst.As16()),
		}))
		ip := make([]byte, 40, 40+len(icmp))
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(icmp)))
		ip[6], ip[7] = 58, 255
		s16, d16 := src.As16(), dst.As16()
		copy(ip[8:24], s16[:])
		copy(ip[24:40], d16[:])
		return append(ip, icmp...)
	}
	mcastMAC := func(target string) tcpip.LinkAddress {
		tb := mustAddr(target).As16()
		return tcpip.LinkAddress([]byte{0x33, 0x33, 0xff, tb[13], tb[14], tb[15]})
	}
	for _, own := range []string{Gateway6, DNS6} {
		for _, other := range []string{"fd00::50", "fd00::1", "2001:db8::9"} {
			inject(mcastMAC(other), 0x86dd, ns(other))
			inject(mcastMAC(own), 0x86dd, ns(own))
			if got := answer("neighbour solicitation for " + own); got != mustAddr(own) {
				t.Errorf("NS: asked for %s then %s, first advertisement is for %s; want none for %s", other, own, got, other)
				answer("neighbour solicitation for " + own)
			}
		}
	}
}
