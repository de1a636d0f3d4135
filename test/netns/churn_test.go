package netns

import (
	"path/filepath"
	"strings"
	"testing"
)

// A pod that replaces another must not pay for its predecessor's DEL: the
// kernel's release of any netfilter socket waits for the destroy work that
// a DEL's commit left (nft_rcv_nl_event), holding the commit lock that the
// next ADD's commit needs. So every invocation keeps its nf_tables socket
// past its exit: the first parks it; the second, which finds no sink but
// comes within sink.DefaultIdle of the first, parks it and starts the
// dataDir's sink; the third gives it to that sink, which holds it while
// calls keep coming.
func TestASteeredAddRightAfterADelGivesItsNetfilterSocketToTheSink(t *testing.T) {
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
		if l.Msg == "sockets kept past the exit" && strings.Contains(l.Sockets, "netfilter socket") {
			kept = append(kept, l)
		}
	}
	parked := "a parked ring"
	if !parkingWorks(t) {
		parked = "a holding child"
	}
	want := []string{"ADD " + parked, "DEL " + parked, "ADD the sink"}
	var got []string
	for _, l := range kept {
		got = append(got, l.Command+" "+l.By)
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("who kept each invocation's netfilter socket past its exit: %q, want %q", got, want)
	}
}
