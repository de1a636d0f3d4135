package announce

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

// LookUplink is the uplink named name as it is now, for the node process,
// which announces long after an IP was placed: its index or MAC may have
// changed since.
func LookUplink(name string) (Uplink, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return Uplink{}, fmt.Errorf("uplink %q: %w", name, err)
	}
	up := Uplink{Name: ifi.Name, Index: ifi.Index, MAC: ifi.HardwareAddr}
	fwd, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + ifi.Name + "/forwarding")
	up.Router = err == nil && strings.TrimSpace(string(fwd)) == "1"
	return up, nil
}

// AskFrom is the uplink's own IPv4 address a node asks for ip from (the
// conflict probe's second question, and a standby's checks), the zero
// Addr when it has none.
func AskFrom(up Uplink, ip netip.Addr) (netip.Addr, error) { return uplinkIPv4(up, ip) }
