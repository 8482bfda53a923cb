package intercept

import (
	"net/http"
	"strconv"
	"strings"
)

// hopByHop are the Connection options a request may name: the hop-by-hop
// headers themselves. nsgate judges a request with the headers it holds,
// and the proxy drops every header Connection names before forwarding:
// naming an end-to-end header (Content-Type, say) would change what the
// upstream reads after the decision.
var hopByHop = map[string]bool{
	"close": true, "keep-alive": true, "upgrade": true, "te": true, "http2-settings": true,
	"proxy-connection": true, "transfer-encoding": true, "trailer": true,
}

// reroutingHeaders name another path to servers that route on them
// (IIS's rewrite module, older Symfony and Zend): a request rule judges
// the request-target, not them.
var reroutingHeaders = []string{"X-Original-URL", "X-Rewrite-URL"}

// checkHeaders returns why the request's headers cannot be judged as they
// will be forwarded, or "":
//   - an Upgrade to anything but a WebSocket: after a 101 the proxy would
//     splice the two streams raw, unread by the request rules, the leak
//     checks and the scrub (a WebSocket's messages are read: websocket.go);
//     part of the request rules (--break request-rules lifts it);
//   - a Connection option that is not a hop-by-hop header;
//   - on a flow with request rules, a header that names another path
//     (X-Original-URL, X-Rewrite-URL, any case, '_' for '-').
func (h *handler) checkHeaders(r *http.Request) string {
	if ups := r.Header.Values("Upgrade"); len(ups) > 0 && !h.e.NoPathCheck {
		if len(ups) != 1 || !strings.EqualFold(strings.TrimSpace(ups[0]), "websocket") {
			return "Upgrade: " + strconv.Quote(clipName(strings.Join(ups, ", "))) + " is not relayed on a terminated flow: after the switch nothing would read the stream (only a WebSocket is, whose messages nsgate checks)"
		}
	}
	for _, v := range r.Header.Values("Connection") {
		for _, o := range strings.Split(v, ",") {
			if o = strings.ToLower(strings.TrimSpace(o)); o != "" && !hopByHop[o] {
				return "Connection names " + strconv.Quote(clipName(o)) + ", which is not a hop-by-hop header: it would be dropped after the request was judged with it"
			}
		}
	}
	if !h.e.NoPathCheck {
		for name := range r.Header {
			n := strings.ReplaceAll(name, "_", "-")
			for _, rh := range reroutingHeaders {
				if strings.EqualFold(n, rh) {
					return rh + " names another path to servers that route on it; the request rules judge the request-target alone"
				}
			}
		}
	}
	return ""
}
