package session

import "testing"

func TestOutboundAddr(t *testing.T) {
	if a, err := outboundAddr("192.0.2.7", false); err != nil || a.String() != "192.0.2.7" {
		t.Errorf("literal: %v %v", a, err)
	}
	if a, err := outboundAddr("lo", false); err != nil || !a.IsLoopback() || !a.Is4() {
		t.Errorf("interface lo: %v %v, want its IPv4 loopback address", a, err)
	}
	if _, err := outboundAddr("no-such-if0", false); err == nil {
		t.Error("missing interface: no error")
	}
	if a, err := outboundAddr("", true); err != nil || a.IsValid() {
		t.Errorf("unset: %v %v", a, err)
	}
}

func TestBoundDialerUnset(t *testing.T) {
	if d, err := BoundDialer("", ""); d != nil || err != nil {
		t.Errorf("BoundDialer with nothing set = %v, %v; want nil (the default dialer)", d != nil, err)
	}
	if _, err := BoundDialer("no-such-if0", ""); err == nil {
		t.Error("BoundDialer with a missing interface: no error")
	}
}
