package netns

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestEachSourceAlonePutsItsIPsOnTheHolder(t *testing.T) {
	tests := []struct {
		name    string
		extra   map[string]any
		cniArgs string
		want    []string
	}{
		{"static externalIPs", map[string]any{"externalIPs": []string{"192.0.2.20"}}, "", []string{"192.0.2.20/32"}},
		{"runtimeConfig.externalIPs", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.21")}, "", []string{"192.0.2.21/32"}},
		{"args.cni.externalIPs (Multus cni-args)",
			map[string]any{"args": map[string]any{"cni": map[string]any{"externalIPs": []string{"192.0.2.22"}}}}, "",
			[]string{"192.0.2.22/32"}},
		{"pod annotation with two IPs",
			map[string]any{"runtimeConfig": annotations("external-ip/addresses", "192.0.2.23, 192.0.2.24")}, "",
			[]string{"192.0.2.23/32", "192.0.2.24/32"}},
		{"CNI_ARGS EXTERNAL_IPS among runtime keys", nil, "IgnoreUnknown=1;K8S_POD_NAME=p;EXTERNAL_IPS=192.0.2.30",
			[]string{"192.0.2.30/32"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf("1.0.0", tt.extra)
			add := attach("ADD", "c1", conf)
			add.cniArgs = tt.cniArgs
			h.run(add).mustOK(t, "ADD")
			h.mustHold(t, "ADD with "+tt.name, "eip0", tt.want...)

			del := attach("DEL", "c1", conf)
			del.cniArgs = tt.cniArgs
			h.run(del).mustOK(t, "DEL")
			h.mustHold(t, "DEL with "+tt.name, "eip0")
		})
	}
}

func TestBothFamiliesInOneRequestGetAddressesAndAProxyEntry(t *testing.T) {
	const ip4, ip6 = "192.0.2.40", "2001:db8:1::40"
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ip4, ip6)})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD")
	h.mustHold(t, "ADD of both families", "eip0", ip4+"/32", ip6+"/128")
	if !h.proxied(ip6, "uplink0") {
		t.Fatalf("after ADD, `ip -6 neigh show proxy` has no entry for %s on uplink0:\n%s",
			ip6, h.stdout("ip -n %s -6 neigh show proxy", h.name))
	}
	// Never a source address for the node, and usable at once.
	line := h.sh("ip -n %s -6 -o addr show dev eip0 to %s/128", h.name, ip6)
	for _, want := range []string{"nodad", "preferred_lft 0sec"} {
		if !strings.Contains(line, want) {
			t.Errorf("%s on eip0 lacks %q: %s", ip6, want, line)
		}
	}

	h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL")
	h.mustHold(t, "DEL of both families", "eip0")
	if h.proxied(ip6, "uplink0") {
		t.Fatalf("after DEL, the proxy entry for %s is still on uplink0", ip6)
	}
}

func TestAddWithNoRequestedIPPassesPrevResultThroughAndCreatesNothing(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			// The annotation capability is there, as containerd always sends
			// it, but without our annotation.
			conf := h.netConf(v, map[string]any{"runtimeConfig": annotations("example.com/other", "192.0.2.5")})
			before := h.settledView()
			add := h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD with no requested IP")

			var got, want any
			if err := json.Unmarshal(add.stdout, &got); err != nil {
				t.Fatalf("ADD printed no JSON result: %v: %s", err, add.stdout)
			}
			b, _ := json.Marshal(conf["prevResult"])
			json.Unmarshal(b, &want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("ADD did not pass prevResult through unchanged:\n got %s\nwant %s", add.stdout, b)
			}
			if h.deviceExists("eip0") {
				t.Fatal("ADD with no requested IP created eip0")
			}
			h.mustBeUnchanged(t, "ADD with no requested IP", before)
		})
	}
}
