package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/plainjson"
)

var rawType = reflect.TypeFor[json.RawMessage]()

// fill sets v to a non-zero value, each one different, so that a field
// the hand decoder drops or swaps with another shows.
func fill(t *testing.T, v reflect.Value, n *int) {
	*n++
	switch v.Type() {
	case rawType:
		v.SetBytes(fmt.Appendf(nil, `{"n":[%d," x "]}`, *n))
		return
	case reflect.TypeFor[net.IP]():
		v.Set(reflect.ValueOf(net.IPv4(10, 1, byte(*n), 1)))
		return
	case reflect.TypeFor[net.IPNet]():
		v.Set(reflect.ValueOf(net.IPNet{IP: net.IPv4(10, 2, byte(*n), 5), Mask: net.CIDRMask(*n%32, 32)}))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d é", *n))
	case reflect.Int:
		v.SetInt(int64(*n))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(t, v.Field(i), n)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(t, k, n)
			fill(t, e, n)
			v.SetMapIndex(k, e)
		}
	default:
		t.Fatalf("no filler for %s: add one to the test", v.Type())
	}
}

// fieldPaths lists the struct fields reachable in v through pointers and
// structs.
func fieldPaths(v reflect.Value) [][]int {
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	var out [][]int
	for i := range v.NumField() {
		out = append(out, []int{i})
		for _, sub := range fieldPaths(v.Field(i)) {
			out = append(out, append([]int{i}, sub...))
		}
	}
	return out
}

// variants are a value filled, and filled but for one field (at any
// depth through pointers and structs) left zero.
func variants[T any](t *testing.T, filled func(*testing.T) *T) map[string]*T {
	out := map[string]*T{"every field": filled(t)}
	for _, path := range fieldPaths(reflect.ValueOf(filled(t))) {
		c := filled(t)
		v := reflect.ValueOf(c).Elem()
		var names []string
		for _, i := range path {
			for v.Kind() == reflect.Pointer {
				v = v.Elem()
			}
			names = append(names, v.Type().Field(i).Name)
			v = v.Field(i)
		}
		v.SetZero()
		out["every field but "+strings.Join(names, ".")] = c
	}
	return out
}

func filledNetConf(t *testing.T) *netConf {
	n, c := 0, &netConf{}
	fill(t, reflect.ValueOf(c).Elem(), &n)
	return c
}

// Every field, as json.Marshal writes it, and every field but one (at any
// depth, written as null or left out), is read by the hand path, which
// agrees with encoding/json: a field added to netConf without its
// decoder is passed over, and this test fails.
func TestNetConfDecoderReadsEveryField(t *testing.T) {
	for name, c := range variants(t, filledNetConf) {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var got, want netConf
		d := plainjson.New(b)
		got.decode(d)
		if !d.OK() {
			t.Errorf("%s: the hand decoder gave up on\n%s\n(a field added to netConf but not to its decode?)", name, b)
			continue
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: from\n%s\nthe hand decoder read %+v\nencoding/json reads %+v", name, b, got, want)
		}
	}
}

// netConfSeeds are configs of every shape the hand path takes or gives
// up on, besides FuzzLoad's corpus: unknown keys at every level, keys in
// another case, duplicates, nulls, escapes and values of the wrong type.
var netConfSeeds = []string{
	`{"cniVersion":"1.0.0","name":"n","type":"external-ip","capabilities":{"io.kubernetes.cri.pod-annotations":true},"ipam":{"type":"x","ranges":[[{"subnet":"10.0.0.0/24"}]]}}`,
	`{"name":"n","runtimeConfig":{"portMappings":[{"hostPort":80}],"externalIPs":["192.0.2.1"],"externalIPPool":"web","io.kubernetes.cri.pod-annotations":{"a":"b","c":null}}}`,
	`{"name":"n","args":{"cni":{"externalIPs":"192.0.2.1","other":1},"k8s":{}},"cni.dev/valid-attachments":[{"containerID":"c","ifname":"eth0","x":1},null]}`,
	`{"name":"n","announce":{"count":2,"interval":"1s"},"podAnnotation":"a/b","allowedRanges":["192.0.2.0/24",null]}`,
	`{"name":"n","announce":null,"podAnnotation":null,"runtimeConfig":null,"args":null,"prevResult":null,"traffic":null}`,
	`{"name":"n","announce":{"count":null},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":null}}`,
	`{"name":"n","announce":{"count":2.5}}`, `{"name":"n","announce":{"count":"2"}}`, `{"name":"n","announce":{"count":1e1}}`,
	`{"name":"n","announce":{"count":99999999999999999999}}`, `{"name":"n","announce":[]}`, `{"name":7}`, `{"name":"n","device":true}`,
	`{"Name":"n"}`, `{"name":"a","NAME":"b"}`, `{"name":"a","name":"b"}`, `{"nAme":"n","type":"x"}`, `{"ſtandby":true,"name":"n"}`,
	`{"name":"n","runtimeConfig":{"ExternalIPs":["192.0.2.1"]}}`, `{"name":"n","runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"a":"b","a":"c"}}}`,
	`{"name":"n","runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"a":1}}}`, `{"name":"n","runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"\u0061":"b"}}}`,
	`{"name":"n\u0041"}`, `{"na\u006de":"n"}`, "{\"name\":\"\xff\"}", `{"name":"é✓"}`, `{"name":"n","x":"]}\"{["}`,
	`{"name":"n"} trailing`, `{"name":"n"}{"name":"m"}`, `{"name":"n"`, ``, `null`, `[]`, `"x"`, ` {"name" : "n" , "prevResult" : { "ips" : [ ] } } `,
}

// corpus is FuzzLoad's seed corpus: configs as runtimes hand them over.
func corpus(t testing.TB) [][]byte {
	files, err := filepath.Glob("testdata/fuzz/FuzzLoad/*")
	if err != nil || len(files) < 10 {
		t.Fatalf("FuzzLoad's corpus: %d files, %v", len(files), err)
	}
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		line := strings.Split(string(b), "\n")[1]
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(line, "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, []byte(s))
	}
	return out
}

// FuzzNetConfDecodingIsEncodingJSONs holds decodeNetConf to encoding/json
// over any input: the same value, and the same error or none.
func FuzzNetConfDecodingIsEncodingJSONs(f *testing.F) {
	for _, s := range netConfSeeds {
		f.Add([]byte(s))
	}
	for _, b := range corpus(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		checkNetConfDecoding(t, stdin)
	})
}

// checkNetConfDecoding compares the two on stdin, and says whether the
// hand path took it.
func checkNetConfDecoding(t *testing.T, stdin []byte) bool {
	t.Helper()
	var got, want netConf
	err := decodeNetConf(stdin, &got)
	wantErr := json.NewDecoder(bytes.NewReader(stdin)).Decode(&want)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
		t.Fatalf("from %q: decodeNetConf read %+v (error %v), encoding/json %+v (error %v)", stdin, got, err, want, wantErr)
	}
	var n netConf
	d := plainjson.New(stdin)
	n.decode(d)
	return d.OK()
}

// The seeds hold both kinds, and the runtimes' configs go by hand.
func TestNetConfSeedsTakeBothPaths(t *testing.T) {
	hand, given := 0, 0
	for _, s := range netConfSeeds {
		if checkNetConfDecoding(t, []byte(s)) {
			hand++
		} else {
			given++
		}
	}
	for _, b := range corpus(t) {
		if checkNetConfDecoding(t, b) {
			hand++
		} else {
			given++
		}
	}
	if hand < 10 || given < 10 {
		t.Errorf("of the seeds, %d went by hand and %d to encoding/json; want at least 10 of each", hand, given)
	}
	t.Logf("%d by hand, %d to encoding/json", hand, given)
}
