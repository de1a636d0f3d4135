package netns

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// keptLine is the keeper's debug line of one invocation.
type keptLine struct {
	Msg     string `json:"msg"`
	Command string `json:"command"`
	Sockets string `json:"sockets"`
	By      string `json:"by"`
}

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
	kept := keptLines(t, logFile)
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

// keptLines are the keeper's lines of a log file, in order.
func keptLines(t *testing.T, path string) []keptLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the log file was not written: %v", err)
	}
	defer f.Close()
	var out []keptLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l keptLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if l.Msg == "sockets kept past the exit" {
			out = append(out, l)
		}
	}
	return out
}
