package config_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/traffic"
)

func TestTrafficDefaultsToBothAndTakesEachMode(t *testing.T) {
	if got := mustLoad(t, netConf(t, nil)).Traffic; got != traffic.Both {
		t.Errorf("traffic defaults to %q, want both", got)
	}
	for _, m := range []traffic.Mode{traffic.Both, traffic.Ingress, traffic.Egress, traffic.None} {
		c := mustLoad(t, netConf(t, map[string]any{"traffic": string(m)}))
		if c.Traffic != m {
			t.Errorf("traffic %q loaded as %q", m, c.Traffic)
		}
		if c.Traffic.Ingress() != (m == "both" || m == "ingress") || c.Traffic.Egress() != (m == "both" || m == "egress") {
			t.Errorf("traffic %q: ingress %v, egress %v", m, c.Traffic.Ingress(), c.Traffic.Egress())
		}
	}
}

func TestTrafficRefusesOtherValuesNamingThem(t *testing.T) {
	_, err := config.Load(netConf(t, map[string]any{"traffic": "all"}))
	checkErr(t, err, config.ErrInvalid, "traffic", `"all"`)
	_, err = config.Load(netConf(t, map[string]any{"traffic": 1}))
	checkErr(t, err, config.ErrDecode, "traffic", "1")
}

func prevResult(ips []map[string]any, ifaces []map[string]any) map[string]any {
	return map[string]any{"cniVersion": "1.0.0", "ips": ips, "interfaces": ifaces}
}

func TestContainerAddrsAreTheSandboxInterfacesOrElseAll(t *testing.T) {
	ifaces := []map[string]any{{"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/var/run/netns/x"}}
	zero, two := 0, 2
	c := mustLoad(t, netConf(t, map[string]any{"prevResult": prevResult([]map[string]any{
		{"address": "10.88.0.1/16", "interface": zero},
		{"address": "10.88.0.5/16", "interface": two},
		{"address": "fd00::5/64", "interface": two},
	}, ifaces)}))
	want := []netip.Prefix{netip.MustParsePrefix("10.88.0.5/16"), netip.MustParsePrefix("fd00::5/64")}
	if got := c.ContainerAddrs(); !slices.Equal(got, want) {
		t.Errorf("container addresses %v, want the sandbox interface's %v", got, want)
	}
	c = mustLoad(t, netConf(t, map[string]any{"prevResult": prevResult([]map[string]any{
		{"address": "10.88.0.5/16"},
	}, nil)}))
	if got := c.ContainerAddrs(); !slices.Equal(got, want[:1]) {
		t.Errorf("container addresses %v, want every address when none names a sandbox interface", got)
	}
}

func TestCheckFamiliesRefusesAnIPWithNoContainerAddressOfItsFamily(t *testing.T) {
	c := mustLoad(t, netConf(t, nil))
	v4 := []netip.Prefix{netip.MustParsePrefix("10.88.0.5/16")}
	ips := []config.IP{{Addr: netip.MustParseAddr("192.0.2.10")}, {Addr: netip.MustParseAddr("2001:db8::10")}}
	checkErr(t, c.CheckFamilies(ips, v4), config.ErrInvalid, "2001:db8::10", "IPv6")
	checkErr(t, c.CheckFamilies(ips[:1], nil), config.ErrInvalid, "192.0.2.10", "IPv4")
	if err := c.CheckFamilies(ips[:1], v4); err != nil {
		t.Errorf("refused an IPv4 IP for a container with an IPv4 address: %v", err)
	}
	c = mustLoad(t, netConf(t, map[string]any{"traffic": "none"}))
	if err := c.CheckFamilies(ips, nil); err != nil {
		t.Errorf("traffic none refused an IP for want of a container address: %v", err)
	}
}

func TestRefuseContainerAddrsNamesTheSourceAndTheValue(t *testing.T) {
	container := []netip.Prefix{netip.MustParsePrefix("10.88.0.5/16"), netip.MustParsePrefix("fd00::5/64")}
	ok := []config.IP{{Addr: netip.MustParseAddr("192.0.2.7"), Source: "externalIPs[0]"}, {Addr: netip.MustParseAddr("10.88.0.6"), Source: "x"}}
	if err := config.RefuseContainerAddrs(ok, container); err != nil {
		t.Errorf("an IP that is not the container's own (one of its subnet) was refused: %v", err)
	}
	for _, ip := range []string{"10.88.0.5", "fd00::5"} {
		reqs := append(slices.Clone(ok), config.IP{Addr: netip.MustParseAddr(ip), Source: "runtimeConfig.externalIPs[2]"})
		err := config.RefuseContainerAddrs(reqs, container)
		checkErr(t, err, config.ErrInvalid, "runtimeConfig.externalIPs[2]", `"`+ip+`"`, "container's own address")
	}
}
