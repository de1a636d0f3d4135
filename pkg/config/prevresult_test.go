package config_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/external-ip/external-ip/pkg/config"
)

// Load decodes prevResult from its bytes instead of through
// version.ParsePrevResult's map; both must give the same result, error or
// not, for every shape a runtime or a careless user may pass.
func TestLoadDecodesPrevResultAsTheLibraryDoes(t *testing.T) {
	for _, tt := range []struct{ name, confVersion, prev string }{
		{"1.0.0", "1.0.0", prevResult100},
		{"no version of its own", "1.0.0", `{"ips":[{"address":"10.0.0.5/24","interface":0}],"interfaces":[{"name":"eth0"}]}`},
		{"no version, 0.4.0 config", "0.4.0", `{"ips":[{"version":"4","address":"10.0.0.5/24"}]}`},
		{"older than the config", "1.0.0", `{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.5/24"}]}`},
		{"empty object", "1.0.0", `{}`},
		{"ips not a list", "1.0.0", `{"cniVersion":"1.0.0","ips":"10.0.0.5/24"}`},
		{"bad address", "1.0.0", `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5"}]}`},
		{"unknown version", "1.0.0", `{"cniVersion":"9.9.9"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := libraryPrevResult(t, tt.confVersion, tt.prev)
			c, err := config.Load(netConf(t, map[string]any{"cniVersion": tt.confVersion, "prevResult": json.RawMessage(tt.prev)}))
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("Load: %v; the library: %v", err, wantErr)
			}
			if err != nil {
				checkErr(t, err, config.ErrDecode, "prevResult:")
				return
			}
			if !reflect.DeepEqual(c.PrevResult, want) {
				t.Errorf("PrevResult = %#v, the library's = %#v", c.PrevResult, want)
			}
		})
	}
}

func libraryPrevResult(t *testing.T, confVersion, prev string) (types.Result, error) {
	t.Helper()
	conf := &types.PluginConf{CNIVersion: confVersion}
	if err := json.Unmarshal([]byte(prev), &conf.RawPrevResult); err != nil {
		t.Fatalf("test prevResult %s: %v", prev, err)
	}
	err := version.ParsePrevResult(conf)
	return conf.PrevResult, err
}

func TestLoadRefusesAPrevResultThatIsNotAnObject(t *testing.T) {
	for _, prev := range []string{`5`, `"x"`, `[]`, `true`} {
		_, err := config.Load(netConf(t, map[string]any{"prevResult": json.RawMessage(prev)}))
		checkErr(t, err, config.ErrDecode, "prevResult:")
	}
}

// The library's errors quote the main plugin's values raw, and raw JSON
// may hold a newline: the message stays on one line (found by FuzzLoad).
func TestAPrevResultErrorStaysOnOneLine(t *testing.T) {
	for _, prev := range []string{`{"cniVersion":"1.0.0","routes":[{"dst":"0.0\r\n0.0"}]}`, "[\n1\n]"} {
		c := netConf(t, map[string]any{"prevResult": json.RawMessage(prev)})
		_, err := config.Load(c)
		checkErr(t, err, config.ErrDecode, "prevResult:")
		if strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("prevResult %q: error %q spans lines", prev, err)
		}
	}
}

// ADD prints PrevResultJSON as is when it is set. It must be set only when
// the result names the config's version, and then read back (as libcni
// reads a plugin's output) as what the library would have printed.
func TestPrevResultJSONIsKeptOnlyWhenItReadsBackAsTheLibrarysOutput(t *testing.T) {
	for _, tt := range []struct {
		name, confVersion, prev string
		kept                    bool
	}{
		{"1.0.0", "1.0.0", prevResult100, true},
		{"a key the library does not know", "1.0.0", `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5/24","interface":0}],"interfaces":[{"name":"eth0"}],"x-vendor":{"a":1}}`, true},
		{"no version of its own", "1.0.0", `{"ips":[{"address":"10.0.0.5/24","interface":0}],"interfaces":[{"name":"eth0"}]}`, false},
		{"1.0.0 in a 1.1.0 config", "1.1.0", `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5/24","interface":0}],"interfaces":[{"name":"eth0"}]}`, false},
		{"the key spelt otherwise", "1.0.0", `{"CNIVersion":"1.0.0","ips":[{"address":"10.0.0.5/24","interface":0}],"interfaces":[{"name":"eth0"}]}`, false},
		{"the key twice", "1.0.0", `{"cniVersion":"1.0.0","cniversion":"1.0.0","ips":[{"address":"10.0.0.5/24","interface":0}],"interfaces":[{"name":"eth0"}]}`, false},
		{"invalid UTF-8", "1.0.0", "{\"cniVersion\":\"1.0.0\",\"interfaces\":[{\"name\":\"eth\xff\"}]}", false},
		{"0.4.0 in a 0.4.0 config", "0.4.0", `{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.5/24"}]}`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load(netConf(t, map[string]any{"cniVersion": tt.confVersion, "prevResult": json.RawMessage(tt.prev)}))
			if err != nil {
				t.Fatal(err)
			}
			if kept := c.PrevResultJSON != nil; kept != tt.kept {
				t.Fatalf("PrevResultJSON kept = %v, want %v", kept, tt.kept)
			}
			if !tt.kept {
				return
			}
			want, err := libraryPrevResult(t, tt.confVersion, tt.prev)
			if err != nil {
				t.Fatal(err)
			}
			printed, err := want.GetAsVersion(tt.confVersion)
			if err != nil {
				t.Fatal(err)
			}
			got, err := create.CreateFromBytes(c.PrevResultJSON)
			if err != nil {
				t.Fatalf("the kept bytes do not read back: %v", err)
			}
			if !reflect.DeepEqual(got, printed) {
				t.Errorf("the kept bytes read back as %#v, the library prints %#v", got, printed)
			}
		})
	}
}
