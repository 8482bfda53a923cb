package dns

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/nsgate/nsgate/netplan"
	"github.com/nsgate/nsgate/policy"
)

// A gateway behind a gateway (docs/design.md): an nsgate whose upstream
// resolver is another nsgate's DNS (nsgate run inside a container whose
// network is nsgate) gets that gateway's fake addresses (198.18.0.0/15,
// fd6e:7367:6174::/64) as the answers for the names it resolves. They are
// the outer gateway's names for the name, not destinations: a flow to one
// reaches the outer gateway, which decides the name under its own policy
// and dials what it resolves. But the same range is the benchmarking
// range of real networks, and an upstream that is not an nsgate may give
// such an answer for an allowed name; dialling it would reach a host the
// special-range guard exists to keep out.
//
// So the inner nsgate takes such answers as names only when the resolver
// that gave them proves to be an nsgate gateway: it asks that resolver
// for TXT <random label>.nsgate-gateway.invalid, a name under a reserved
// top-level domain that no real resolver answers (RFC 6761: .invalid is
// NXDOMAIN), and an nsgate gateway's DNS answers with gatewayToken. The
// gateway's DNS listens only on its worker's link, so it answers only its
// own worker; nothing of the handshake is ever sent upstream. The random
// label (64 bits) makes a forged answer from off the path as hard to guess
// as the label, on top of the query's ID and port.

const (
	// gatewayZone is the name under which a gateway answers the handshake.
	gatewayZone = "nsgate-gateway.invalid"
	// gatewayToken is the handshake's TXT answer.
	gatewayToken = "nsgate-gateway v1"
	// RuleGateway is the rule of the dns record of an answered handshake.
	RuleGateway = "builtin:gateway"
)

// isGatewayProbe reports whether name (normalized) is a handshake query
// name: one label of 1 to 63 letters, digits or hyphens, then gatewayZone.
func isGatewayProbe(name string) bool {
	label, ok := strings.CutSuffix(name, "."+gatewayZone)
	if !ok || label == "" || len(label) > 63 {
		return false
	}
	for _, c := range []byte(label) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// answerGateway answers a handshake query (its TXT question is q):
// gatewayToken, TTL 0, so that no cache keeps it.
func (s *Server) answerGateway(h dnsmessage.Header, q *dnsmessage.Question, name string) reply {
	s.stats.allowed.Add(1)
	s.log(name, TypeString(q.Type), policy.Decision{Verdict: policy.Allow, Rule: RuleGateway}, nil)
	r := newReply(h, dnsmessage.RCodeSuccess, q)
	r.answer(dnsmessage.TypeTXT, 0, append([]byte{byte(len(gatewayToken))}, gatewayToken...))
	return r
}

// isNsgateFake reports whether a lies in nsgate's fake-IP pools: the same
// in every plan, so an outer gateway's are these.
func isNsgateFake(a netip.Addr) bool { return netplan.Default().InFakePool(a) }

// isGateway asks server for the handshake and reports whether it
// answered as an nsgate gateway. Any failure (no answer, NXDOMAIN, a
// timeout, another text) is false: the fake-range answers are then put
// through the policy as addresses, which refuses them.
func (s *Server) isGateway(ctx context.Context, server string) bool {
	var nonce [8]byte
	for i := range nonce {
		nonce[i] = byte(rand.Uint32())
	}
	name := hex.EncodeToString(nonce[:]) + "." + gatewayZone
	id := uint16(rand.Uint32())
	msg, err := buildQuery(id, name, dnsmessage.TypeTXT)
	if err != nil {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	raw, err := s.exchange(actx, server, msg)
	if err != nil {
		return false
	}
	return parseGatewayReply(raw, id, name) == nil
}

// parseGatewayReply checks that raw answers the handshake query (id,
// name) with gatewayToken owned by name.
func parseGatewayReply(raw []byte, id uint16, name string) error {
	var p dnsmessage.Parser
	h, err := p.Start(raw)
	if err != nil {
		return fmt.Errorf("malformed reply: %w", err)
	}
	if !h.Response || h.ID != id || h.OpCode != 0 || h.RCode != dnsmessage.RCodeSuccess {
		return errMismatch
	}
	q, err := p.Question()
	if err != nil || q.Type != dnsmessage.TypeTXT || q.Class != dnsmessage.ClassINET || ownerName(q.Name) != name {
		return errMismatch
	}
	if err := p.SkipAllQuestions(); err != nil {
		return errMismatch
	}
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			return errors.New("no gateway answer")
		}
		if rh.Type != dnsmessage.TypeTXT || rh.Class != dnsmessage.ClassINET || ownerName(rh.Name) != name {
			if err := p.SkipAnswer(); err != nil {
				return err
			}
			continue
		}
		txt, err := p.TXTResource()
		if err != nil {
			return err
		}
		if len(txt.TXT) == 1 && txt.TXT[0] == gatewayToken {
			return nil
		}
	}
}
