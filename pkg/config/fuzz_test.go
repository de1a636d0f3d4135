package config_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

// The seed corpus lives in testdata/fuzz/Fuzz*/: realistic conflist entries
// as containerd, Multus, cnitool and podman hand them over, and inputs the
// fuzzer once found. Plain `go test` replays them.

func FuzzLoad(f *testing.F) {
	f.Fuzz(func(t *testing.T, stdin []byte, cniArgs string) {
		c, err := config.Load(stdin)
		if err != nil {
			checkFuzzErr(t, "Load", err)
			return
		}
		checkLoaded(t, c)
		ips, err := c.Requests(cniArgs)
		if err != nil {
			checkFuzzErr(t, "Requests", err)
			return
		}
		checkRequested(t, c, ips)
	})
}

func FuzzRequests(f *testing.F) {
	f.Fuzz(func(t *testing.T, annotation, cniArgs string) {
		stdin, err := json.Marshal(map[string]any{
			"cniVersion":    "1.0.0",
			"name":          "ext",
			"type":          "external-ip",
			"externalIPs":   []string{"198.51.100.1"},
			"allowedRanges": []string{"192.0.2.0/24", "10.0.0.0/8", "2001:db8::/32"},
			"runtimeConfig": map[string]any{
				"io.kubernetes.cri.pod-annotations": map[string]string{config.DefaultPodAnnotation: annotation},
			},
		})
		if err != nil {
			t.Fatalf("building the config: %v", err)
		}
		c, err := config.Load(stdin)
		if err != nil {
			t.Fatalf("Load refused a config whose only fuzzed part is an annotation value: %v", err)
		}
		ips, err := c.Requests(cniArgs)
		if err != nil {
			checkFuzzErr(t, "Requests", err)
			return
		}
		checkRequested(t, c, ips)
		if len(ips) == 0 || ips[0].Source != "externalIPs[0]" || ips[0].Addr != netip.MustParseAddr("198.51.100.1") {
			t.Fatalf("the static IP is not first: %q", describe(ips))
		}
		annotated := listItems([]string{annotation})
		fromArgs := listItems(argsValues(cniArgs))
		for _, ip := range ips[1:] {
			switch name, i := splitSource(t, ip.Source); name {
			case "pod annotation " + config.DefaultPodAnnotation:
				checkNamedBy(t, ip, annotated, i)
			case "CNI_ARGS " + config.CNIArgsKey:
				checkNamedBy(t, ip, fromArgs, i)
			default:
				t.Fatalf("%s: source not fuzzed in this test", ip.Source)
			}
		}
	})
}

// checkFuzzErr holds every error to the README's rule for messages: one
// kind, one line.
func checkFuzzErr(t *testing.T, op string, err error) {
	t.Helper()
	kinds := 0
	for _, k := range []error{config.ErrDecode, config.ErrInvalid, config.ErrArgs} {
		if errors.Is(err, k) {
			kinds++
		}
	}
	if kinds != 1 {
		t.Fatalf("%s error %q wraps %d of ErrDecode/ErrInvalid/ErrArgs, want exactly 1", op, err, kinds)
	}
	if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\n\r") {
		t.Fatalf("%s error %q is not a one-line message", op, msg)
	}
}

// checkLoaded holds a loaded config to the bounds Load promises.
func checkLoaded(t *testing.T, c *config.Config) {
	t.Helper()
	if c.Name == "" || c.Device == "" || len(c.Device) > 15 || strings.ContainsAny(c.Device, "/: ") {
		t.Fatalf("Load accepted name %q, device %q", c.Name, c.Device)
	}
	if c.Uplink == c.Device {
		t.Fatalf("Load accepted uplink %q equal to the device", c.Uplink)
	}
	if !filepath.IsAbs(c.DataDir) || (c.LogFile != "" && !filepath.IsAbs(c.LogFile)) {
		t.Fatalf("Load accepted a relative path: dataDir %q, logFile %q", c.DataDir, c.LogFile)
	}
	if c.Announce.Count < 0 || c.Announce.Count > 20 || c.Announce.Interval <= 0 || c.LockTimeout <= 0 || c.Probe < 0 {
		t.Fatalf("Load accepted out-of-range timings: %+v, lock %v, probe %v", c.Announce, c.LockTimeout, c.Probe)
	}
	for i, p := range c.AllowedRanges {
		if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() {
			t.Fatalf("allowedRanges[%d] = %v is not a masked, valid prefix", i, p)
		}
	}
}

// checkRequested holds the IPs Requests returns to the refusal rules.
func checkRequested(t *testing.T, c *config.Config, ips []config.IP) {
	t.Helper()
	if len(ips) > config.MaxIPs {
		t.Fatalf("Requests returned %d IPs, more than MaxIPs", len(ips))
	}
	seen := map[netip.Addr]string{}
	for _, ip := range ips {
		a := ip.Addr
		if !a.IsValid() || a.Zone() != "" {
			t.Fatalf("%s: returned %v, not a valid zoneless address", ip.Source, a)
		}
		if a.Is4In6() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() ||
			a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || refusedClass(a) {
			t.Fatalf("%s: returned %v, of a class that must be refused", ip.Source, a)
		}
		if first, dup := seen[a]; dup {
			t.Fatalf("%v returned twice, from %s and %s", a, first, ip.Source)
		}
		seen[a] = ip.Source
		if !strings.HasPrefix(ip.Source, "externalIPs[") && !inRanges(a, c.AllowedRanges) {
			t.Fatalf("%s: returned %v outside allowedRanges %v", ip.Source, a, c.AllowedRanges)
		}
	}
}

// refusedClass says whether a lies in a class refused by its prefix:
// "this network", reserved, IPv4-compatible IPv6.
func refusedClass(a netip.Addr) bool {
	for _, p := range []string{"0.0.0.0/8", "240.0.0.0/4", "::/96"} {
		if netip.MustParsePrefix(p).Contains(a) {
			return true
		}
	}
	return false
}

func inRanges(a netip.Addr, ranges []netip.Prefix) bool {
	for _, p := range ranges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// splitSource splits "pod annotation x[3]" into its name and index.
func splitSource(t *testing.T, source string) (string, int) {
	t.Helper()
	open := strings.LastIndexByte(source, '[')
	if open < 0 || !strings.HasSuffix(source, "]") {
		t.Fatalf("source %q is not of the form name[index]", source)
	}
	i, err := strconv.Atoi(source[open+1 : len(source)-1])
	if err != nil {
		t.Fatalf("source %q has no numeric index: %v", source, err)
	}
	return source[:open], i
}

// argsValues returns the EXTERNAL_IPS values of a CNI_ARGS string, in order.
func argsValues(cniArgs string) []string {
	var out []string
	for _, pair := range strings.Split(cniArgs, ";") {
		if k, v, ok := strings.Cut(pair, "="); ok && k == config.CNIArgsKey {
			out = append(out, v)
		}
	}
	return out
}

// listItems is the documented reading of comma-separated values: items
// trimmed, empty items dropped.
func listItems(values []string) []string {
	var out []string
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

// checkNamedBy checks that the index in ip.Source points at the item that
// named ip.Addr.
func checkNamedBy(t *testing.T, ip config.IP, items []string, i int) {
	t.Helper()
	if i < 0 || i >= len(items) {
		t.Fatalf("%s: index outside the %d items %q", ip.Source, len(items), items)
	}
	if a, err := netip.ParseAddr(items[i]); err != nil || a != ip.Addr {
		t.Fatalf("%s = %v, but that item is %q", ip.Source, ip.Addr, items[i])
	}
}
