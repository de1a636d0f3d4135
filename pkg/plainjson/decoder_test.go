package plainjson_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/external-ip/external-ip/pkg/plainjson"
)

// doc has a field for every kind of value a Decoder reads.
type doc struct {
	S    string            `json:"s"`
	SP   *string           `json:"sp"`
	B    bool              `json:"b"`
	I    int               `json:"i"`
	U    uint64            `json:"u"`
	A    netip.Addr        `json:"a"`
	R    json.RawMessage   `json:"r"`
	L    []string          `json:"l"`
	M    map[string]string `json:"m"`
	In   *inner            `json:"in"`
	Objs []inner           `json:"objs"`
}

type inner struct {
	X int  `json:"x"`
	Y *int `json:"y"`
}

var docNames = []string{"s", "sp", "b", "i", "u", "a", "r", "l", "m", "in", "objs"}

func (v *doc) decode(d *plainjson.Decoder) {
	d.Object(docNames, func(name string) {
		switch name {
		case "s":
			d.Str(&v.S)
		case "sp":
			d.StrPtr(&v.SP)
		case "b":
			d.Bool(&v.B)
		case "i":
			d.Int(&v.I)
		case "u":
			d.Uint64(&v.U)
		case "a":
			plainjson.Text(d, &v.A)
		case "r":
			d.Raw(&v.R)
		case "l":
			plainjson.List(d, &v.L, d.Str)
		case "m":
			d.StringMap(&v.M)
		case "in":
			plainjson.Ptr(d, &v.In, func(in *inner) { in.decode(d) })
		case "objs":
			plainjson.List(d, &v.Objs, func(in *inner) { in.decode(d) })
		}
	})
}

func (in *inner) decode(d *plainjson.Decoder) {
	d.Object([]string{"x", "y"}, func(name string) {
		if name == "x" {
			d.Int(&in.X)
		} else {
			plainjson.Ptr(d, &in.Y, d.Int)
		}
	})
}

var seeds = []string{
	`{"s":"a","sp":"b","b":true,"i":-3,"u":7,"a":"192.0.2.1","r":{ "k" : [1, "x"] },"l":["a",null],"m":{"k":"v","n":null},"in":{"x":1,"y":2},"objs":[{"x":1},null,{}]}`,
	`{"s":null,"sp":null,"b":null,"i":null,"u":null,"a":null,"r":null,"l":null,"m":null,"in":null,"objs":null}`,
	`{"l":[],"m":{},"objs":[],"in":{},"r":"str\"ing","a":""}`, ` { "s" : "a" } `, `{}`, `null`, `[]`, `1`, ``, `{"s":"a"} x`,
	`{"S":"a"}`, `{"s":"a","s":"b"}`, `{"ß":1}`, `{"other":{"s":[1,"]}"]},"s":"a"}`, `{"s\u0000":1}`, `{"\u0073":"a"}`,
	`{"s":1}`, `{"b":"true"}`, `{"i":1.5}`, `{"i":1e3}`, `{"i":-0}`, `{"u":-1}`, `{"u":18446744073709551616}`, `{"a":"x"}`, `{"a":1}`,
	`{"s":"\n"}`, "{\"s\":\"\xff\"}", `{"m":{"k":"v","k":"w"}}`, `{"m":{"k":1}}`, `{"m":{"\u006b":"v"}}`, `{"l":"a"}`, `{"in":[]}`,
	`{"r":tru}`, `{"r":[1,2,]}`, `{"objs":[{"x":1,"X":2}]}`, `{"in":{"y":null,"z":{}}}`,
}

// FuzzDecoderIsEncodingJSON holds the Decoder to encoding/json over any
// input: where it does not give up, it reads what encoding/json reads,
// and encoding/json finds no fault.
func FuzzDecoderIsEncodingJSON(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { check(t, b) })
}

func check(t *testing.T, b []byte) bool {
	t.Helper()
	var got, want doc
	d := plainjson.New(b)
	got.decode(d)
	if !d.OK() {
		return false
	}
	if err := json.Unmarshal(b, &want); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("from %q: the Decoder read %s; encoding/json %s (error %v)", b, show(got), show(want), err)
	}
	return true
}

func show(v doc) string { b, _ := json.Marshal(v); return fmt.Sprintf("%+v %s", v, b) }

func TestTheSeedsTakeBothPaths(t *testing.T) {
	taken := 0
	for _, s := range seeds {
		if check(t, []byte(s)) {
			taken++
		}
	}
	if taken < 5 || taken > len(seeds)-5 {
		t.Errorf("the Decoder took %d of %d seeds; want at least 5 taken and 5 given up", taken, len(seeds))
	}
}
