package internet

import (
	"strings"
	"testing"
)

func TestDefaultLayout(t *testing.T) {
	l := DefaultLayout()
	keys := map[string]bool{}
	for _, s := range l.Services {
		if keys[s.Key()] {
			t.Errorf("two services on %s", s.Key())
		}
		keys[s.Key()] = true
	}
	// The endpoints the integration tests use, with their bodies.
	for _, k := range []string{"203.0.113.10:8080/tcp", "[2001:db8::10]:8080/tcp", "203.0.113.10:9090/tcp", "198.51.100.20:8080/tcp",
		"169.254.169.254:80/tcp", "127.0.0.1:8080/tcp", "[::1]:8080/tcp", "203.0.113.10:5353/udp", "198.51.100.20:9999/udp", "169.254.169.254:53/udp"} {
		if !keys[k] {
			t.Errorf("DefaultLayout lacks %s", k)
		}
	}
	for _, a := range l.LoopbackAddrs() {
		if a.IsLoopback() {
			t.Errorf("LoopbackAddrs lists %v, which lo already has", a)
		}
	}
	if !strings.Contains(strings.Join(l.Approved, ","), "app") {
		t.Error("the app is not approved")
	}
}
