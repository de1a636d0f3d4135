package store

import (
	"encoding/json"
	"reflect"
	"testing"
)

// decodedTypes are the state types that decode themselves (decodeHand). A
// type given a decodeHand method must be listed here
// (TestEveryHandDecodedTypeIsFilled fails otherwise).
func decodedTypes() []any {
	return []any{&Record{}, &IPEntry{}}
}

func TestEveryHandDecodedTypeIsFilled(t *testing.T) {
	checkListed(t, "decodeHand", "decodedTypes", decodedTypes())
}

// Every field, written as this package writes it, is read by the hand
// path, which then agrees with encoding/json: a field added to a type
// without its decoder makes the hand path give up (a key it does not
// know), and this test fail.
func TestStateDecodersReadEveryField(t *testing.T) {
	for _, proto := range decodedTypes() {
		for name, v := range variants(t, proto, true) {
			b, err := encodeState(v)
			if err != nil {
				t.Fatal(err)
			}
			got := reflect.New(reflect.TypeOf(proto).Elem())
			if !got.Interface().(handDecoded).decodeHand(b) {
				t.Errorf("%T, %s: the hand decoder gave up on\n%s\n(a field added to the type but not to its decode?)", proto, name, b)
				continue
			}
			want := reflect.New(reflect.TypeOf(proto).Elem())
			if err := json.Unmarshal(b, want.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Interface(), want.Interface()) {
				t.Errorf("%T, %s: from\n%s\nthe hand decoder read %+v\nencoding/json reads %+v", proto, name, b, got.Elem(), want.Elem())
			}
		}
	}
}

// decodingSeeds are documents of every shape the hand path takes or gives
// up on: as written, spaced, with nulls, empty lists, unknown and
// case-folded keys, duplicates, escapes, invalid UTF-8, values of the
// wrong type and numbers of every form.
var decodingSeeds = []string{
	`{"network":"net1","containerID":"c1","ifName":"eth0","ips":["192.0.2.10","2001:db8::1"],"steering":{"traffic":"both","containerAddrs":["10.0.0.5/24"],"egress":[{"source":"10.0.0.5","uplink":"eth1","ip":"192.0.2.10"}],"hairpin":[{"source":"10.0.0.0/24","target":"10.0.0.5"}],"excluded":["10.0.0.0/8"]},"route":200,"owner":"ns a","owned":["192.0.2.10"],"standby":true,"standbyIPs":["192.0.2.11"],"netns":{"path":"/run/netns/x","dev":4,"ino":4026532,"dirDev":25,"dirIno":1}}`,
	` { "network" : "n" , "ips" : [ ] , "steering" : { } } `,
	`{"network":null,"ips":null,"steering":null,"route":null,"standby":null,"netns":null,"owned":[null,"192.0.2.1"]}`,
	`{"steering":{"egress":[null,{}],"hairpin":[{"source":null}]}}`,
	`null`, `{}`, `[]`, `"x"`, `{"network":"a"} x`, `{"network":"a"`, ``,
	`{"Network":"a"}`, `{"NETWORK":"a","network":"b"}`, `{"ſteering":{}}`, `{"ips":["192.0.2.1"],"IPs":["192.0.2.2"]}`,
	`{"network":"a","network":"b"}`, `{"steering":{"traffic":"a"},"steering":{"egress":[]}}`,
	`{"later":1,"network":"a"}`, `{"network":"a","later":{"x":[1,{"y":null}]}}`, `{"":1}`,
	`{"later":"]}\"{[","network":"a","more":[true,false,null,-1.5e3,"\\"]}`, `{"later":{},"later":[]}`, `{"IFNAME":"x"}`, `{"\u212aeepProxy":true}`,
	`{"network":"a\"b"}`, `{"network":"\u0041"}`, `{"ne\u0074work":"a"}`, "{\"network\":\"\xff\"}", `{"network":"é✓"}`,
	`{"network":1}`, `{"ips":"192.0.2.1"}`, `{"ips":[1]}`, `{"ips":["300.0.0.1"]}`, `{"ips":[""]}`, `{"standby":"true"}`, `{"standby":false}`,
	`{"route":1.0}`, `{"route":1e2}`, `{"route":-0}`, `{"route":-7}`, `{"route":9223372036854775808}`, `{"route":"1"}`,
	`{"netns":{"dev":-1}}`, `{"netns":{"dev":18446744073709551615}}`, `{"netns":{"dev":18446744073709551616}}`, `{"netns":[]}`,
	`{"holders":["a","b"],"uplink":"eth1","route":3,"keepProxy":true,"standby":["c"]}`,
	`{"holders":[],"standby":null}`, `{"holders":[null,"a"]}`, `{"holders":"a"}`, `{"Holders":["a"]}`, `{"keepProxy":1}`,
}

// FuzzStateDecodingIsEncodingJSONs holds decodeState to json.Unmarshal
// over any input: the same value, and the same error or none.
func FuzzStateDecodingIsEncodingJSONs(f *testing.F) {
	for _, s := range decodingSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, proto := range decodedTypes() {
			checkDecoding(t, proto, b)
		}
	})
}

func checkDecoding(t *testing.T, proto any, b []byte) (hand bool) {
	t.Helper()
	typ := reflect.TypeOf(proto).Elem()
	got, want := reflect.New(typ), reflect.New(typ)
	err := decodeState(b, got.Interface())
	wantErr := json.Unmarshal(b, want.Interface())
	if errText(err) != errText(wantErr) || !reflect.DeepEqual(got.Interface(), want.Interface()) {
		t.Fatalf("%T from %q: decodeState read %+v (error %v), encoding/json %+v (error %v)", proto, b, got.Elem(), err, want.Elem(), wantErr)
	}
	return reflect.New(typ).Interface().(handDecoded).decodeHand(b)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The seeds hold both kinds: a test whose every document went to
// encoding/json would compare it with itself.
func TestDecodingSeedsTakeBothPaths(t *testing.T) {
	hand, given := 0, 0
	for _, s := range decodingSeeds {
		for _, proto := range decodedTypes() {
			if checkDecoding(t, proto, []byte(s)) {
				hand++
			} else {
				given++
			}
		}
	}
	if hand < 10 || given < 10 {
		t.Errorf("of the seeds, %d went by hand and %d to encoding/json; want at least 10 of each", hand, given)
	}
	t.Logf("%d by hand, %d to encoding/json", hand, given)
}
