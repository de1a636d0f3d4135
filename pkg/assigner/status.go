package assigner

// The CNI STATUS verb: whether an ADD could work now. The CLI's report of
// what is held is in report.go.

import (
	"errors"
	"fmt"

	"github.com/external-ip/external-ip/pkg/errkind"
)

// Ready says whether an ADD could work now: the state directory writable,
// the holder ours or creatable, and the LAN able to reach external IPs of
// the families in use. It adopts no device and marks none; of the state
// directory it only tests that it can be written.
func (a *Assigner) Ready(v4, v6 bool) error {
	a.startCall()
	if err := a.st.Writable(); err != nil {
		return err
	}
	if _, err := a.holder.Find(); err != nil {
		return err
	}
	return errkind.OneLine(errors.Join(a.ups.Ready(a.how, v4, v6), a.readyNAT()))
}

// readyNAT fails STATUS when nf_tables cannot serve this network's steering.
func (a *Assigner) readyNAT() error {
	if !a.steers() {
		return nil
	}
	if err := a.opts.NAT.Probe(); err != nil {
		return fmt.Errorf("traffic %s: %w", a.opts.Traffic, err)
	}
	return nil
}
