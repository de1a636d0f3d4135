package netns

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestAddPutsIPOnHolderAndDelRemovesIt(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf(v, map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")})
			// A key of the main plugin's own, which the CNI library would drop.
			conf["prevResult"].(map[string]any)["x-main-plugin"] = map[string]any{"kept": true}
			add := h.run(call{command: "ADD", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).mustOK(t, "ADD")
			var got map[string]any
			if err := json.Unmarshal(add.stdout, &got); err != nil {
				t.Fatalf("ADD printed no JSON result: %v: %s", err, add.stdout)
			}
			if got["cniVersion"] != v {
				t.Fatalf("ADD result has cniVersion %v, want %s (prevResult passed through)", got["cniVersion"], v)
			}
			var prev map[string]any
			if b, err := json.Marshal(conf["prevResult"]); err != nil || json.Unmarshal(b, &prev) != nil {
				t.Fatalf("the test's prevResult %v does not encode: %v", conf["prevResult"], err)
			}
			if !reflect.DeepEqual(got, prev) {
				t.Errorf("ADD printed %s, want the prevResult unchanged: %v", add.stdout, prev)
			}
			if !h.holderHas("eip0", "192.0.2.10") {
				t.Fatal("after ADD, 192.0.2.10 is not on eip0")
			}
			h.run(call{command: "DEL", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).mustOK(t, "DEL")
			if h.holderHas("eip0", "192.0.2.10") {
				t.Fatal("after DEL of the only holder, 192.0.2.10 is still on eip0")
			}
		})
	}
}
