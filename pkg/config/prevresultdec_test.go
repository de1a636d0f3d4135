package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
)

func filledResult(t *testing.T) *current.Result {
	n, r := 0, &current.Result{}
	fill(t, reflect.ValueOf(r).Elem(), &n)
	r.CNIVersion = "1.0.0"
	return r
}

// Every field of the library's result types, as the library writes it,
// is read by the hand path, which agrees with the library: a field a
// later release of the library adds is passed over, and this test fails.
func TestPrevResultDecoderReadsEveryField(t *testing.T) {
	for name, r := range variants(t, filledResult) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := plainResult("1.0.0", b)
		if name == "every field but CNIVersion" {
			if ok {
				t.Errorf("%s: the hand decoder took a result of no version, which the library refuses in a 1.0.0 config", name)
			}
			continue
		}
		if !ok {
			t.Errorf("%s: the hand decoder gave up on\n%s\n(a field the library added?)", name, b)
			continue
		}
		want, err := create.Create("1.0.0", b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: from\n%s\nthe hand decoder read %+v\nthe library reads %+v", name, b, got, want)
		}
	}
}

// prevResultSeeds are results of every shape the hand path takes or
// gives up on.
var prevResultSeeds = []string{
	`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:01:00:05","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.1.0.5/16","gateway":"10.1.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{}}`,
	`{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mtu":1500,"socketPath":"/s","pciID":"0000:00:01.0"}],"ips":[{"address":"2001:db8::5/64"}],"routes":[{"dst":"::/0","gw":"2001:db8::1","mtu":1400,"advmss":1360,"priority":5,"table":100,"scope":0}],"dns":{"nameservers":["10.0.0.10"],"domain":"cluster.local","search":["svc"],"options":["ndots:5"]}}`,
	`{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.5/24"}]}`, `{"cniVersion":"9.9.9"}`, `{}`, `{"ips":[{"address":"10.0.0.5/24"}]}`,
	`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5"}]}`, `{"cniVersion":"1.0.0","ips":[{"address":null}]}`, `{"cniVersion":"1.0.0","ips":[{}]}`,
	`{"cniVersion":"1.0.0","ips":[null,{"address":"10.0.0.5/24","interface":null,"gateway":null}]}`, `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5/24","gateway":""}]}`,
	`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5/24","gateway":"x"}]}`, `{"cniVersion":"1.0.0","routes":[{"dst":"0.0\r\n0.0"}]}`,
	`{"cniVersion":"1.0.0","routes":[{"gw":"10.0.0.1"}]}`, `{"cniVersion":"1.0.0","routes":[{"dst":"fe80::%eth0/64"}]}`, `{"cniVersion":"1.0.0","dns":null}`,
	`{"cniVersion":"1.0.0","CNIVersion":"1.0.0"}`, `{"cniVersion":"1.0.0","cniVersion":"1.1.0"}`, `{"cniVersion":"1.0.0","IPs":[]}`, `{"cniVersion":"1.0.0","x-vendor":{"a":[1]}}`,
	`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","Sandbox":"/x"}]}`, `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mtu":"1500"}]}`,
	`{"cniVersion":"1.0.0","interfaces":"eth0"}`, `{"cniVersion":1}`, `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5/24","interface":-1}]}`,
	`{"cniVersion":"1.0.0","interfaces":[{"name":"eth\u0030"}]}`, "{\"cniVersion\":\"1.0.0\",\"interfaces\":[{\"name\":\"eth\xff\"}]}",
}

// FuzzPrevResultDecodingIsTheLibrarys holds parsePrevResult to the
// library alone over any object, in a config of each kind of version:
// the same result, the same verbatim flag, the same error or none.
func FuzzPrevResultDecodingIsTheLibrarys(f *testing.F) {
	for _, s := range prevResultSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 || raw[0] != '{' {
			return
		}
		for _, v := range []string{"1.0.0", "1.1.0", "0.4.0", ""} {
			checkPrevResult(t, v, raw)
		}
	})
}

func checkPrevResult(t *testing.T, cniVersion string, raw []byte) {
	t.Helper()
	got, gotSame, err := parsePrevResult(cniVersion, raw)
	want, wantSame, wantErr := libraryPrevResult(cniVersion, raw)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || gotSame != wantSame || !reflect.DeepEqual(got, want) {
		t.Fatalf("%s config, prevResult %q: read %+v, same %v (error %v); the library %+v, same %v (error %v)",
			cniVersion, raw, got, gotSame, err, want, wantSame, wantErr)
	}
}

func TestPrevResultSeedsTakeBothPaths(t *testing.T) {
	hand, given := 0, 0
	for _, s := range prevResultSeeds {
		checkPrevResult(t, "1.0.0", []byte(s))
		if _, ok := plainResult("1.0.0", []byte(s)); ok {
			hand++
		} else {
			given++
		}
	}
	if hand < 5 || given < 10 {
		t.Errorf("of the seeds, %d went by hand and %d to the library; want at least 5 and 10", hand, given)
	}
	t.Logf("%d by hand, %d to the library", hand, given)
}
