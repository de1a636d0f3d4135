package config_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/external-ip/external-ip/pkg/config"
)

// omit removes a key from the base config in netConf.
type omit struct{}

// netConf is a minimal valid plugin entry with keys added, replaced or, for
// omit{}, removed.
func netConf(t *testing.T, keys map[string]any) []byte {
	t.Helper()
	conf := map[string]any{"cniVersion": "1.0.0", "name": "ext", "type": "external-ip"}
	for k, v := range keys {
		if _, ok := v.(omit); ok {
			delete(conf, k)
			continue
		}
		conf[k] = v
	}
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatalf("building the test config: %v", err)
	}
	return b
}

func mustLoad(t *testing.T, stdin []byte) *config.Config {
	t.Helper()
	c, err := config.Load(stdin)
	if err != nil {
		t.Fatalf("Load refused a valid config: %v\nconfig: %s", err, stdin)
	}
	return c
}

// checkErr fails unless err wraps kind and its message names every fragment.
func checkErr(t *testing.T, err, kind error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one wrapping %q that mentions %q", kind, fragments)
	}
	if !errors.Is(err, kind) {
		t.Errorf("error %q does not wrap %q, so the caller would map it to the wrong CNI code", err, kind)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not mention %q", err, f)
		}
	}
}

func TestLoadFillsTheDocumentedDefaults(t *testing.T) {
	c := mustLoad(t, netConf(t, nil))
	checks := []struct {
		field     string
		got, want any
	}{
		{"CNIVersion", c.CNIVersion, "1.0.0"},
		{"Name", c.Name, "ext"},
		{"Device", c.Device, "eip0"},
		{"Uplink", c.Uplink, ""},
		{"DataDir", c.DataDir, "/run/cni/external-ip"},
		{"PodAnnotation", c.PodAnnotation, "external-ip/addresses"},
		{"Announce", c.Announce, config.Announce{Count: 3, Interval: 1100 * time.Millisecond}},
		{"LogFile", c.LogFile, ""},
		{"LogLevel", c.LogLevel, "info"},
		{"Probe", c.Probe, 150 * time.Millisecond},
		{"LockTimeout", c.LockTimeout, 10 * time.Second},
		{"len(AllowedRanges)", len(c.AllowedRanges), 0},
		{"PrevResult == nil", c.PrevResult == nil, true},
		{"len(ValidAttachments)", len(c.ValidAttachments), 0},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v with the key omitted, want the default %v", ch.field, ch.got, ch.want)
		}
	}
}

func TestLoadTreatsNullAndEmptyValuesAsOmitted(t *testing.T) {
	c := mustLoad(t, netConf(t, map[string]any{
		"device": "", "dataDir": "", "logLevel": "", "podAnnotation": nil,
		"announce":    map[string]any{"count": nil, "interval": nil},
		"lockTimeout": nil, "conflictProbe": nil, "prevResult": nil,
	}))
	if c.Device != "eip0" || c.DataDir != "/run/cni/external-ip" || c.LogLevel != "info" ||
		c.PodAnnotation != "external-ip/addresses" || c.LockTimeout != 10*time.Second ||
		c.Probe != 150*time.Millisecond || c.Announce != (config.Announce{Count: 3, Interval: 1100 * time.Millisecond}) {
		t.Errorf("empty or null values did not fall back to the defaults: %+v", c)
	}
	if c.PrevResult != nil {
		t.Errorf("\"prevResult\": null gave PrevResult %v, want nil", c.PrevResult)
	}
}

func TestLoadHonoursEveryKey(t *testing.T) {
	tests := []struct {
		name string
		keys map[string]any
		got  func(*config.Config) any
		want any
	}{
		{"device", map[string]any{"device": "ext7"},
			func(c *config.Config) any { return c.Device }, "ext7"},
		{"device of exactly 15 bytes", map[string]any{"device": "abcdefghijklmno"},
			func(c *config.Config) any { return c.Device }, "abcdefghijklmno"},
		{"uplink", map[string]any{"uplink": "eth0"},
			func(c *config.Config) any { return c.Uplink }, "eth0"},
		{"allowedRanges of both families", map[string]any{"allowedRanges": []string{"192.0.2.0/24", "2001:db8::/64"}},
			func(c *config.Config) any { return c.AllowedRanges },
			[]netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/64")}},
		{"allowedRanges masked and trimmed", map[string]any{"allowedRanges": []string{" 192.0.2.77/24 ", "2001:db8::1/128"}},
			func(c *config.Config) any { return c.AllowedRanges },
			[]netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::1/128")}},
		{"podAnnotation", map[string]any{"podAnnotation": "example.com/eips"},
			func(c *config.Config) any { return c.PodAnnotation }, "example.com/eips"},
		{"announce count and interval", map[string]any{"announce": map[string]any{"count": 5, "interval": "250ms"}},
			func(c *config.Config) any { return c.Announce }, config.Announce{Count: 5, Interval: 250 * time.Millisecond}},
		{"announce count alone keeps the default interval", map[string]any{"announce": map[string]any{"count": 1}},
			func(c *config.Config) any { return c.Announce }, config.Announce{Count: 1, Interval: 1100 * time.Millisecond}},
		{"announce interval alone keeps the default count", map[string]any{"announce": map[string]any{"interval": "1m"}},
			func(c *config.Config) any { return c.Announce }, config.Announce{Count: 3, Interval: time.Minute}},
		{"announce.count 0 turns announcements off", map[string]any{"announce": map[string]any{"count": 0}},
			func(c *config.Config) any { return c.Announce }, config.Announce{Count: 0, Interval: 1100 * time.Millisecond}},
		{"announce at its upper count", map[string]any{"announce": map[string]any{"count": 20, "interval": "10ms"}},
			func(c *config.Config) any { return c.Announce }, config.Announce{Count: 20, Interval: 10 * time.Millisecond}},
		{"dataDir cleaned", map[string]any{"dataDir": "/var/lib/eip/./state/"},
			func(c *config.Config) any { return c.DataDir }, "/var/lib/eip/state"},
		{"logFile", map[string]any{"logFile": "/var/log/external-ip.log"},
			func(c *config.Config) any { return c.LogFile }, "/var/log/external-ip.log"},
		{"logLevel debug", map[string]any{"logLevel": "debug"},
			func(c *config.Config) any { return c.LogLevel }, "debug"},
		{"logLevel warn", map[string]any{"logLevel": "warn"},
			func(c *config.Config) any { return c.LogLevel }, "warn"},
		{"logLevel error", map[string]any{"logLevel": "error"},
			func(c *config.Config) any { return c.LogLevel }, "error"},
		{"conflictProbe", map[string]any{"conflictProbe": "500ms"},
			func(c *config.Config) any { return c.Probe }, 500 * time.Millisecond},
		{"conflictProbe 0s turns probing off", map[string]any{"conflictProbe": "0s"},
			func(c *config.Config) any { return c.Probe }, time.Duration(0)},
		{"lockTimeout", map[string]any{"lockTimeout": "30s"},
			func(c *config.Config) any { return c.LockTimeout }, 30 * time.Second},
		{"cniVersion", map[string]any{"cniVersion": "1.1.0"},
			func(c *config.Config) any { return c.CNIVersion }, "1.1.0"},
		{"name", map[string]any{"name": "lan"},
			func(c *config.Config) any { return c.Name }, "lan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, netConf(t, tt.keys))
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("config %v gave %v, want %v", tt.keys, got, tt.want)
			}
		})
	}
}

func TestLoadRefusesInvalidKeysNamingFieldAndValue(t *testing.T) {
	tests := []struct {
		name      string
		keys      map[string]any
		kind      error
		fragments []string
	}{
		{"missing name", map[string]any{"name": omit{}}, config.ErrInvalid, []string{"name:", "missing"}},
		{"device too long", map[string]any{"device": "this-name-is-way-too-long"},
			config.ErrInvalid, []string{`device: "this-name-is-way-too-long"`, "15 bytes"}},
		{"device with a slash", map[string]any{"device": "eip/0"}, config.ErrInvalid, []string{`device: "eip/0"`}},
		{"device with a colon", map[string]any{"device": "eip0:1"}, config.ErrInvalid, []string{`device: "eip0:1"`}},
		{"device with a space", map[string]any{"device": "eip 0"}, config.ErrInvalid, []string{`device: "eip 0"`}},
		{"device dot-dot", map[string]any{"device": ".."}, config.ErrInvalid, []string{`device: ".."`}},
		{"device with a format verb", map[string]any{"device": "eip%d"}, config.ErrInvalid, []string{`device: "eip%d"`}},
		{"uplink with a format verb", map[string]any{"uplink": "eth%d"}, config.ErrInvalid, []string{`uplink: "eth%d"`}},
		{"device not a string", map[string]any{"device": 0}, config.ErrDecode, []string{"device"}},
		{"uplink too long", map[string]any{"uplink": "enp0s31f6-backup"}, config.ErrInvalid, []string{`uplink: "enp0s31f6-backup"`}},
		{"uplink is the default device", map[string]any{"uplink": "eip0"}, config.ErrInvalid, []string{`uplink: "eip0"`, "holder device"}},
		{"uplink is the configured device", map[string]any{"device": "ext1", "uplink": "ext1"},
			config.ErrInvalid, []string{`uplink: "ext1"`, "holder device"}},
		{"allowedRanges prefix too long", map[string]any{"allowedRanges": []string{"10.0.0.0/33"}},
			config.ErrInvalid, []string{`allowedRanges[0]: "10.0.0.0/33" is not a CIDR`}},
		{"allowedRanges entry without a length", map[string]any{"allowedRanges": []string{"192.0.2.0/24", "192.0.2.1"}},
			config.ErrInvalid, []string{`allowedRanges[1]: "192.0.2.1" is not a CIDR`}},
		{"allowedRanges with a zone", map[string]any{"allowedRanges": []string{"fe80::%eth0/64"}},
			config.ErrInvalid, []string{`allowedRanges[0]: "fe80::%eth0/64"`}},
		{"allowedRanges IPv4-mapped", map[string]any{"allowedRanges": []string{"::ffff:192.0.2.0/120"}},
			config.ErrInvalid, []string{`allowedRanges[0]: "::ffff:192.0.2.0/120"`, "IPv4-mapped"}},
		{"allowedRanges not a list", map[string]any{"allowedRanges": "10.0.0.0/8"}, config.ErrDecode, []string{"allowedRanges"}},
		{"podAnnotation empty", map[string]any{"podAnnotation": ""}, config.ErrInvalid, []string{"podAnnotation:", "empty"}},
		{"announce.count negative", map[string]any{"announce": map[string]any{"count": -1}},
			config.ErrInvalid, []string{"announce.count: -1 ", "0..20"}},
		{"announce.count too many", map[string]any{"announce": map[string]any{"count": 21}},
			config.ErrInvalid, []string{"announce.count: 21 "}},
		{"announce.count a string", map[string]any{"announce": map[string]any{"count": "3"}},
			config.ErrDecode, []string{"count"}},
		{"announce not an object", map[string]any{"announce": 3}, config.ErrDecode, []string{"announce"}},
		{"announce.interval not a string", map[string]any{"announce": map[string]any{"interval": 1.1}},
			config.ErrDecode, []string{"announce.interval:", "1.1"}},
		{"announce.interval not a duration", map[string]any{"announce": map[string]any{"interval": "soon"}},
			config.ErrInvalid, []string{`announce.interval: "soon"`, "not a duration"}},
		{"announce.interval a bare number", map[string]any{"announce": map[string]any{"interval": "1.1"}},
			config.ErrInvalid, []string{`announce.interval: "1.1"`}},
		{"announce.interval too short", map[string]any{"announce": map[string]any{"interval": "5ms"}},
			config.ErrInvalid, []string{`announce.interval: "5ms"`, "outside"}},
		{"announce.interval too long", map[string]any{"announce": map[string]any{"interval": "1m1s"}},
			config.ErrInvalid, []string{`announce.interval: "1m1s"`, "outside"}},
		{"dataDir relative", map[string]any{"dataDir": "run/external-ip"},
			config.ErrInvalid, []string{`dataDir: "run/external-ip"`, "absolute"}},
		{"logFile relative", map[string]any{"logFile": "external-ip.log"},
			config.ErrInvalid, []string{`logFile: "external-ip.log"`, "absolute"}},
		{"logLevel unknown", map[string]any{"logLevel": "trace"},
			config.ErrInvalid, []string{`logLevel: "trace"`}},
		{"lockTimeout zero", map[string]any{"lockTimeout": "0s"}, config.ErrInvalid, []string{`lockTimeout: "0s"`}},
		{"lockTimeout too long", map[string]any{"lockTimeout": "6m0s"}, config.ErrInvalid, []string{`lockTimeout: "6m0s"`}},
		{"lockTimeout not a duration", map[string]any{"lockTimeout": "forever"}, config.ErrInvalid, []string{`lockTimeout: "forever"`}},
		{"lockTimeout not a string", map[string]any{"lockTimeout": 10}, config.ErrDecode, []string{"lockTimeout:", "10"}},
		{"conflictProbe negative", map[string]any{"conflictProbe": "-1ms"}, config.ErrInvalid, []string{`conflictProbe: "-1ms"`}},
		{"conflictProbe too long", map[string]any{"conflictProbe": "11s"}, config.ErrInvalid, []string{`conflictProbe: "11s"`}},
		{"conflictProbe not a string", map[string]any{"conflictProbe": true}, config.ErrDecode, []string{"conflictProbe:", "true"}},
		{"prevResult malformed", map[string]any{"prevResult": map[string]any{"ips": "10.0.0.5/24"}},
			config.ErrDecode, []string{"prevResult:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load(netConf(t, tt.keys))
			checkErr(t, err, tt.kind, tt.fragments...)
			if c != nil {
				t.Errorf("Load returned a config alongside its error: %+v", c)
			}
		})
	}
}

func TestLoadRefusesStdinThatIsNotAJSONObject(t *testing.T) {
	for _, stdin := range []string{"", "{", `{"name":`, "[]", `"ext"`, "\x00\xff"} {
		_, err := config.Load([]byte(stdin))
		checkErr(t, err, config.ErrDecode, "decoding network config")
	}
}

const prevResult100 = `{
	"cniVersion": "1.0.0",
	"interfaces": [{"name": "eth0", "mac": "0a:58:0a:f4:00:05", "sandbox": "/var/run/netns/cni-5f1c"}],
	"ips": [{"address": "10.244.0.5/24", "gateway": "10.244.0.1", "interface": 0}]
}`

func TestLoadParsesPrevResultWhenPresent(t *testing.T) {
	var prev map[string]any
	if err := json.Unmarshal([]byte(prevResult100), &prev); err != nil {
		t.Fatalf("test prevResult is not JSON: %v", err)
	}
	c := mustLoad(t, netConf(t, map[string]any{"prevResult": prev}))
	if c.PrevResult == nil {
		t.Fatal("PrevResult is nil although the config carries one")
	}
	res, err := current.NewResultFromResult(c.PrevResult)
	if err != nil {
		t.Fatalf("PrevResult does not convert to a 1.0.0 result: %v", err)
	}
	if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || res.Interfaces[0].Sandbox != "/var/run/netns/cni-5f1c" {
		t.Errorf("PrevResult interfaces = %+v, want eth0 in /var/run/netns/cni-5f1c", res.Interfaces)
	}
	if len(res.IPs) != 1 || res.IPs[0].Address.String() != "10.244.0.5/24" ||
		res.IPs[0].Interface == nil || *res.IPs[0].Interface != 0 {
		t.Errorf("PrevResult ips = %+v, want 10.244.0.5/24 on interface 0", res.IPs)
	}
}

func TestLoadParsesPrevResultOfOlderVersions(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0"} {
		t.Run(v, func(t *testing.T) {
			c := mustLoad(t, netConf(t, map[string]any{
				"cniVersion": v,
				"prevResult": map[string]any{
					"cniVersion": v,
					"ips":        []any{map[string]any{"version": "4", "address": "10.88.0.7/16"}},
				},
			}))
			if c.PrevResult == nil || c.PrevResult.Version() != v {
				t.Fatalf("PrevResult = %v, want a %s result", c.PrevResult, v)
			}
			res, err := current.NewResultFromResult(c.PrevResult)
			if err != nil || len(res.IPs) != 1 || res.IPs[0].Address.String() != "10.88.0.7/16" {
				t.Errorf("PrevResult of %s lost its IP: %+v, %v", v, res, err)
			}
		})
	}
}

func TestLoadLeavesPrevResultNilWhenAbsent(t *testing.T) {
	c := mustLoad(t, netConf(t, nil))
	if c.PrevResult != nil {
		t.Errorf("PrevResult = %v for a config without one, want nil", c.PrevResult)
	}
}

func TestLoadDecodesValidAttachmentsForGC(t *testing.T) {
	tests := []struct {
		name  string
		value any
		want  []types.GCAttachment
	}{
		{"two attachments", []map[string]string{
			{"containerID": "0123abcd", "ifname": "eth0"},
			{"containerID": "4567ef01", "ifname": "net1"},
		}, []types.GCAttachment{{ContainerID: "0123abcd", IfName: "eth0"}, {ContainerID: "4567ef01", IfName: "net1"}}},
		{"empty list", []string{}, nil},
		{"null", nil, nil},
		{"absent", omit{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, netConf(t, map[string]any{"cniVersion": "1.1.0", "cni.dev/valid-attachments": tt.value}))
			if len(c.ValidAttachments) != len(tt.want) || (len(tt.want) > 0 && !reflect.DeepEqual(c.ValidAttachments, tt.want)) {
				t.Errorf("ValidAttachments = %+v, want %+v", c.ValidAttachments, tt.want)
			}
		})
	}
}

// A DEL steers by its record, never by prevResult: LoadForDel does not
// read it, so a result of any shape is neither parsed nor reported, as the
// key was absent.
func TestLoadForDelDoesNotReadPrevResult(t *testing.T) {
	for name, prev := range map[string]any{
		"a result":             json.RawMessage(`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5/24"}]}`),
		"not an object":        "garbage",
		"an unknown version":   json.RawMessage(`{"cniVersion":"9.9.9"}`),
		"a bad address inside": json.RawMessage(`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5"}]}`),
	} {
		c, ignored, err := config.LoadForDel(netConf(t, map[string]any{"prevResult": prev}))
		if err != nil || len(ignored) > 0 {
			t.Errorf("%s: LoadForDel: %v, passed over %v; want neither", name, err, ignored)
			continue
		}
		if c.PrevResult != nil || c.PrevResultJSON != nil || c.ContainerAddrs() != nil {
			t.Errorf("%s: LoadForDel parsed prevResult: %#v", name, c.PrevResult)
		}
	}
}

// A DEL releases what its record says: a key it does not use that is
// wrong is passed over (and reported) with its default, never a failure;
// the keys it needs are checked as ever.
func TestLoadForDelPassesOverTheKeysADelDoesNotUse(t *testing.T) {
	for name, keys := range map[string]map[string]any{
		"traffic":           {"traffic": "Both"},
		"announce.count":    {"announce": map[string]any{"count": 50}},
		"a count's type":    {"announce": map[string]any{"count": "three"}},
		"logFile":           {"logFile": "relative.log"},
		"uplink":            {"uplink": "eth%d"},
		"allowedRanges":     {"allowedRanges": []string{"192.0.2.0/24", "nonsense"}},
		"standby":           {"standby": true, "conflictProbe": "0s"},
		"pools":             {"pools": map[string]any{"web": []string{"not a range"}}},
		"lockTimeout":       {"lockTimeout": "forever"},
		"several at a time": {"traffic": 7, "hold": "sideways", "announce": map[string]any{"interval": "1ms"}},
	} {
		c, ignored, err := config.LoadForDel(netConf(t, keys))
		if err != nil {
			t.Errorf("%s: LoadForDel failed: %v", name, err)
			continue
		}
		if len(ignored) == 0 {
			t.Errorf("%s: LoadForDel reported nothing passed over", name)
		}
		if c.Device != config.DefaultDevice || c.Uplink != "" || c.Standby || c.LogFile != "" || len(c.AllowedRanges) > 1 || len(c.Pools) > 0 {
			t.Errorf("%s: a key passed over did not keep its default: %+v", name, c)
		}
		if _, err := config.Load(netConf(t, keys)); err == nil {
			t.Errorf("%s: Load took what only a DEL passes over", name)
		}
	}
	for name, keys := range map[string]map[string]any{
		"device":        {"device": "eip%d", "traffic": "Both"},
		"device's type": {"announce": map[string]any{"count": "three"}, "device": 0},
		"dataDir":       {"dataDir": "run/x"},
		"name":          {"name": omit{}},
		"not JSON":      nil,
	} {
		stdin := []byte("{not json")
		if keys != nil {
			stdin = netConf(t, keys)
		}
		if _, _, err := config.LoadForDel(stdin); err == nil {
			t.Errorf("%s: LoadForDel took a key a DEL needs", name)
		}
	}
}
