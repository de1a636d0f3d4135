package config_test

import (
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

func TestHoldAutoIsARouteExactlyWhenIngressIsSteered(t *testing.T) {
	for traffic, want := range map[string]config.Hold{
		"both": config.HoldRoute, "ingress": config.HoldRoute,
		"egress": config.HoldAddress, "none": config.HoldAddress,
	} {
		for _, hold := range []any{nil, "auto"} {
			c := mustLoad(t, netConf(t, map[string]any{"traffic": traffic, "hold": hold}))
			if c.Hold != want {
				t.Errorf("traffic %s, hold %v: held as %q, want %q", traffic, hold, c.Hold, want)
			}
		}
	}
}

func TestHoldTakesAnExplicitModeWhateverTheTraffic(t *testing.T) {
	for _, traffic := range []string{"both", "none"} {
		for _, h := range []config.Hold{config.HoldAddress, config.HoldRoute} {
			c := mustLoad(t, netConf(t, map[string]any{"traffic": traffic, "hold": string(h)}))
			if c.Hold != h {
				t.Errorf("traffic %s, hold %q: loaded as %q", traffic, h, c.Hold)
			}
		}
	}
}

func TestRouteProtocolDefaultsTo200AndTakes1To255(t *testing.T) {
	if got := mustLoad(t, netConf(t, nil)).RouteProtocol; got != 200 {
		t.Errorf("routeProtocol defaults to %d, want 200", got)
	}
	for _, n := range []int{1, 42, 255} {
		if got := mustLoad(t, netConf(t, map[string]any{"routeProtocol": n})).RouteProtocol; got != n {
			t.Errorf("routeProtocol %d loaded as %d", n, got)
		}
	}
}

func TestHoldAndRouteProtocolRefuseOtherValuesNamingThem(t *testing.T) {
	_, err := config.Load(netConf(t, map[string]any{"hold": "addr"}))
	checkErr(t, err, config.ErrInvalid, "hold", `"addr"`)
	_, err = config.Load(netConf(t, map[string]any{"hold": true}))
	checkErr(t, err, config.ErrDecode, "hold", "true")
	for _, n := range []any{0, 256, -1, 2.5} {
		_, err = config.Load(netConf(t, map[string]any{"routeProtocol": n}))
		checkErr(t, err, config.ErrInvalid, "routeProtocol", "1..255")
	}
	_, err = config.Load(netConf(t, map[string]any{"routeProtocol": "200"}))
	checkErr(t, err, config.ErrDecode, "routeProtocol", `"200"`)
}
