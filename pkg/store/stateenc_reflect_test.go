package store

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// encodedTypes are the state types that encode themselves. A type given
// an appendJSON method must be listed here (TestEveryHandEncodedTypeIsFilled
// fails otherwise), and TestStateEncodersWriteEveryField then fills its
// every field.
func encodedTypes() []any {
	return []any{&Journal{}, &Record{}, &Steering{}, IPEntry{}, &Netns{}, Step{}}
}

// filler makes non-zero values of every kind, each one different, so that
// a field the encoder drops or swaps with another shows in the output.
type filler struct {
	n int
	t *testing.T
	// plain makes strings that JSON writes without an escape.
	plain bool
}

var (
	addrType   = reflect.TypeFor[netip.Addr]()
	prefixType = reflect.TypeFor[netip.Prefix]()
	rawType    = reflect.TypeFor[json.RawMessage]()
	textType   = reflect.TypeFor[encoding.TextMarshaler]()
)

// fill sets v, of any kind, to a non-zero value; path names it in failures.
func (f *filler) fill(v reflect.Value, path string) {
	f.n++
	switch {
	case v.Type() == addrType:
		v.Set(reflect.ValueOf(f.addr()))
		return
	case v.Type() == prefixType:
		a := f.addr()
		v.Set(reflect.ValueOf(netip.PrefixFrom(a, a.BitLen()-f.n%8)))
		return
	case v.Type() == rawType:
		v.Set(reflect.ValueOf(json.RawMessage(fmt.Sprintf(`{"n":[%d,"<&>"]}`, f.n))))
		return
	case v.Type().Implements(textType) || reflect.PointerTo(v.Type()).Implements(textType):
		f.t.Fatalf("%s: no filler for %s, a TextMarshaler: add one to the test", path, v.Type())
	}
	switch v.Kind() {
	case reflect.String:
		s := fmt.Sprintf("s%d<&>\u2028é\x01\xff\"", f.n)
		if f.plain {
			s = fmt.Sprintf("s%d é", f.n)
		}
		v.SetString(s)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(f.n) + 0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem(), path)
	case reflect.Struct:
		f.fillStruct(v, path)
	case reflect.Slice:
		f.fillSlice(v, path)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for i := range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			f.fill(k, fmt.Sprintf("%s[key %d]", path, i))
			f.fill(e, fmt.Sprintf("%s[%d]", path, i))
			v.SetMapIndex(k, e)
		}
	default:
		f.t.Fatalf("%s: no filler for kind %s: add one to the test", path, v.Kind())
	}
}

func (f *filler) fillStruct(v reflect.Value, path string) {
	for i := range v.NumField() {
		if v.Type().Field(i).IsExported() {
			f.fill(v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	}
}

func (f *filler) fillSlice(v reflect.Value, path string) {
	v.Set(reflect.MakeSlice(v.Type(), 2, 2))
	for i := range 2 {
		f.fill(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
	}
}

// addr alternates between IPv4 and IPv6, each different from the last.
func (f *filler) addr() netip.Addr {
	if f.n%2 == 0 {
		return netip.AddrFrom4([4]byte{192, 0, 2, byte(f.n)})
	}
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(f.n)})
}

// variants are v filled, then v filled but for one exported field (at
// any depth) left zero: between them, every optional field is both
// written and left out, and every field is written by the hand encoder
// in some variant.
func variants(t *testing.T, proto any, plain bool) map[string]any {
	out := map[string]any{}
	full := newFilled(t, proto, plain)
	out["every field"] = full.Interface()
	for _, path := range fieldPaths(full) {
		v := newFilled(t, proto, plain)
		zeroAt(v, path)
		out["every field but "+strings.Join(path, ".")] = v.Interface()
	}
	return out
}

// newFilled is a new value of proto's type, every field filled.
func newFilled(t *testing.T, proto any, plain bool) reflect.Value {
	typ := reflect.TypeOf(proto)
	f := &filler{t: t, plain: plain}
	if typ.Kind() == reflect.Pointer {
		v := reflect.New(typ.Elem())
		f.fill(v.Elem(), typ.Elem().Name())
		return v
	}
	v := reflect.New(typ).Elem()
	f.fill(v, typ.Name())
	return v
}

// fieldPaths lists the exported struct fields reachable in v through
// pointers and structs (not through lists or maps: their elements are
// filled in every variant).
func fieldPaths(v reflect.Value) [][]string {
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.Type() == addrType || v.Type() == prefixType {
		return nil
	}
	var out [][]string
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		out = append(out, []string{sf.Name})
		for _, sub := range fieldPaths(v.Field(i)) {
			out = append(out, append([]string{sf.Name}, sub...))
		}
	}
	return out
}

func zeroAt(v reflect.Value, path []string) {
	for _, name := range path {
		for v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		v = v.FieldByName(name)
	}
	v.Set(reflect.Zero(v.Type()))
}

func TestStateEncodersWriteEveryField(t *testing.T) {
	compared := 0
	for _, proto := range encodedTypes() {
		hand := 0
		for name, v := range variants(t, proto, false) {
			compared++
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%T, %s: encoding/json: %v", proto, name, err)
			}
			got, err := encodeState(v)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%T, %s: the hand encoder wrote\n%s\nencoding/json writes\n%s\n(a field added to the type but not to its appendJSON?)", proto, name, got, want)
			}
			if _, ok := handEncoder(v); ok {
				hand++
			}
		}
		if hand == 0 {
			t.Errorf("%T: no variant went through the hand encoder, so the test compared encoding/json with itself", proto)
		}
	}
	t.Logf("%d values of %d types compared with encoding/json", compared, len(encodedTypes()))
}

// TestEveryHandEncodedTypeIsFilled reads the package's source for
// appendJSON methods, so that a new hand-encoded type cannot be left out
// of encodedTypes.
func TestEveryHandEncodedTypeIsFilled(t *testing.T) {
	checkListed(t, "appendJSON", "encodedTypes", encodedTypes())
}

// checkListed fails for each type of the package's source with a method
// called method that is not among listed (listName).
func checkListed(t *testing.T, method, listName string, listed []any) {
	t.Helper()
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range listed {
		names = append(names, reflect.Indirect(reflect.ValueOf(p)).Type().Name())
	}
	found := 0
	for _, fi := range files {
		name := fi.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != method {
				continue
			}
			found++
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if name := recv.(*ast.Ident).Name; !slices.Contains(names, name) {
				t.Errorf("%s has a %s method but is not in %s, so no test fills its fields", name, method, listName)
			}
		}
	}
	if found == 0 {
		t.Errorf("found no %s method in the package's source: the test reads the wrong files", method)
	}
}
