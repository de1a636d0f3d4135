package netns

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
)

// exampleRequest says how a runtime asks one example network for external
// IPs, the way the runtime the example is written for does it.
type exampleRequest struct {
	// via is the source: "runtimeConfig" (capability externalIPs),
	// "annotation" (capability io.kubernetes.cri.pod-annotations), "multus"
	// (args.cni, as Multus injects cni-args), "cniArgs" (CNI_ARGS, as podman
	// passes its own environment), "static" (the example's own list) or
	// "pool" (capability externalIPPool, asking for pool).
	via string
	// ips are the IPs requested; for "static" they are read from the file;
	// for "pool" they are the first of each family the pool gives.
	ips  []string
	pool string
}

// conflistExamples lists every file in conflist-examples/. A new example
// needs an entry here: the test refuses a file it cannot exercise.
var conflistExamples = map[string]exampleRequest{
	"bridge-runtimeconfig.conflist":  {via: "runtimeConfig", ips: []string{"192.0.2.100", "2001:db8:1::100"}},
	"containerd-annotation.conflist": {via: "annotation", ips: []string{"192.0.2.101", "2001:db8:1::101"}},
	"multus-delegate.conflist":       {via: "multus", ips: []string{"192.0.2.102"}},
	"podman-cniargs.conflist":        {via: "cniArgs", ips: []string{"192.0.2.103", "2001:db8:1::103"}},
	"routed-strictarp.conflist":      {via: "runtimeConfig", ips: []string{"192.0.2.104", "2001:db8:1::104"}},
	"address-hold.conflist":          {via: "runtimeConfig", ips: []string{"192.0.2.105", "2001:db8:1::105"}},
	"static.conflist":                {via: "static"},
	"local-pool.conflist":            {via: "pool", pool: "web", ips: []string{"192.0.2.200", "2001:db8:1::200"}},
}

// readmeKeys are the keys an example may set on the external-ip entry:
// those of the README's "Config keys" table, and the entry's own (type,
// name, cniVersion, args). A misspelt optional key, which the plugin would
// silently ignore, fails here, and a key the README does not document is
// not one a user can rely on.
func readmeKeys(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(b), "\n## Config keys\n")
	table, _, _ = strings.Cut(table, "\n## ")
	keys := []string{"type", "name", "cniVersion", "args"}
	for _, line := range strings.Split(table, "\n") {
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, k := range strings.Split(cell, ", ") {
			keys = append(keys, strings.Trim(k, "`"))
		}
	}
	if !slices.Contains(keys, "allowedRanges") || !slices.Contains(keys, "logLevel") {
		t.Fatalf("read keys %v from the README's Config keys table: the test reads the wrong place", keys)
	}
	return keys
}

func TestEveryConflistExampleRunsThroughLibcni(t *testing.T) {
	dir := "../../conflist-examples"
	var files []string
	for _, pat := range []string{"*.conflist", "*.conf"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatalf("no examples in %s", dir)
	}
	binDir := exampleTools(t)
	// The plugin under test comes from TestMain's build; the reference
	// plugins from scripts/tools.sh. libcni searches both, as CNI_PATH.
	paths := []string{binDir, filepath.Dir(pluginBin)}
	for _, file := range files {
		req, ok := conflistExamples[filepath.Base(file)]
		if !ok {
			t.Errorf("%s: no entry in conflistExamples (examples_test.go): say how a runtime asks it for IPs", file)
			continue
		}
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			runExample(t, file, req, paths)
		})
	}
}

// exampleTools builds bridge, host-local and loopback (and cnitool) with
// scripts/tools.sh into a cache directory that outlives the test, so that a
// second run builds nothing. go.mod lacks the go.sum entries of their
// dependencies, so they are installed as pkg@version, outside this module.
func exampleTools(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "external-ip", "cni-tools")
	cmd := exec.Command("bash", "../../scripts/tools.sh", dir)
	cmd.Env = append(os.Environ(), "TOOLS_SKIP_PLUGIN=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/tools.sh %s: %v\n%s", dir, err, out)
	}
	return dir
}

func runExample(t *testing.T, file string, req exampleRequest, paths []string) {
	list := loadExample(t, file)
	h := newHost(t)
	ctr := "eipc-" + randomID(4)
	h.sh("ip netns add %s", ctr)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ctr).Run() })

	list, static := rewriteExample(t, list, req, h.dataDir)
	asRoute := exampleHoldsRoutes(t, list)
	// A node forwards (Kubernetes requires it, and IPs held as routes need
	// it); a bridge that is not a gateway does not turn it on.
	h.inNode("sysctl -qw net.ipv4.ip_forward=1")
	rt, want := exampleRuntimeConf(t, req, static, ctr)
	cni := libcni.NewCNIConfig(paths, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inNode := func(what string, f func() error) {
		t.Helper()
		if err := exampleInNode(h, f); err != nil {
			t.Fatalf("%s %s: %v", what, filepath.Base(file), err)
		}
	}

	inNode("ADD", func() error {
		res, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		r, err := types100.NewResultFromResult(res)
		if err != nil {
			return err
		}
		if len(r.IPs) == 0 || len(r.Interfaces) == 0 {
			return fmt.Errorf("the chain's result lost the main plugin's result: %s", exampleJSON(r))
		}
		return nil
	})
	for _, ip := range want {
		if addr, route := h.heldOnHolder(ip); addr == asRoute || route != asRoute {
			t.Fatalf("after ADD, %s: address on eip0 %v, route through eip0 %v; want it held as a route %v:\n%s%s", ip, addr, route, asRoute,
				h.sh("ip -n %s addr", h.name), h.sh("ip -n %s route; ip -n %[1]s -6 route", h.name))
		}
	}
	inNode("CHECK", func() error { return cni.CheckNetworkList(ctx, list, rt) })
	inNode("DEL", func() error { return cni.DelNetworkList(ctx, list, rt) })
	for _, ip := range want {
		if addr, route := h.heldOnHolder(ip); addr || route {
			t.Fatalf("after DEL, %s is still on eip0 (address %v, route %v), although its only holder left", ip, addr, route)
		}
	}
	// A runtime may repeat DEL; nothing is left to release.
	inNode("second DEL", func() error { return cni.DelNetworkList(ctx, list, rt) })
}

// exampleInNode runs f on a locked OS thread inside the node namespace, so that
// the plugins libcni execs run there, as a runtime's run on the host.
func exampleInNode(h *host, f func() error) error {
	node, err := ns.GetNS("/var/run/netns/" + h.name)
	if err != nil {
		return err
	}
	defer node.Close()
	return node.Do(func(ns.NetNS) error { return f() })
}

// loadExample loads a .conflist, or a .conf as a one-plugin list, as a
// runtime would.
func loadExample(t *testing.T, file string) *libcni.NetworkConfigList {
	t.Helper()
	var list *libcni.NetworkConfigList
	var err error
	if strings.HasSuffix(file, ".conf") {
		var one *libcni.PluginConfig
		if one, err = libcni.ConfFromFile(file); err == nil {
			list, err = libcni.ConfListFromConf(one)
		}
	} else {
		list, err = libcni.ConfListFromFile(file)
	}
	if err != nil {
		t.Fatalf("libcni cannot load %s: %v", file, err)
	}
	return list
}

// rewriteExample changes only what the test must: state directories (ours
// and host-local's), a named uplink, and, for Multus, the args.cni that
// Multus injects into every plugin of the list. It returns the static IPs.
func rewriteExample(t *testing.T, list *libcni.NetworkConfigList, req exampleRequest, dataDir string) (*libcni.NetworkConfigList, []string) {
	t.Helper()
	raw := map[string]any{}
	if err := json.Unmarshal(list.Bytes, &raw); err != nil {
		t.Fatal(err)
	}
	plugins, _ := raw["plugins"].([]any)
	ours := 0
	var static []string
	for i, p := range plugins {
		conf, _ := p.(map[string]any)
		if conf == nil {
			t.Fatalf("plugins[%d] is not an object", i)
		}
		if ipam, ok := conf["ipam"].(map[string]any); ok && ipam["type"] == "host-local" {
			ipam["dataDir"] = t.TempDir() // else /var/lib/cni/networks
		}
		if req.via == "multus" {
			conf["args"] = map[string]any{"cni": map[string]any{"externalIPs": req.ips}}
		}
		if conf["type"] != "external-ip" {
			continue
		}
		ours++
		keys := readmeKeys(t)
		for k := range conf {
			if !slices.Contains(keys, k) {
				t.Errorf("plugins[%d]: key %q is not a config key of external-ip", i, k)
			}
		}
		conf["dataDir"] = dataDir
		if _, ok := conf["uplink"]; ok {
			conf["uplink"] = "uplink0"
		}
		if ips, ok := conf["externalIPs"].([]any); ok {
			for _, v := range ips {
				static = append(static, fmt.Sprint(v))
			}
		}
	}
	if ours != 1 {
		t.Fatalf("the example has %d external-ip entries, want 1", ours)
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return out, static
}

// exampleHoldsRoutes says whether the example's entry holds its IPs as
// routes: "hold" says so, or, with "auto" (the default), its traffic
// steers ingress ("both", the default, or "ingress").
func exampleHoldsRoutes(t *testing.T, list *libcni.NetworkConfigList) bool {
	t.Helper()
	for _, p := range list.Plugins {
		var c struct{ Type, Hold, Traffic string }
		if err := json.Unmarshal(p.Bytes, &c); err != nil {
			t.Fatal(err)
		}
		if c.Type != "external-ip" {
			continue
		}
		if c.Hold == "route" || c.Hold == "address" {
			return c.Hold == "route"
		}
		return c.Traffic == "" || c.Traffic == "both" || c.Traffic == "ingress"
	}
	t.Fatal("no external-ip entry")
	return false
}

// heldOnHolder says whether ip is an address of eip0, and whether a host
// route sends it through eip0, in the node.
func (h *host) heldOnHolder(ip string) (addr, route bool) {
	h.t.Helper()
	fam := "-4"
	if strings.Contains(ip, ":") {
		fam = "-6"
	}
	routes := h.inNode("ip %s route show table main dev eip0", fam)
	for _, l := range strings.Split(routes, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == ip || f[0] == ip+"/32" || f[0] == ip+"/128") {
			route = true
		}
	}
	return h.holderHas("eip0", ip), route
}

// exampleRuntimeConf is what the example's runtime passes, and the IPs to expect.
func exampleRuntimeConf(t *testing.T, req exampleRequest, static []string, ctr string) (*libcni.RuntimeConf, []string) {
	t.Helper()
	rt := &libcni.RuntimeConf{
		ContainerID: "ctr-" + randomID(4),
		NetNS:       "/var/run/netns/" + ctr,
		IfName:      "eth0",
		CacheDir:    t.TempDir(), // else /var/lib/cni
	}
	want := req.ips
	switch req.via {
	case "runtimeConfig":
		rt.CapabilityArgs = map[string]any{"externalIPs": req.ips}
	case "annotation":
		// containerd and CRI-O send every pod annotation.
		rt.CapabilityArgs = map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{
			"external-ip/addresses":          strings.Join(req.ips, ", "),
			"io.kubernetes.cri.sandbox-name": "web-0",
			"other/annotation":               "x",
		}}
	case "cniArgs":
		// What podman's CNI backend passes, its own CNI_ARGS last.
		rt.Args = [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAME", "web"},
			{"EXTERNAL_IPS", strings.Join(req.ips, ",")},
		}
	case "pool":
		// cnitool's CAP_ARGS, or a libcni user's capability args.
		rt.CapabilityArgs = map[string]any{"externalIPPool": req.pool}
	case "static":
		want = static
	case "multus":
		// In the config itself: see rewriteExample.
	default:
		t.Fatalf("unknown source %q", req.via)
	}
	if len(want) == 0 {
		t.Fatalf("no IPs to expect (via %s)", req.via)
	}
	return rt, want
}

func exampleJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
