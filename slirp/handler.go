package slirp

import (
	"errors"
	"fmt"

	"github.com/nsgate/nsgate/inbound"
)

// NewHandler returns a Handler that carries out the API's requests on f:
// add_hostfwd's HostFwd becomes an inbound.Rule, f's forwards are listed
// as HostFwds, and removing an ID f does not know is ErrUnknownID. The
// forwards are f's: the caller closes f (after the API, whose Close leaves
// them alone). The Handler is as safe for concurrent use as f is.
func NewHandler(f *inbound.Forwarder) Handler { return forwarderHandler{f} }

type forwarderHandler struct{ f *inbound.Forwarder }

func (h forwarderHandler) AddHostFwd(fw HostFwd) (int, error) {
	added, err := h.f.Add(inbound.Rule{
		Proto:     fw.Proto,
		HostAddr:  fw.HostAddr,
		HostPort:  fw.HostPort,
		GuestAddr: fw.GuestAddr,
		GuestPort: fw.GuestPort,
	})
	return added.ID, err
}

func (h forwarderHandler) ListHostFwd() []HostFwd {
	fwds := h.f.List()
	out := make([]HostFwd, len(fwds))
	for i, fw := range fwds {
		out[i] = HostFwd{
			ID:        fw.ID,
			Proto:     fw.Proto,
			HostAddr:  fw.HostAddr,
			HostPort:  fw.HostPort,
			GuestAddr: fw.GuestAddr,
			GuestPort: fw.GuestPort,
		}
	}
	return out
}

func (h forwarderHandler) RemoveHostFwd(id int) error {
	err := h.f.Remove(id)
	if errors.Is(err, inbound.ErrUnknownID) {
		return fmt.Errorf("remove forward %d: %w", id, ErrUnknownID)
	}
	return err
}
