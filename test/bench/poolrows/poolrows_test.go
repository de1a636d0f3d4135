package poolrows

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

// The pools' IPs count up from the range's first address, across octets:
// the filler claims and the explicit IPs must lie inside their pools.
func TestNthCountsUpFromTheRangesFirstAddress(t *testing.T) {
	for _, c := range []struct {
		prefix string
		i      int
		want   string
	}{{poolFullRange, 1, "198.19.168.1"}, {poolFullRange, 1000, "198.19.171.232"}, {poolNamedRange, 256, "198.19.177.0"}} {
		if got := nth(c.prefix, c.i); got != c.want {
			t.Errorf("nth(%s, %d) = %s, want %s", c.prefix, c.i, got, c.want)
		}
	}
}

// A row's ADD names its pod to the plugin as the runtime would: the pod's
// namespace, name and UID in CNI_ARGS, its sandbox as the container.
func TestACallNamesItsPodAsTheRuntimeWould(t *testing.T) {
	r := New(Config{})
	r.uids["pe-3"] = "uid-3"
	c := r.call("pe-3", poolAnnotation(poolEmpty))
	if c.ContainerID != "sandbox-pe-3" || len(c.Env) != 1 || !strings.Contains(c.Env[0], "K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pe-3;K8S_POD_UID=uid-3") {
		t.Errorf("call: %+v", c)
	}
	if a, _ := c.RuntimeConfig["io.kubernetes.cri.pod-annotations"].(map[string]string); a["external-ip/pool"] != poolEmpty {
		t.Errorf("runtimeConfig: %v, want the pool annotation", c.RuntimeConfig)
	}
}

// The node-local pool row's change to the bench's ADD is a config the
// plugin takes: its pool lies inside the bench's allowedRanges, and the
// runtimeConfig asks for it.
func TestTheNodeLocalPoolRowsConfigParsesAndAsksItsPool(t *testing.T) {
	c := LocalCall()
	conf := map[string]any{"cniVersion": "1.0.0", "name": "bench", "type": "external-ip",
		"allowedRanges": []string{"198.18.0.0/15", "2001:db8:1::/64"}, "runtimeConfig": c.RuntimeConfig}
	maps.Copy(conf, c.Conf)
	stdin, _ := json.Marshal(conf)
	got, err := config.Load(stdin)
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	pr, err := got.PoolRequested("")
	if err != nil || pr.Name != localPool || got.LocalPool(pr.Name) == nil {
		t.Errorf("the request %+v (%v) names no pool of the config %v", pr, err, got.PoolNames())
	}
	if c.ContainerID == "" {
		t.Errorf("no sandbox: the bench's container ID would be empty")
	}
}
