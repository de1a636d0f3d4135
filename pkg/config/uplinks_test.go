package config_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

func TestUplinkRoutingDefaultsToOnWithTheDocumentedMarkTablesAndPriorities(t *testing.T) {
	u := mustLoad(t, netConf(t, nil)).UplinkRouting
	if u.Off || u.Route != slots.Default() || len(u.Gateways) != 0 {
		t.Errorf("uplinkRouting by default is %+v, want on with %+v and no gateways", u, slots.Default())
	}
}

func TestUplinkRoutingTakesItsKeys(t *testing.T) {
	u := mustLoad(t, netConf(t, map[string]any{"uplinkRouting": map[string]any{
		"mode": "off", "mark": "0x00f00000", "table": 7000, "priority": 7000,
		"gateways": map[string]any{"eth1": []string{"192.0.2.254", "fe80::1"}},
	}})).UplinkRouting
	if !u.Off || u.Route != (slots.Config{Mask: 0x00f00000, Table: 7000, Priority: 7000}) {
		t.Errorf("uplinkRouting loaded as %+v", u)
	}
	want := []netip.Addr{netip.MustParseAddr("192.0.2.254"), netip.MustParseAddr("fe80::1")}
	if !slices.Equal(u.Gateways["eth1"], want) {
		t.Errorf("gateways of eth1 %v, want %v", u.Gateways["eth1"], want)
	}
}

func TestUplinkRoutingRefusesWhatCannotWorkNamingTheKeyAndValue(t *testing.T) {
	for _, tc := range []struct {
		value any
		parts []string
	}{
		{map[string]any{"mode": "on"}, []string{"uplinkRouting.mode", `"on"`}},
		{map[string]any{"mark": "0x0f0f0000"}, []string{"uplinkRouting.mark", "0xf0f0000"}},
		{map[string]any{"mark": "lots"}, []string{"uplinkRouting.mark", `"lots"`}},
		{map[string]any{"table": 250}, []string{"uplinkRouting.table", "250"}},
		{map[string]any{"priority": 32766}, []string{"uplinkRouting.priority", "32766"}},
		{map[string]any{"gateways": map[string]any{"eth1": []string{"192.0.2.1", "192.0.2.2"}}}, []string{"uplinkRouting.gateways[eth1]", `"192.0.2.2"`}},
		{map[string]any{"gateways": map[string]any{"eth1": []string{"ff02::1"}}}, []string{"uplinkRouting.gateways[eth1]", `"ff02::1"`}},
		{map[string]any{"gateways": map[string]any{"eth/1": []string{"192.0.2.1"}}}, []string{"uplinkRouting.gateways", "eth/1"}},
	} {
		_, err := config.Load(netConf(t, map[string]any{"uplinkRouting": tc.value}))
		checkErr(t, err, config.ErrInvalid, tc.parts...)
	}
	_, err := config.Load(netConf(t, map[string]any{"uplinkRouting": "on"}))
	checkErr(t, err, config.ErrDecode, "uplinkRouting")
}
