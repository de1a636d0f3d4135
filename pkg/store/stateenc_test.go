package store

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"testing"
)

// stateValues are the shapes the hand encoders must write as
// encoding/json does: nil and empty lists, omitted and present optional
// fields, maps of several keys, and strings that need escaping.
func stateValues(name string, a, b netip.Addr) []any {
	att := Attachment{Network: name, ContainerID: "c<&>" + name, IfName: "eth0\u2028\x01\xff"}
	st := &Steering{Traffic: name, Container: []netip.Prefix{netip.PrefixFrom(a, a.BitLen()/2)},
		Egress:  []EgressRule{{Source: a, Uplink: name, IP: b}, {}},
		Hairpin: []HairpinRule{{Source: netip.PrefixFrom(a, 8), Target: b}, {}}}
	rec := &Record{Attachment: att, IPs: []netip.Addr{a, b}, Steering: st, Route: 200, Owner: "namespace team-a", Owned: []netip.Addr{b}}
	return []any{
		&Journal{},
		&Journal{Op: OpAdd, Key: name, Record: rec, Touch: []netip.Addr{}, Uplinks: map[netip.Addr]string{a: name, b: "up\n", {}: "zero"},
			Old: &Record{}, OldUplinks: map[netip.Addr]string{b: ""}},
		&Journal{Op: OpAdd, Key: name, Record: &Record{}, Steps: []Step{{Kind: StepNAT, Data: json.RawMessage(`{"x":[1,"<"]}`)}, {}}},
		&Journal{Op: OpRelease, Key: name, Touch: []netip.Addr{a}, Uplinks: map[netip.Addr]string{}, Steps: []Step{}},
		&Record{}, rec, &Record{Attachment: att, IPs: []netip.Addr{}, Steering: &Steering{}},
		&Record{Steering: &Steering{Container: []netip.Prefix{}, Egress: []EgressRule{}, Hairpin: []HairpinRule{}}},
		IPEntry{}, IPEntry{Holders: []string{}}, IPEntry{Holders: []string{name, "\t\"\\/"}, Uplink: name},
		IPEntry{Holders: []string{name}, Route: 255}, IPEntry{Route: 1},
	}
}

func checkStateEncoding(t *testing.T, name string, a, b netip.Addr) {
	t.Helper()
	for i, v := range stateValues(name, a, b) {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeState(v)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("value %d (%T): hand encoder wrote\n%s\nencoding/json writes\n%s", i, v, got, want)
		}
	}
}

func TestStateEncodingIsEncodingJSONs(t *testing.T) {
	for _, name := range []string{"", "net1", "a\"b\\c", "<script>&", "\x00\x1f\x7f", "\b\f\n\r\t", "é✓\u2028\u2029", "\xff\xfe", "a\xe2\x80"} {
		checkStateEncoding(t, name, netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::1%eth0"))
		checkStateEncoding(t, name, netip.Addr{}, netip.MustParseAddr("::ffff:192.0.2.1"))
	}
}

func FuzzStateEncodingIsEncodingJSONs(f *testing.F) {
	f.Add("net1", []byte{192, 0, 2, 10}, []byte{0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add("\xff<\u2028", []byte{}, []byte{10, 0, 0, 1})
	f.Fuzz(func(t *testing.T, name string, a, b []byte) {
		x, _ := netip.AddrFromSlice(a)
		y, _ := netip.AddrFromSlice(b)
		checkStateEncoding(t, name, x, y)
	})
}

// A step's raw data is copied as encoding/json copies a RawMessage
// (compacted, HTML-escaped), whatever its spacing and escapes; data that
// is not JSON fails as encoding/json fails.
func FuzzStepDataIsCopiedAsEncodingJSONCopiesIt(f *testing.F) {
	for _, seed := range []string{``, `null`, `{"traffic":"both","egress":[{"source":"10.0.0.5"}]}`,
		" { \"a\" : [ 1 , 2.5e3 , \"<&>\u2028\" ] }\n", "\"\u2028\xe2\x80\xa9\"", `{"a":`, `1 2`, "\"\xff\"", `[]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j := &Journal{Op: OpRelease, Key: "k", Steps: []Step{{Kind: StepNAT, Data: data}, {Kind: StepNAT}}}
		want, wantErr := json.Marshal(j)
		got, err := encodeState(j)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("data %q: encodeState wrote %s (error %v); encoding/json %s (error %v)", data, got, err, want, wantErr)
		}
	})
}
