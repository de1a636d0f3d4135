package netns

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/mdlayher/arp"
)

// mustBeOneJSONDocument fails unless stdout is exactly one JSON value: a
// runtime parses it as the result or the error, never two.
func mustBeOneJSONDocument(t *testing.T, what string, stdout []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(stdout))
	var first, second json.RawMessage
	if err := dec.Decode(&first); err != nil {
		t.Fatalf("%s printed no JSON: %v: %s", what, err, stdout)
	}
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		t.Fatalf("%s printed more than one JSON document on stdout: %s", what, stdout)
	}
}

func TestAddAndDelWithThePluginsOwnNetnsAreRefusedBeforeAnythingChanges(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")})
	own := "/var/run/netns/" + h.name // the namespace the plugin runs in
	before := h.settledView()
	add := call{command: "ADD", containerID: "c1", ifName: "eth0", netns: own, conf: conf}
	r := h.run(add)
	r.mustFail(t, "ADD with CNI_NETNS the plugin's own", 8, "CNI_NETNS", own)
	mustBeOneJSONDocument(t, "the refused ADD", r.stdout)
	h.mustBeUnchanged(t, "the refused ADD", before)

	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD with a container's netns")
	before = h.view()
	del := call{command: "DEL", containerID: "c1", ifName: "eth0", netns: own, conf: conf}
	r = h.run(del)
	r.mustFail(t, "DEL with CNI_NETNS the plugin's own", 8, "CNI_NETNS")
	mustBeOneJSONDocument(t, "the refused DEL", r.stdout)
	h.mustBeUnchanged(t, "the refused DEL", before)
}

// An ADD that asks for no IP says the attachment holds none now: what an
// earlier ADD of the same attachment held is released.
func TestAddWithNoIPsReleasesWhatTheAttachmentHeldBefore(t *testing.T) {
	h := newHost(t)
	h.run(attach("ADD", "c1", h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")}))).mustOK(t, "first ADD")
	h.run(attach("ADD", "c2", h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.11")}))).mustOK(t, "ADD of another attachment")
	bare := h.netConf("1.0.0", nil)
	r := h.run(attach("ADD", "c1", bare)).mustOK(t, "re-ADD asking for no IP")
	mustBeOneJSONDocument(t, "the re-ADD", r.stdout)
	h.mustHold(t, "after the re-ADD with no IP", "eip0", "192.0.2.11/32")
	h.run(attach("CHECK", "c1", bare)).mustOK(t, "CHECK of the attachment holding none")
	h.run(attach("DEL", "c1", bare)).mustOK(t, "DEL after it")
	h.mustHold(t, "after the DEL", "eip0", "192.0.2.11/32")
}

// A refused re-ADD changes nothing: the attachment keeps its earlier record
// and its IPs until the DEL the runtime sends after a failed ADD.
func TestRefusedReAddKeepsWhatTheAttachmentHeldUntilDel(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "first ADD")
	before := h.view()
	// 192.0.2.1 is the node's own address on uplink0.
	refused := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10", "192.0.2.20", nodeV4)})
	h.run(attach("ADD", "c1", refused)).mustFail(t, "re-ADD asking for the node's address", 7, nodeV4)
	h.mustBeUnchanged(t, "the refused re-ADD", before)
	h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK against the earlier request")
	h.run(attach("DEL", "c1", conf)).mustOK(t, "the runtime's DEL")
	h.mustHold(t, "after the DEL", "eip0")
}

// A release (DEL, or GC of an attachment no longer valid) stops the detached
// announcer's later rounds before it returns: the LAN hears the ADD's first
// round and nothing after, for longer than all the rounds would have taken,
// and the announcer exits at its next round.
func TestReleaseStopsTheLaterRoundsOfTheIPsItReleases(t *testing.T) {
	const rounds, interval = 4, 400 * time.Millisecond
	ip4, ip6 := netip.MustParseAddr("192.0.2.65"), netip.MustParseAddr("2001:db8:1::65")
	for _, release := range []string{"DEL", "GC"} {
		t.Run(release, func(t *testing.T) {
			h := newHost(t)
			frames := captureOn(t, h.lan, "lan0")
			conf := h.netConf("1.1.0", map[string]any{
				"runtimeConfig": runtimeIPs(ip4.String(), ip6.String()),
				"announce":      map[string]any{"count": rounds, "interval": interval.String()},
			})
			h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD")
			if release == "DEL" {
				h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL")
			} else {
				h.run(call{command: "GC", conf: h.gcConf("testnet", []string{}, nil)}).mustOK(t, "GC keeping nothing")
			}
			released := time.Now()
			// Long enough for every later round, plus a slow child's start.
			got := collectWire(frames, rounds*interval+2*time.Second,
				wireWant{arpAbout(ip4, arp.OperationRequest), rounds},
				wireWant{naFor(ip6), rounds})
			for i, what := range []string{"gratuitous ARP requests for " + ip4.String(), "NAs for " + ip6.String()} {
				if len(got[i]) != 1 {
					t.Errorf("the LAN received %d %s, want 1: the ADD's first round and none after the %s", len(got[i]), what, release)
				}
			}
			deadline := released.Add(interval + 5*time.Second)
			for procs := pluginProcs(t, h.name); len(procs) > 0; procs = pluginProcs(t, h.name) {
				if time.Now().After(deadline) {
					t.Fatalf("announcers %v still run %s after the %s", procs, time.Since(released), release)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
