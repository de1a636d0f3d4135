package netns

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/external-ip/external-ip/pkg/assigner"
)

// crashBin is the plugin built with the faultinject tag: it kills itself
// with SIGKILL at the step named by assigner.CrashEnv.
var (
	crashBin     string
	crashBinErr  error
	crashBinOnce sync.Once
)

func faultBinary(t *testing.T) string {
	t.Helper()
	crashBinOnce.Do(func() {
		crashBin = filepath.Join(filepath.Dir(pluginBin), "external-ip-faultinject")
		out, err := exec.Command("go", "build", "-tags", "faultinject", "-o", crashBin, "../../plugins/external-ip").CombinedOutput()
		if err != nil {
			crashBinErr = err
			t.Logf("%s", out)
		}
	})
	if crashBinErr != nil {
		t.Fatalf("building the faultinject plugin: %v", crashBinErr)
	}
	return crashBin
}

// statusReport is the part of `external-ip status --json` these tests read.
type statusReport struct {
	Device string `json:"device"`
	IPs    []struct {
		IP       string `json:"ip"`
		OnDevice bool   `json:"onDevice"`
		Holders  []struct {
			ContainerID string `json:"containerID"`
		} `json:"holders"`
	} `json:"ips"`
	Drift []string `json:"drift"`
}

func (h *host) status() []statusReport {
	h.t.Helper()
	out := h.inNode("%s status --json --data-dir %s", pluginBin, h.dataDir)
	var reps []statusReport
	if err := json.Unmarshal([]byte(out), &reps); err != nil {
		h.t.Fatalf("status --json printed %q: %v", out, err)
	}
	return reps
}

// consistent fails unless the state and the holder agree exactly.
func (h *host) consistent(when string) map[string]int {
	h.t.Helper()
	held := map[string]int{}
	for _, r := range h.status() {
		if len(r.Drift) > 0 {
			h.t.Fatalf("%s: drift between state and kernel: %v", when, r.Drift)
		}
		for _, ip := range r.IPs {
			held[ip.IP] = len(ip.Holders)
		}
	}
	return held
}

var (
	addSteps = []string{"journal", "device", "record", "index", "address", "done"}
	delSteps = []string{"journal", "record", "address", "done"}
)

func TestAddKilledAtAnyStepIsRepairedByTheNextInvocation(t *testing.T) {
	bin := faultBinary(t)
	for _, step := range addSteps {
		t.Run(step, func(t *testing.T) {
			h := newHost(t)
			conf := func(ips ...string) map[string]any {
				return h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ips...)})
			}
			if step != "device" {
				h.run(call{command: "ADD", containerID: "b", ifName: "eth0", netns: "/var/run/netns/b", conf: conf("192.0.2.10")}).mustOK(t, "ADD b")
			}
			r := h.runWith(bin, call{command: "ADD", containerID: "a", ifName: "eth0", netns: "/var/run/netns/a", conf: conf("192.0.2.10", "2001:db8:1::10")}, assigner.CrashEnv+"="+step)
			if r.err == nil {
				t.Fatalf("ADD a was not killed at step %q", step)
			}
			// The next invocation, for another attachment, finishes or
			// forgets the killed change; then the runtime's DEL for the
			// failed ADD releases whatever it left.
			h.run(call{command: "ADD", containerID: "c", ifName: "eth0", netns: "/var/run/netns/c", conf: conf("192.0.2.20")}).mustOK(t, "ADD c")
			h.consistent("after the next ADD")
			h.run(call{command: "DEL", containerID: "a", ifName: "eth0", conf: conf()}).mustOK(t, "DEL a")
			held := h.consistent("after DEL a")
			if step != "device" && held["192.0.2.10"] != 1 {
				t.Fatalf("after DEL a, 192.0.2.10 has %d holders, want 1 (b)", held["192.0.2.10"])
			}
			if h.holderHas("eip0", "2001:db8:1::10") {
				t.Fatal("2001:db8:1::10 leaked on eip0 after the killed ADD was deleted")
			}
			for _, id := range []string{"b", "c"} {
				h.run(call{command: "DEL", containerID: id, ifName: "eth0", conf: conf()}).mustOK(t, "DEL "+id)
			}
			if held := h.consistent("after every DEL"); len(held) != 0 {
				t.Fatalf("after every DEL, still held: %v", held)
			}
			for _, ip := range []string{"192.0.2.10", "192.0.2.20", "2001:db8:1::10"} {
				if h.holderHas("eip0", ip) {
					t.Fatalf("%s leaked on eip0", ip)
				}
			}
		})
	}
}

func TestDelKilledAtAnyStepIsFinishedByTheRetriedDel(t *testing.T) {
	bin := faultBinary(t)
	for _, step := range delSteps {
		t.Run(step, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10", "2001:db8:1::10")})
			h.run(call{command: "ADD", containerID: "a", ifName: "eth0", netns: "/var/run/netns/a", conf: conf}).mustOK(t, "ADD a")
			h.run(call{command: "ADD", containerID: "b", ifName: "eth0", netns: "/var/run/netns/b", conf: h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")})}).mustOK(t, "ADD b")
			r := h.runWith(bin, call{command: "DEL", containerID: "a", ifName: "eth0", conf: conf}, assigner.CrashEnv+"="+step)
			if r.err == nil {
				t.Fatalf("DEL a was not killed at step %q", step)
			}
			h.run(call{command: "DEL", containerID: "a", ifName: "eth0", conf: conf}).mustOK(t, "retried DEL a")
			held := h.consistent("after the retried DEL")
			if held["192.0.2.10"] != 1 || !h.holderHas("eip0", "192.0.2.10") {
				t.Fatalf("192.0.2.10 must stay for b: holders %d, on eip0 %v", held["192.0.2.10"], h.holderHas("eip0", "192.0.2.10"))
			}
			if h.holderHas("eip0", "2001:db8:1::10") {
				t.Fatal("2001:db8:1::10 is still on eip0 after its only holder was deleted")
			}
		})
	}
}
