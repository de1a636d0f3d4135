package config

import (
	"encoding/json"
	"net/netip"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/external-ip/external-ip/pkg/traffic"
)

func (c *Config) setTraffic(raw *netConf) error {
	c.Traffic = traffic.Both
	if len(raw.Traffic) == 0 || string(raw.Traffic) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(raw.Traffic, &s); err != nil {
		return decodef("traffic: want a string, got %s", truncate(raw.Traffic, 64))
	}
	switch t := traffic.Mode(s); t {
	case traffic.Both, traffic.Ingress, traffic.Egress, traffic.None:
		c.Traffic = t
		return nil
	}
	return invalidf("traffic: %q is not one of both, ingress, egress, none", s)
}

// ContainerAddrs are the container's own addresses from prevResult, with
// their prefix lengths: those of its interfaces inside the sandbox, or
// every address when prevResult names no interface of an address or none
// in a sandbox.
func (c *Config) ContainerAddrs() []netip.Prefix {
	if c.PrevResult == nil {
		return nil
	}
	res, err := current.NewResultFromResult(c.PrevResult)
	if err != nil {
		return nil
	}
	var inSandbox, all []netip.Prefix
	for _, ipc := range res.IPs {
		ip, ok := netip.AddrFromSlice(ipc.Address.IP)
		ones, _ := ipc.Address.Mask.Size()
		if !ok {
			continue
		}
		ip = ip.Unmap() // net.IP keeps IPv4 in 16 bytes
		a := netip.PrefixFrom(ip, ones)
		all = append(all, a)
		if i := ipc.Interface; i != nil && *i >= 0 && *i < len(res.Interfaces) && res.Interfaces[*i].Sandbox != "" {
			inSandbox = append(inSandbox, a)
		}
	}
	if len(inSandbox) > 0 {
		return inSandbox
	}
	return all
}

// CheckFamilies refuses steering an external IP of a family for which the
// container has no address: nothing could be DNATed to it or SNATed from it.
func (c *Config) CheckFamilies(ips []IP, container []netip.Prefix) error {
	if c.Traffic == traffic.None {
		return nil
	}
	for _, ip := range ips {
		if !hasFamily(container, ip.Addr) {
			fam := "IPv4"
			if ip.Addr.Is6() {
				fam = "IPv6"
			}
			return invalidf("traffic: %s: prevResult gives the container no %s address to steer it to", ip.Addr, fam)
		}
	}
	return nil
}

// RefuseContainerAddrs refuses an external IP that prevResult gives the
// container itself, whatever the traffic mode: the node would hold the
// container's own address and answer its traffic, and the steering of the
// attachment's other IPs would DNAT them to an address of the node.
func RefuseContainerAddrs(ips []IP, container []netip.Prefix) error {
	for _, ip := range ips {
		for _, c := range container {
			if c.Addr() == ip.Addr {
				return invalidf("%s: %q is the container's own address (prevResult ips: %s)", ip.Source, ip.Addr, c)
			}
		}
	}
	return nil
}

func hasFamily(addrs []netip.Prefix, ip netip.Addr) bool {
	for _, a := range addrs {
		if a.Addr().Is4() == ip.Is4() {
			return true
		}
	}
	return false
}
