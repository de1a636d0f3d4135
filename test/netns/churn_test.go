package netns

import (
	"path/filepath"
	"strings"
	"testing"
)

// A pod that replaces another must not pay for its predecessor's DEL: the
// kernel's release of any netfilter socket waits for the destroy work that
// a DEL's commit left (nft_rcv_nl_event), so a steered ADD right after a
// steered DEL keeps its nf_tables socket past its exit, as the DEL does,
// instead of closing it itself.
func TestASteeredAddRightAfterADelKeepsItsNetfilterSocketPastTheExit(t *testing.T) {
	h := newHost(t)
	h.forwardIPv4()
	logFile := filepath.Join(t.TempDir(), "external-ip.log")
	for i, ip := range []string{"192.0.2.81", "192.0.2.82"} {
		conf := h.netConf("1.0.0", map[string]any{"logFile": logFile, "logLevel": "debug", "traffic": "both",
			"announce": map[string]any{"count": 1}, "runtimeConfig": runtimeIPs(ip)})
		for _, cmd := range []string{"ADD", "DEL"} {
			if i == 1 && cmd == "DEL" {
				break
			}
			h.run(call{command: cmd, containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).mustOK(t, cmd+" of "+ip)
		}
	}
	var kept []logLine
	for _, l := range readLog(t, logFile) {
		if l.Msg == "sockets kept past the exit" {
			kept = append(kept, l)
		}
	}
	if len(kept) != 3 {
		t.Fatalf("%d invocations said what they kept past the exit, want 3 (ADD, DEL, ADD): %+v", len(kept), kept)
	}
	for i, l := range kept {
		if !strings.Contains(l.Sockets, "netfilter socket") {
			t.Errorf("invocation %d (%s) kept %q by %q: its netfilter socket was closed in the plugin", i, l.Command, l.Sockets, l.By)
		}
	}
	if kept[2].Command != "ADD" {
		t.Errorf("the last line is %s's, want the second ADD's", kept[2].Command)
	}
}
