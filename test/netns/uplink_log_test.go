package netns

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestNamedUplinkThatCannotAnnounceIsRefusedNamingIt(t *testing.T) {
	cases := []struct {
		name   string
		uplink string
		setup  string // run in the node namespace first
		want   string
	}{
		{"missing", "nosuch0", "", "nosuch0"},
		{"down", "spare0", "ip link add spare0 type veth peer name spare1 && ip link set spare1 up", "is down"},
		{"no Ethernet address", "lo", "", "no Ethernet hardware address"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t)
			if c.setup != "" {
				h.inNode("sh -c '%s'", c.setup)
			}
			before := h.settledView()
			conf := h.netConf("1.0.0", map[string]any{"uplink": c.uplink, "runtimeConfig": runtimeIPs("192.0.2.70")})
			h.run(call{command: "ADD", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).
				mustFail(t, "ADD with uplink "+c.uplink, 7, c.uplink, c.want)
			h.mustBeUnchanged(t, "a refused ADD with uplink "+c.uplink, before)
		})
	}
}

// logLine is the part of a structured log line these tests read.
type logLine struct {
	Msg       string `json:"msg"`
	Level     string `json:"level"`
	Command   string `json:"command"`
	Container string `json:"container"`
	IP        string `json:"ip"`
	Round     int    `json:"round"`
	// Sockets and By: what linger kept past the exit, and how.
	Sockets string `json:"sockets"`
	By      string `json:"by"`
}

func TestEveryChangeOnTheHostIsOneJSONLogLine(t *testing.T) {
	h := newHost(t)
	logFile := filepath.Join(t.TempDir(), "external-ip.log")
	conf := h.netConf("1.0.0", map[string]any{"logFile": logFile, "runtimeConfig": runtimeIPs("192.0.2.71")})
	h.run(call{command: "ADD", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).mustOK(t, "ADD")
	h.run(call{command: "DEL", containerID: "c1", ifName: "eth0", conf: conf}).mustOK(t, "DEL")
	lines := readLog(t, logFile)
	for _, want := range []struct{ cmd, msg string }{
		{"ADD", "holder device ready"},
		{"ADD", "address added"},
		{"ADD", "announced"},
		{"DEL", "address removed"},
		{"DEL", "deleted"},
	} {
		if !hasLine(lines, want.cmd, want.msg) {
			t.Errorf("no %s log line %q for container c1 in %s: %+v", want.cmd, want.msg, logFile, lines)
		}
	}
}

func TestDetachedAnnouncerLogsEachLaterRound(t *testing.T) {
	const rounds = 3
	h := newHost(t)
	logFile := filepath.Join(t.TempDir(), "external-ip.log")
	conf := h.netConf("1.0.0", map[string]any{"logFile": logFile, "runtimeConfig": runtimeIPs("192.0.2.72"),
		"announce": map[string]any{"count": rounds, "interval": "100ms"}})
	h.run(call{command: "ADD", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}).mustOK(t, "ADD")
	waitNoAnnouncer(t, h, 5*time.Second)
	got := map[int]int{}
	for _, l := range readLog(t, logFile) {
		if l.Msg == "announced" && l.Command == "ADD" && l.Container == "c1" {
			got[l.Round]++
		}
	}
	for r := 1; r <= rounds; r++ {
		if got[r] != 1 {
			t.Errorf("round %d logged %d times, want once (rounds logged: %v)", r, got[r], got)
		}
	}
}

// waitNoAnnouncer waits until no detached announcer runs in h's namespace.
func waitNoAnnouncer(t *testing.T, h *host, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for len(pluginProcs(t, h.name)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("announcers still run %s after ADD: %v", limit, pluginProcs(t, h.name))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readLog(t *testing.T, path string) []logLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the log file was not written: %v", err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

func hasLine(lines []logLine, cmd, msg string) bool {
	for _, l := range lines {
		if l.Command == cmd && l.Msg == msg && l.Container == "c1" {
			return true
		}
	}
	return false
}
