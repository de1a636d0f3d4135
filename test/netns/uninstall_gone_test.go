package netns

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// podIn is an ADD or DEL of containerID whose network namespace is a
// real one the test made, so that its record names it.
func podIn(t *testing.T, h *host, command, containerID, ip string) call {
	t.Helper()
	c := attach(command, containerID, h.netConf("1.0.0", map[string]any{"hold": "address", "runtimeConfig": runtimeIPs(ip)}))
	c.netns = "/var/run/netns/" + containerID
	return c
}

// newPodNetns makes a pod's network namespace, deleted at the end if the
// test has not.
func newPodNetns(t *testing.T, h *host) string {
	t.Helper()
	name := "eipp-" + randomID(6)
	h.sh("ip netns add %s", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name
}

// A pod gone without its DEL (its network namespace deleted, as when a
// runtime crash lost it) holds uninstall up no more: its IPs are released
// as GC releases a stale record, and said so; a live pod's still refuse.
func TestUninstallReleasesThePodsGoneWithoutTheirDELAndStillRefusesForTheLiveOnes(t *testing.T) {
	h := newHost(t)
	gone, live := newPodNetns(t, h), newPodNetns(t, h)
	h.run(podIn(t, h, "ADD", gone, "192.0.2.10")).mustOK(t, "ADD of the pod that goes")
	h.run(podIn(t, h, "ADD", live, "192.0.2.11")).mustOK(t, "ADD of the pod that stays")
	h.sh("ip netns del %s", gone)

	code, out := h.uninstallIn(t)
	if code != 1 || !strings.Contains(out, "released the IPs of a pod whose network namespace is gone without its DEL") ||
		!strings.Contains(out, "testnet/"+gone+"/eth0") || !strings.Contains(out, "pods still hold external IPs: holder eip0: 1 attachments hold 1 external IPs") {
		t.Fatalf("uninstall with one pod gone and one live: exit %d, output %q; want the gone pod's IPs released and named, then 1 for the live one", code, out)
	}
	if h.holderHas("eip0", "192.0.2.10") || !h.holderHas("eip0", "192.0.2.11") {
		t.Errorf("after the refused uninstall the holder carries %v; want the gone pod's IP released and the live pod's kept", h.holderIPs("eip0"))
	}

	h.sh("ip netns del %s", live)
	if code, out := h.uninstallIn(t); code != 0 || !strings.Contains(out, "testnet/"+live+"/eth0") {
		t.Fatalf("uninstall once both pods are gone without their DELs: exit %d, output %q; want 0 and the release named", code, out)
	}
	if h.deviceExists("eip0") {
		t.Errorf("the holder is still there once every pod's IPs were released: %v", h.holderIPs("eip0"))
	}
}

// uninstall --force goes on while a live pod holds an IP, exits 0, and
// says for each IP it leaves held how to release it: the DEL by hand it
// prints releases it.
func TestUninstallForceLeavesTheLivePodsIPsHeldAndSaysHowToReleaseThem(t *testing.T) {
	h := newHost(t)
	live := newPodNetns(t, h)
	h.run(podIn(t, h, "ADD", live, "192.0.2.10")).mustOK(t, "ADD")

	code, out := h.uninstallIn(t, "--force")
	if code != 0 {
		t.Fatalf("uninstall --force while a pod holds an IP: exit %d: %s", code, out)
	}
	t.Logf("uninstall --force said:\n%s", out)
	var left map[string]any
	for line := range strings.Lines(out) {
		if strings.Contains(line, "left held") {
			if err := json.Unmarshal([]byte(line), &left); err != nil {
				t.Fatalf("the left-held line %q: %v", line, err)
			}
		}
	}
	release, _ := left["release"].(string)
	_, del, ok := strings.Cut(release, "or now: ")
	if left == nil || left["ips"] != "[192.0.2.10]" || left["attachment"] != "testnet/"+live+"/eth0" || !ok {
		t.Fatalf("uninstall --force said %q; want a left-held line naming the attachment, its IP and a DEL by hand", out)
	}
	if !h.holderHas("eip0", "192.0.2.10") {
		t.Fatal("uninstall --force released the live pod's IP: its pod still has it")
	}
	if got := h.inNode("sh -c %q", del); strings.TrimSpace(got) != "" {
		t.Logf("the DEL by hand printed %q", got)
	}
	if h.holderHas("eip0", "192.0.2.10") {
		t.Errorf("the DEL by hand that uninstall --force printed (%s) left 192.0.2.10 held", del)
	}
}
