package config_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

func TestPoolsAreReadByNameWithTheirRangesOfBothFamilies(t *testing.T) {
	c := mustLoad(t, netConf(t, map[string]any{
		"allowedRanges": ranges,
		"pools": map[string]any{
			"web": []string{"192.0.2.8/30", "2001:db8::10-2001:db8::11"},
			"db":  []string{"198.51.100.7-198.51.100.9"},
		},
	}))
	if got := c.PoolNames(); !slices.Equal(got, []string{"db", "web"}) {
		t.Fatalf("PoolNames() = %v, want [db web] (sorted)", got)
	}
	web := c.LocalPool("web")
	if web == nil || len(web.Ranges) != 2 {
		t.Fatalf("LocalPool(web) = %+v, want its two ranges", web)
	}
	for _, tc := range []struct {
		ip   string
		pool string
	}{{"192.0.2.9", "web"}, {"2001:db8::11", "web"}, {"198.51.100.8", "db"}, {"192.0.2.12", ""}, {"2001:db8::12", ""}} {
		p := c.PoolCovering(netip.MustParseAddr(tc.ip))
		if got := ""; p != nil {
			got = p.Name
			if got != tc.pool {
				t.Errorf("PoolCovering(%s) = %s, want %q", tc.ip, got, tc.pool)
			}
		} else if tc.pool != "" {
			t.Errorf("PoolCovering(%s) = none, want %s", tc.ip, tc.pool)
		}
	}
	if c.LocalPool("nope") != nil {
		t.Error("LocalPool(nope) found a pool the config does not have")
	}
}

func TestABadPoolIsRefusedNamingTheFieldAndTheValue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keys  map[string]any
		kind  error
		wants []string
	}{
		{"not an object", map[string]any{"pools": []string{"192.0.2.0/24"}}, config.ErrDecode, []string{"pools: want an object of pool name to a list of ranges"}},
		{"bad range", map[string]any{"pools": map[string]any{"web": []string{"192.0.2.1/24"}}}, config.ErrInvalid, []string{`pools.web[0]: "192.0.2.1/24" must be written 192.0.2.0/24`}},
		{"empty", map[string]any{"pools": map[string]any{"web": []string{}}}, config.ErrInvalid, []string{"pools.web: empty"}},
		{"bad name", map[string]any{"pools": map[string]any{"we b": []string{"192.0.2.0/30"}}}, config.ErrInvalid, []string{`pools: "we b" may hold only letters`}},
		{"outside allowedRanges", map[string]any{"pools": map[string]any{"web": []string{"192.0.2.0/23"}}}, config.ErrInvalid, []string{`pools.web[0]: "192.0.2.0/23" is not inside allowedRanges [192.0.2.0/24 198.51.100.0/24 2001:db8::/32]`}},
		{"straddles two allowed ranges", map[string]any{"pools": map[string]any{"web": []string{"192.0.2.250-198.51.100.1"}}}, config.ErrInvalid, []string{`"192.0.2.250-198.51.100.1" is not inside allowedRanges`}},
		{"pools overlap", map[string]any{"pools": map[string]any{"a": []string{"192.0.2.0/28"}, "b": []string{"192.0.2.10-192.0.2.20"}}}, config.ErrInvalid, []string{`pools.b[0]: "192.0.2.10-192.0.2.20" overlaps "192.0.2.0/28" of pool a`}},
		{"a static IP in a pool", map[string]any{"externalIPs": []string{"192.0.2.5"}, "pools": map[string]any{"web": []string{"192.0.2.0/28"}}}, config.ErrInvalid, []string{`externalIPs[0]: "192.0.2.5" lies in pool web`}},
		{"runtimeConfig pool not a string", map[string]any{"runtimeConfig": map[string]any{"externalIPPool": 3}}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := map[string]any{"allowedRanges": ranges}
			for k, v := range tc.keys {
				keys[k] = v
			}
			_, err := config.Load(netConf(t, keys))
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("Load refused what only ADD reads: %v", err)
				}
				return
			}
			checkErr(t, err, tc.kind, tc.wants...)
		})
	}
}

func TestAPoolMustLieInAllowedRangesAndHoldNoUnusableAddress(t *testing.T) {
	_, err := config.Load(netConf(t, map[string]any{"pools": map[string]any{"web": []string{"192.0.2.0/30"}}}))
	checkErr(t, err, config.ErrInvalid, `pools.web[0]: "192.0.2.0/30" refused: allowedRanges is empty`)
	for rng, what := range map[string]string{
		"127.0.0.0/30": "loopback", "224.0.0.0/30": "multicast", "169.254.1.0/30": "link-local",
		"fe80::/64": "link-local", "::1-::2": "loopback", "255.255.255.254/31": "broadcast",
		"0.1.2.0/30": `"this network"`, "240.0.0.0/30": "reserved", "::102:300/126": "IPv4-compatible",
	} {
		_, err := config.Load(netConf(t, map[string]any{"allowedRanges": []string{"0.0.0.0/0", "::/0"}, "pools": map[string]any{"p": []string{rng}}}))
		checkErr(t, err, config.ErrInvalid, `pools.p[0]: "`+rng+`" holds`, what)
	}
}

func TestThePoolRequestIsReadFromEverySourceAndTwoPoolsAreRefused(t *testing.T) {
	keys := map[string]any{"allowedRanges": ranges, "pools": map[string]any{"web": []string{"192.0.2.0/28"}}}
	c := mustLoad(t, netConf(t, keys))
	if r, err := c.PoolRequested("IgnoreUnknown=1;EXTERNAL_IP_POOL=web;K8S_POD_NAME=x"); err != nil || r.Name != "web" || r.Source != "CNI_ARGS EXTERNAL_IP_POOL" {
		t.Errorf("CNI_ARGS: %+v %v; want web from CNI_ARGS EXTERNAL_IP_POOL", r, err)
	}
	if r, err := c.PoolRequested(""); err != nil || r.Name != "" {
		t.Errorf("no request: %+v %v; want none", r, err)
	}
	keys["runtimeConfig"] = map[string]any{"externalIPPool": " web "}
	c = mustLoad(t, netConf(t, keys))
	if r, err := c.PoolRequested("EXTERNAL_IP_POOL=web"); err != nil || r.Name != "web" || r.Source != "runtimeConfig.externalIPPool" || r.FromAnnotation() {
		t.Errorf("runtimeConfig and CNI_ARGS agreeing: %+v %v; want web from runtimeConfig.externalIPPool", r, err)
	}
	_, err := c.PoolRequested("EXTERNAL_IP_POOL=db")
	checkErr(t, err, config.ErrInvalid, `CNI_ARGS EXTERNAL_IP_POOL: "db" differs from runtimeConfig.externalIPPool "web": an attachment draws from one pool`)
	_, err = c.PoolRequested("EXTERNAL_IP_POOL")
	checkErr(t, err, config.ErrArgs, "CNI_ARGS")

	keys["runtimeConfig"] = annotations("external-ip/pool", "web")
	if r, err := mustLoad(t, netConf(t, keys)).PoolRequested(""); err != nil || !r.FromAnnotation() || r.Name != "web" {
		t.Errorf("annotation: %+v %v; want web from the annotation", r, err)
	}
	keys["runtimeConfig"] = map[string]any{"externalIPPool": []string{"web"}}
	_, err = mustLoad(t, netConf(t, keys)).PoolRequested("")
	checkErr(t, err, config.ErrDecode, "runtimeConfig.externalIPPool: want a pool name string")
}
