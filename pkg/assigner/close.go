package assigner

import "github.com/external-ip/external-ip/pkg/host"

// Close releases what the Assigner keeps open for its invocation, its
// netlink socket. A plugin invocation exits instead; a long-running caller
// (the installer's node upkeep, an Assigner per device and round) must
// close each one, or it leaks a socket a round until it runs out of
// descriptors. The NAT given in Options is the caller's to close.
func (a *Assigner) Close() {
	a.dropRunner()
	if k, ok := a.k.(*host.Netlink); ok {
		k.Close()
	}
}
