package config_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/external-ip/external-ip/pkg/config"
)

// ranges lets every non-static source through for the documentation prefixes.
var ranges = []string{"192.0.2.0/24", "198.51.100.0/24", "2001:db8::/32"}

func annotations(kv ...string) map[string]any {
	m := map[string]any{"kubernetes.io/config.source": "api", "io.kubernetes.pod.name": "web-0"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return map[string]any{"io.kubernetes.cri.pod-annotations": m}
}

// describe renders IPs as "source addr" lines so that a mismatch reads well.
func describe(ips []config.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.Source + " " + ip.Addr.String()
	}
	return out
}

func mustRequest(t *testing.T, keys map[string]any, cniArgs string) []config.IP {
	t.Helper()
	ips, err := mustLoad(t, netConf(t, keys)).Requests(cniArgs)
	if err != nil {
		t.Fatalf("Requests(%q) refused a valid request: %v", cniArgs, err)
	}
	return ips
}

func checkIPs(t *testing.T, got []config.IP, want ...string) {
	t.Helper()
	if g := describe(got); len(g) != len(want) || (len(want) > 0 && !reflect.DeepEqual(g, want)) {
		t.Errorf("requested IPs:\n got  %q\n want %q", g, want)
	}
}

func TestRequestsReadsEachSourceAlone(t *testing.T) {
	tests := []struct {
		name    string
		keys    map[string]any
		cniArgs string
		want    []string
	}{
		{"static externalIPs", map[string]any{"externalIPs": []string{"192.0.2.10", "2001:db8::10"}}, "",
			[]string{"externalIPs[0] 192.0.2.10", "externalIPs[1] 2001:db8::10"}},
		{"runtimeConfig.externalIPs list", map[string]any{"allowedRanges": ranges,
			"runtimeConfig": map[string]any{"externalIPs": []string{"192.0.2.11", "198.51.100.11"}}}, "",
			[]string{"runtimeConfig.externalIPs[0] 192.0.2.11", "runtimeConfig.externalIPs[1] 198.51.100.11"}},
		{"args.cni.externalIPs list", map[string]any{"allowedRanges": ranges,
			"args": map[string]any{"cni": map[string]any{"externalIPs": []string{"192.0.2.12"}}}}, "",
			[]string{"args.cni.externalIPs[0] 192.0.2.12"}},
		{"args.cni.externalIPs comma-separated string", map[string]any{"allowedRanges": ranges,
			"args": map[string]any{"cni": map[string]any{"externalIPs": "192.0.2.12, 2001:db8::12"}}}, "",
			[]string{"args.cni.externalIPs[0] 192.0.2.12", "args.cni.externalIPs[1] 2001:db8::12"}},
		{"default pod annotation", map[string]any{"allowedRanges": ranges,
			"runtimeConfig": annotations("external-ip/addresses", "192.0.2.13, 2001:db8::13")}, "",
			[]string{"pod annotation external-ip/addresses[0] 192.0.2.13", "pod annotation external-ip/addresses[1] 2001:db8::13"}},
		{"custom pod annotation, default key ignored", map[string]any{"allowedRanges": ranges, "podAnnotation": "example.com/eips",
			"runtimeConfig": annotations("example.com/eips", "192.0.2.14", "external-ip/addresses", "192.0.2.99")}, "",
			[]string{"pod annotation example.com/eips[0] 192.0.2.14"}},
		{"CNI_ARGS among other keys", map[string]any{"allowedRanges": ranges},
			"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=x;EXTERNAL_IPS=192.0.2.15,2001:db8::15;K8S_POD_INFRA_CONTAINER_ID=0123abcd",
			[]string{"CNI_ARGS EXTERNAL_IPS[0] 192.0.2.15", "CNI_ARGS EXTERNAL_IPS[1] 2001:db8::15"}},
		{"CNI_ARGS with a trailing semicolon", map[string]any{"allowedRanges": ranges}, "EXTERNAL_IPS=192.0.2.16;",
			[]string{"CNI_ARGS EXTERNAL_IPS[0] 192.0.2.16"}},
		{"CNI_ARGS key given twice", map[string]any{"allowedRanges": ranges}, "EXTERNAL_IPS=192.0.2.17;EXTERNAL_IPS=192.0.2.18",
			[]string{"CNI_ARGS EXTERNAL_IPS[0] 192.0.2.17", "CNI_ARGS EXTERNAL_IPS[1] 192.0.2.18"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkIPs(t, mustRequest(t, tt.keys, tt.cniArgs), tt.want...)
		})
	}
}

func TestRequestsUnitesSourcesKeepingTheFirstThatNamedAnIP(t *testing.T) {
	keys := map[string]any{
		"allowedRanges": ranges,
		"externalIPs":   []string{"192.0.2.1"},
		"runtimeConfig": map[string]any{
			"externalIPs":                       []string{"192.0.2.2", "192.0.2.1"},
			"io.kubernetes.cri.pod-annotations": map[string]any{"external-ip/addresses": "192.0.2.3,2001:db8::4"},
		},
		"args": map[string]any{"cni": map[string]any{"externalIPs": []string{"2001:db8::2", "192.0.2.3", "192.0.2.2"}}},
	}
	got := mustRequest(t, keys, "K8S_POD_NAME=web-0;EXTERNAL_IPS=2001:DB8:0::2,192.0.2.5,2001:db8::4")
	checkIPs(t, got,
		"externalIPs[0] 192.0.2.1",
		"runtimeConfig.externalIPs[0] 192.0.2.2",
		"args.cni.externalIPs[0] 2001:db8::2",
		"args.cni.externalIPs[1] 192.0.2.3",
		"pod annotation external-ip/addresses[1] 2001:db8::4",
		"CNI_ARGS EXTERNAL_IPS[1] 192.0.2.5",
	)
}

func TestRequestsAcceptsBothFamiliesInOneRequest(t *testing.T) {
	got := mustRequest(t, map[string]any{"allowedRanges": ranges,
		"runtimeConfig": annotations("external-ip/addresses", "2001:db8:ee::7,192.0.2.7")}, "")
	checkIPs(t, got, "pod annotation external-ip/addresses[0] 2001:db8:ee::7", "pod annotation external-ip/addresses[1] 192.0.2.7")
	if !got[0].Addr.Is6() || !got[1].Addr.Is4() {
		t.Errorf("families not kept apart: %v is6=%v, %v is4=%v", got[0].Addr, got[0].Addr.Is6(), got[1].Addr, got[1].Addr.Is4())
	}
}

func TestRequestsTrustsTheStaticListWithoutAllowedRanges(t *testing.T) {
	got := mustRequest(t, map[string]any{"externalIPs": []string{"203.0.113.9", "10.1.2.3"}}, "")
	checkIPs(t, got, "externalIPs[0] 203.0.113.9", "externalIPs[1] 10.1.2.3")
}

func TestRequestsAsksForNothingWhenSourcesAreEmpty(t *testing.T) {
	tests := []struct {
		name    string
		keys    map[string]any
		cniArgs string
	}{
		{"no source at all", nil, ""},
		{"empty annotation", map[string]any{"runtimeConfig": annotations("external-ip/addresses", "")}, ""},
		{"annotation of commas and blanks", map[string]any{"runtimeConfig": annotations("external-ip/addresses", " , ,")}, ""},
		{"other annotations only", map[string]any{"runtimeConfig": annotations()}, ""},
		{"empty lists", map[string]any{"externalIPs": []string{}, "runtimeConfig": map[string]any{"externalIPs": nil},
			"args": map[string]any{"cni": map[string]any{"externalIPs": ""}}}, ""},
		{"CNI_ARGS without the key", nil, "IgnoreUnknown=1;K8S_POD_NAME=x"},
		{"CNI_ARGS key empty", nil, "IgnoreUnknown=1;EXTERNAL_IPS="},
		{"CNI_ARGS only separators", nil, ";;"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No allowedRanges: asking for nothing must not trip the secure default.
			checkIPs(t, mustRequest(t, tt.keys, tt.cniArgs))
		})
	}
}

func TestRequestsDropsTheEmptyItemOfATrailingComma(t *testing.T) {
	got := mustRequest(t, map[string]any{"allowedRanges": ranges,
		"runtimeConfig": annotations("external-ip/addresses", "192.0.2.8,")}, "EXTERNAL_IPS=192.0.2.9,")
	checkIPs(t, got, "pod annotation external-ip/addresses[0] 192.0.2.8", "CNI_ARGS EXTERNAL_IPS[0] 192.0.2.9")
}

// loadAndRequest is what ADD does: Load, which refuses a bad static list
// (config), then Requests, which refuses a bad request.
func loadAndRequest(t *testing.T, stdin []byte, cniArgs string) ([]config.IP, error) {
	t.Helper()
	c, err := config.Load(stdin)
	if err != nil {
		return nil, err
	}
	return c.Requests(cniArgs)
}

func TestABadStaticListIsRefusedByLoadForEveryVerb(t *testing.T) {
	for _, list := range []any{[]string{"192.0.2.1", "127.0.0.1"}, []string{"2001:db8::300::1"}, []int{1}} {
		_, err := config.Load(netConf(t, map[string]any{"externalIPs": list}))
		if err == nil || !strings.HasPrefix(err.Error(), "externalIPs") {
			t.Errorf("Load with externalIPs %v = %v, want an error naming externalIPs (Families would ignore it)", list, err)
		}
	}
}

func TestABadRequestFailsRequestsButNotLoad(t *testing.T) {
	// DEL and GC load the config but read no request: a runtime that sends
	// DEL with the ADD's bad runtimeConfig must still be able to release.
	for _, keys := range []map[string]any{
		{"runtimeConfig": map[string]any{"externalIPs": 5}},
		{"args": map[string]any{"cni": map[string]any{"externalIPs": map[string]any{}}}},
		{"allowedRanges": ranges, "runtimeConfig": map[string]any{"externalIPs": []string{"192.0.2.300"}}},
	} {
		c, err := config.Load(netConf(t, keys))
		if err != nil {
			t.Errorf("Load with %v = %v, want it loaded", keys, err)
			continue
		}
		if _, err := c.Requests(""); err == nil {
			t.Errorf("Requests with %v succeeded, want the bad request refused", keys)
		}
	}
}

func TestRequestsRefusesUnusableAddressesNamingSourceAndValue(t *testing.T) {
	static := func(v string) map[string]any { return map[string]any{"externalIPs": []string{"192.0.2.1", v}} }
	runtime := func(v string) map[string]any {
		return map[string]any{"allowedRanges": ranges, "runtimeConfig": map[string]any{"externalIPs": []string{v}}}
	}
	multus := func(v string) map[string]any {
		return map[string]any{"allowedRanges": ranges, "args": map[string]any{"cni": map[string]any{"externalIPs": []string{v}}}}
	}
	annotation := func(v string) map[string]any {
		return map[string]any{"allowedRanges": ranges, "runtimeConfig": annotations("external-ip/addresses", "192.0.2.1,"+v)}
	}
	// allowedRanges that let every address past: what refuses is the class.
	anywhere := func(v string) map[string]any {
		return map[string]any{"allowedRanges": []string{"0.0.0.0/0", "::/0"}, "runtimeConfig": map[string]any{"externalIPs": []string{v}}}
	}
	tests := []struct {
		name      string
		keys      map[string]any
		cniArgs   string
		fragments []string
	}{
		{"not an IP", runtime("192.0.2.300"), "", []string{`runtimeConfig.externalIPs[0]: "192.0.2.300" is not an IP address`}},
		{"a host name", annotation("example.com"), "", []string{`pod annotation external-ip/addresses[1]: "example.com" is not an IP address`}},
		{"a CIDR", multus("192.0.2.0/24"), "", []string{`args.cni.externalIPs[0]: "192.0.2.0/24" is not an IP address`}},
		{"empty string in a list", runtime(""), "", []string{`runtimeConfig.externalIPs[0]: "" is not an IP address`}},
		{"with a zone", multus("2001:db8::1%eth0"), "", []string{`args.cni.externalIPs[0]: "2001:db8::1%eth0" is not an IP address`}},
		{"loopback v4", static("127.0.0.1"), "", []string{`externalIPs[1]: "127.0.0.1" is a loopback address`}},
		{"loopback v4 off 127.0.0.1", runtime("127.8.9.10"), "", []string{`runtimeConfig.externalIPs[0]: "127.8.9.10" is a loopback`}},
		{"loopback v6", static("::1"), "", []string{`externalIPs[1]: "::1" is a loopback address`}},
		{"multicast v4", runtime("224.0.0.251"), "", []string{`runtimeConfig.externalIPs[0]: "224.0.0.251" is a multicast address`}},
		{"multicast v6", multus("ff02::1"), "", []string{`args.cni.externalIPs[0]: "ff02::1" is a multicast address`}},
		{"unspecified v4", static("0.0.0.0"), "", []string{`externalIPs[1]: "0.0.0.0" is the unspecified address`}},
		{"unspecified v6", annotation("::"), "", []string{`pod annotation external-ip/addresses[1]: "::" is the unspecified address`}},
		{"link-local v4", static("169.254.10.1"), "", []string{`externalIPs[1]: "169.254.10.1" is a link-local address`}},
		{"link-local v6", runtime("fe80::1"), "", []string{`runtimeConfig.externalIPs[0]: "fe80::1" is a link-local address`}},
		{"IPv4-mapped IPv6", static("::ffff:1.2.3.4"), "", []string{`externalIPs[1]: "::ffff:1.2.3.4" is an IPv4-mapped IPv6 address`}},
		{"IPv4-mapped IPv6 of an allowed v4", runtime("::ffff:192.0.2.4"), "", []string{`runtimeConfig.externalIPs[0]: "::ffff:192.0.2.4" is an IPv4-mapped`}},
		{"broadcast", static("255.255.255.255"), "", []string{`externalIPs[1]: "255.255.255.255" is the broadcast address`}},
		{"this network", anywhere("0.1.2.3"), "", []string{`runtimeConfig.externalIPs[0]: "0.1.2.3" is in 0.0.0.0/8 ("this network"), which no host may send from`}},
		{"this network, last", static("0.255.255.255"), "", []string{`externalIPs[1]: "0.255.255.255" is in 0.0.0.0/8`}},
		{"reserved", anywhere("240.0.0.1"), "", []string{`runtimeConfig.externalIPs[0]: "240.0.0.1" is in 240.0.0.0/4, reserved`}},
		{"reserved, last before broadcast", static("255.255.255.254"), "", []string{`externalIPs[1]: "255.255.255.254" is in 240.0.0.0/4, reserved`}},
		{"IPv4-compatible IPv6", anywhere("::1.2.3.4"), "", []string{`runtimeConfig.externalIPs[0]: "::1.2.3.4" is an IPv4-compatible IPv6 address (::/96, deprecated)`}},
		{"IPv4-compatible IPv6, low", static("::2"), "", []string{`externalIPs[1]: "::2" is an IPv4-compatible IPv6 address`}},
		{"outside allowedRanges v4", annotation("203.0.113.5"), "",
			[]string{`pod annotation external-ip/addresses[1]: "203.0.113.5" is outside allowedRanges [192.0.2.0/24 198.51.100.0/24 2001:db8::/32]`}},
		{"outside allowedRanges v6", multus("2001:db9::1"), "", []string{`args.cni.externalIPs[0]: "2001:db9::1" is outside allowedRanges`}},
		{"outside allowedRanges via CNI_ARGS", map[string]any{"allowedRanges": ranges}, "K8S_POD_NAME=x;EXTERNAL_IPS=192.0.2.5,10.0.0.5",
			[]string{`CNI_ARGS EXTERNAL_IPS[1]: "10.0.0.5" is outside allowedRanges`}},
		{"multicast via CNI_ARGS", map[string]any{"allowedRanges": ranges}, "EXTERNAL_IPS=224.0.0.1",
			[]string{`CNI_ARGS EXTERNAL_IPS[0]: "224.0.0.1" is a multicast address`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ips, err := loadAndRequest(t, netConf(t, tt.keys), tt.cniArgs)
			checkErr(t, err, config.ErrInvalid, tt.fragments...)
			if ips != nil {
				t.Errorf("Requests returned %q alongside its error, want nothing", describe(ips))
			}
		})
	}
}

func TestRequestsRefusesNonStaticSourcesWhenAllowedRangesIsEmpty(t *testing.T) {
	tests := []struct {
		name    string
		keys    map[string]any
		cniArgs string
		where   string
	}{
		{"runtimeConfig.externalIPs", map[string]any{"runtimeConfig": map[string]any{"externalIPs": []string{"192.0.2.5"}}}, "",
			"runtimeConfig.externalIPs[0]"},
		{"args.cni.externalIPs", map[string]any{"args": map[string]any{"cni": map[string]any{"externalIPs": []string{"192.0.2.5"}}}}, "",
			"args.cni.externalIPs[0]"},
		{"pod annotation", map[string]any{"runtimeConfig": annotations("external-ip/addresses", "192.0.2.5")}, "",
			"pod annotation external-ip/addresses[0]"},
		{"CNI_ARGS", nil, "IgnoreUnknown=1;EXTERNAL_IPS=192.0.2.5", "CNI_ARGS EXTERNAL_IPS[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := map[string]any{"externalIPs": []string{"192.0.2.1"}}
			for k, v := range tt.keys {
				keys[k] = v
			}
			_, err := mustLoad(t, netConf(t, keys)).Requests(tt.cniArgs)
			checkErr(t, err, config.ErrInvalid, tt.where+`: "192.0.2.5" refused`, "allowedRanges is empty")
		})
	}
}

func TestRequestsRefusesSourcesOfTheWrongShape(t *testing.T) {
	tests := []struct {
		name string
		keys map[string]any
		want string
	}{
		{"static list of numbers", map[string]any{"externalIPs": []int{1, 2}}, "externalIPs: want a list"},
		{"runtimeConfig.externalIPs an object", map[string]any{"runtimeConfig": map[string]any{"externalIPs": map[string]any{"ip": "192.0.2.1"}}},
			"runtimeConfig.externalIPs: want a list"},
		{"args.cni.externalIPs a number", map[string]any{"args": map[string]any{"cni": map[string]any{"externalIPs": 5}}},
			"args.cni.externalIPs: want a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadAndRequest(t, netConf(t, tt.keys), "")
			checkErr(t, err, config.ErrDecode, tt.want)
		})
	}
}

func TestRequestsRefusesMalformedCNIArgs(t *testing.T) {
	tests := []struct{ args, pair string }{
		{"K8S_POD_NAME", "K8S_POD_NAME"},
		{"IgnoreUnknown=1;garbage;EXTERNAL_IPS=192.0.2.1", "garbage"},
		{"EXTERNAL_IPS", "EXTERNAL_IPS"},
	}
	for _, tt := range tests {
		_, err := mustLoad(t, netConf(t, map[string]any{"allowedRanges": ranges})).Requests(tt.args)
		checkErr(t, err, config.ErrArgs, fmt.Sprintf("CNI_ARGS: %q is not a KEY=VALUE pair", tt.pair))
	}
}

// manyIPs returns n distinct addresses in 198.18.0.0/15.
func manyIPs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("198.18.%d.%d", i/200, 1+i%200)
	}
	return out
}

func TestRequestsBoundsTheNumberOfIPs(t *testing.T) {
	t.Run("MaxIPs accepted", func(t *testing.T) {
		if got := mustRequest(t, map[string]any{"externalIPs": manyIPs(config.MaxIPs)}, ""); len(got) != config.MaxIPs {
			t.Errorf("got %d IPs, want all %d", len(got), config.MaxIPs)
		}
	})
	t.Run("duplicates do not count", func(t *testing.T) {
		keys := map[string]any{"externalIPs": manyIPs(config.MaxIPs), "allowedRanges": []string{"198.18.0.0/15"},
			"runtimeConfig": annotations("external-ip/addresses", strings.Join(manyIPs(config.MaxIPs), ","))}
		if got := mustRequest(t, keys, ""); len(got) != config.MaxIPs {
			t.Errorf("got %d IPs, want %d once duplicates are collapsed", len(got), config.MaxIPs)
		}
	})
	t.Run("one more refused", func(t *testing.T) {
		_, err := mustLoad(t, netConf(t, map[string]any{"externalIPs": manyIPs(config.MaxIPs + 1)})).Requests("")
		checkErr(t, err, config.ErrInvalid, fmt.Sprintf("%d requested", config.MaxIPs+1), fmt.Sprint(config.MaxIPs))
	})
}

func TestErrorsShowRawJSONOnOneLineAndWholeRunes(t *testing.T) {
	pretty := "{\n \"cniVersion\": \"1.0.0\", \"name\": \"ext\", \"type\": \"external-ip\",\n" +
		" \"runtimeConfig\": {\"externalIPs\": [\n    1,\n    2\n  ]},\n" +
		" \"args\": {\"cni\": {\"externalIPs\": {\"k\": \"" + strings.Repeat("é", 40) + "\"}}}\n}"
	c := mustLoad(t, []byte(pretty))
	_, err := c.Requests("")
	checkErr(t, err, config.ErrDecode, "runtimeConfig.externalIPs: want a list of IP address strings, got [1,2]")

	pretty = strings.Replace(pretty, "[\n    1,\n    2\n  ]", "[]", 1)
	_, err = mustLoad(t, []byte(pretty)).Requests("")
	checkErr(t, err, config.ErrDecode, `args.cni.externalIPs: want a list of IP address strings, got {"k":"é`, "...")
	if err != nil && !utf8.ValidString(err.Error()) {
		t.Errorf("error %q cuts a rune in half", err)
	}

	_, err = config.Load([]byte("{\"name\": \"ext\", \"lockTimeout\": {\n  \"s\": 10\n}}"))
	checkErr(t, err, config.ErrDecode, `lockTimeout: want a duration string such as "1.1s", got {"s":10}`)
}

func TestFamiliesFollowTheStaticListAndAllowedRanges(t *testing.T) {
	tests := []struct {
		name   string
		keys   map[string]any
		v4, v6 bool
	}{
		{"nothing configured", nil, false, false},
		{"static IPv4", map[string]any{"externalIPs": []string{"192.0.2.1"}}, true, false},
		{"static IPv6 as a string", map[string]any{"externalIPs": " 2001:db8::1 "}, false, true},
		{"IPv6 range", map[string]any{"allowedRanges": []string{"2001:db8::/32"}}, false, true},
		{"static IPv4 and IPv6 range", map[string]any{"externalIPs": []string{"192.0.2.1"}, "allowedRanges": []string{"2001:db8::/32"}}, true, true},
		{"requested IPs do not count", map[string]any{"runtimeConfig": map[string]any{"externalIPs": []string{"2001:db8::1"}}}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v4, v6 := mustLoad(t, netConf(t, tt.keys)).Families()
			if v4 != tt.v4 || v6 != tt.v6 {
				t.Errorf("Families() = v4 %v, v6 %v for %v; want v4 %v, v6 %v", v4, v6, tt.keys, tt.v4, tt.v6)
			}
		})
	}
}

func TestThePoolAnnotationAndThePodsIdentityAreRead(t *testing.T) {
	c, err := config.Load([]byte(`{"cniVersion": "1.0.0", "name": "n", "type": "external-ip", "allowedRanges": ["192.0.2.0/24"],
		"externalIPs": ["198.51.100.1"],
		"runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"external-ip/pool": " web ", "external-ip/addresses": "192.0.2.5,203.0.113.9"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pool != "web" {
		t.Errorf("Pool %q, want web", c.Pool)
	}
	if _, err := c.Requests(""); err == nil || !strings.Contains(err.Error(), `"203.0.113.9" is outside allowedRanges`) {
		t.Errorf("Requests without pools: %v; want 203.0.113.9 refused by allowedRanges", err)
	}
	all, named, err := c.RequestsInPools("")
	if err != nil || len(all) != 3 || len(named) != 2 || named[1].Addr.String() != "203.0.113.9" || all[0].Addr.String() != "198.51.100.1" {
		t.Errorf("RequestsInPools: %v %v %v; want the static IP first and the two named ones, allowedRanges not applied", all, named, err)
	}
	pod, err := config.PodFromArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=a;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=x;K8S_POD_UID=u-1")
	if err != nil || pod != (config.Pod{Namespace: "a", Name: "web-0", UID: "u-1"}) {
		t.Errorf("PodFromArgs: %+v %v", pod, err)
	}
	if _, err := config.PodFromArgs("K8S_POD_NAME"); !errors.Is(err, config.ErrArgs) {
		t.Errorf("a pair without '=': %v, want config.ErrArgs", err)
	}
}
