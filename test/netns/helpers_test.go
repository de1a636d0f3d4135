package netns

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// checkVersions are the versions that have CHECK (it arrived in 0.4.0).
var checkVersions = []string{"0.4.0", "1.0.0", "1.1.0"}

// attach is one invocation for the attachment (containerID, eth0), with
// the netns path a runtime would give it.
func attach(command, containerID string, conf map[string]any) call {
	return call{command: command, containerID: containerID, ifName: "eth0", netns: "/var/run/netns/" + containerID, conf: conf}
}

// annotations is the pod-annotations capability as containerd fills it:
// every annotation of the pod, ours among them.
func annotations(key, value string) map[string]any {
	return map[string]any{"io.kubernetes.cri.pod-annotations": map[string]any{
		key:                               value,
		"kubernetes.io/config.source":     "api",
		"io.kubernetes.pod.terminationGP": "30",
	}}
}

// holderIPs lists the addresses on device in the node, as "ip/prefix",
// leaving out link-local ones. A missing device fails the test: it is not
// an empty holder. Where the device may be gone, use holderAddrs.
func (h *host) holderIPs(device string) []string {
	h.t.Helper()
	ips, ok := h.holderAddrs(device)
	if !ok {
		h.t.Fatalf("holder %s does not exist in %s, where the test expects it", device, h.name)
	}
	return ips
}

// holderAddrs is holderIPs for a device that may be missing: ok is false
// then. A failed ip command still fails the test.
func (h *host) holderAddrs(device string) (ips []string, ok bool) {
	h.t.Helper()
	out, ok := h.ipOnDevice("-o addr show dev %s", device)
	if !ok {
		return nil, false
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || strings.HasPrefix(f[3], "fe80:") {
			continue
		}
		ips = append(ips, f[3])
	}
	slices.Sort(ips)
	return ips, true
}

// holderHasIfThere is holderHas where a missing device is an expected
// outcome (a failed first ADD made none): a missing device holds nothing.
func (h *host) holderHasIfThere(device, ip string) bool {
	h.t.Helper()
	ips, _ := h.holderAddrs(device)
	return slices.ContainsFunc(ips, hasIP(ip))
}

// mustHold fails unless device holds exactly want (as "ip/prefix").
func (h *host) mustHold(t *testing.T, when, device string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := h.holderIPs(device); !slices.Equal(got, want) {
		t.Fatalf("%s: %s holds %q, want %q", when, device, got, want)
	}
}

// proxied reports whether the node has a proxy neighbour entry for ip on dev.
func (h *host) proxied(ip, dev string) bool {
	h.t.Helper()
	out := h.stdout("ip -n %s -6 neigh show proxy", h.name)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == ip && f[1] == "dev" && f[2] == dev {
			return true
		}
	}
	return false
}

// hostView is what a refused or repeated call must leave as it was: the
// node's addresses, links and proxy entries, and every file under dataDir
// with its mode and content.
type hostView struct {
	addrs, links, proxies string
	files                 []string
}

// settledView waits until the uplink has finished coming up (the kernel
// reports carrier and adds the link-local address asynchronously, up to a
// second later), then takes the view, so that a later comparison sees only
// what the plugin changed.
func (h *host) settledView() hostView {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		link, _ := h.try("ip -n %s -o link show dev uplink0", h.name)
		ll, _ := h.try("ip -n %s -6 -o addr show dev uplink0 scope link", h.name)
		if strings.Contains(link, "state UP") && strings.Contains(ll, "fe80:") {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("uplink0 did not come up within 5s: %s %s", link, ll)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return h.view()
}

func (h *host) view() hostView {
	h.t.Helper()
	return hostView{
		addrs:   h.stdout("ip -n %s -o addr", h.name),
		links:   linkNetns.ReplaceAllString(h.stdout("ip -n %s -o link", h.name), ""),
		proxies: h.stdout("ip -n %s -6 neigh show proxy", h.name),
		files:   h.dataFiles(),
	}
}

// linkNetns is how ip names the veth peer's namespace. It prints a name or
// a number depending on whether its walk of /var/run/netns (where other
// suites come and go) found it, so it is left out of the view.
var linkNetns = regexp.MustCompile(`link-netns(id)? \S+`)

// stdout runs a command and returns its standard output alone: ip warns on
// standard error about namespaces that other suites are deleting.
func (h *host) stdout(format string, args ...any) string {
	h.t.Helper()
	cmd := exec.Command("sh", "-c", fmt.Sprintf(format, args...))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		h.t.Fatalf("%s: %v\n%s", fmt.Sprintf(format, args...), err, stderr.String())
	}
	return string(out)
}

// dataFiles lists everything under dataDir as "path mode sha256-prefix".
func (h *host) dataFiles() []string {
	h.t.Helper()
	var out []string
	err := filepath.WalkDir(h.dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(h.dataDir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v", rel, info.Mode())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:8])
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		h.t.Fatalf("listing dataDir %s: %v", h.dataDir, err)
	}
	return out
}

// mustBeUnchanged fails, showing the difference, unless the host looks as
// it did in before.
func (h *host) mustBeUnchanged(t *testing.T, what string, before hostView) {
	t.Helper()
	after := h.view()
	parts := []struct {
		name     string
		was, now []string
	}{
		{"addresses (ip -o addr)", lines(before.addrs), lines(after.addrs)},
		{"links (ip -o link)", lines(before.links), lines(after.links)},
		{"proxy neighbours", lines(before.proxies), lines(after.proxies)},
		{"files under dataDir", before.files, after.files},
	}
	var diffs []string
	for _, p := range parts {
		if d := lineDiff(p.was, p.now); d != "" {
			diffs = append(diffs, p.name+" changed (-before +after):\n"+d)
		}
	}
	if len(diffs) > 0 {
		t.Fatalf("%s changed the host:\n%s", what, strings.Join(diffs, "\n"))
	}
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// lineDiff shows the lines only in was (-) and only in now (+).
func lineDiff(was, now []string) string {
	var b strings.Builder
	for _, l := range was {
		if !slices.Contains(now, l) {
			fmt.Fprintf(&b, "  - %s\n", l)
		}
	}
	for _, l := range now {
		if !slices.Contains(was, l) {
			fmt.Fprintf(&b, "  + %s\n", l)
		}
	}
	return b.String()
}
