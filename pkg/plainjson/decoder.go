package plainjson

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Decoder reads one JSON document into zero values. Its methods read the
// next value into their argument; a null leaves the argument as it is, as
// encoding/json leaves a zero value (nil for a pointer, a list or a map).
// After the first thing it does not take, it reads nothing more and OK is
// false.
type Decoder struct {
	b  []byte
	i  int
	ok bool
}

// New is a decoder of b, which has given up already unless b is one JSON
// value.
func New(b []byte) *Decoder {
	return &Decoder{b: b, ok: json.Valid(b)}
}

// OK says whether the decoder took everything it read.
func (d *Decoder) OK() bool { return d.ok }

// GiveUp makes the decoder give up: its caller found what it does not
// take.
func (d *Decoder) GiveUp() { d.ok = false }

// next is the byte the next value starts with, past spaces; 0 at the end
// or once given up.
func (d *Decoder) next() byte {
	for d.ok && d.i < len(d.b) {
		switch c := d.b[d.i]; c {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return c
		}
	}
	return 0
}

// Null consumes a null, if that is what comes next.
func (d *Decoder) Null() bool {
	if d.next() == 'n' {
		d.i += len("null")
		return true
	}
	return false
}

// expect consumes c, or gives up.
func (d *Decoder) expect(c byte) {
	if d.next() != c {
		d.ok = false
		return
	}
	d.i++
}

// Object reads an object whose fields have the JSON names names, calling
// field to read the value of each; every other key's value is passed
// over, as encoding/json passes it over. It gives up on a key given twice,
// on one with an escape, and on one that is not a name but that
// encoding/json could take for one (in another case, or not ASCII).
func (d *Decoder) Object(names []string, field func(name string)) {
	if d.Null() {
		return
	}
	d.expect('{')
	if d.next() == '}' {
		d.i++
		return
	}
	var seen []string
	for d.ok {
		key := string(d.plain())
		d.expect(':')
		switch {
		case !d.ok:
			return
		case containsString(names, key) && !containsString(seen, key):
			seen = append(seen, key)
			field(key)
		case !mayBeAName(names, key):
			d.Skip()
		default:
			d.ok = false
			return
		}
		if d.next() == ',' {
			d.i++
			continue
		}
		d.expect('}')
		return
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// mayBeAName says whether encoding/json could match key, not itself a
// name, to one of names: it matches a key to a name without regard to
// case, with Unicode's simple folding (so "ſ" is an "s").
func mayBeAName(names []string, key string) bool {
	for i := 0; i < len(key); i++ {
		if key[i] >= utf8.RuneSelf {
			return true
		}
	}
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return true
		}
	}
	return false
}

// List reads a list, each element by elem; [] is an empty list, not nil,
// as encoding/json has it.
func List[T any](d *Decoder, p *[]T, elem func(*T)) {
	if d.Null() {
		return
	}
	d.expect('[')
	out := []T{}
	if d.next() == ']' {
		d.i++
		*p = out
		return
	}
	for d.ok {
		var x T
		elem(&x)
		out = append(out, x)
		if d.next() == ',' {
			d.i++
			continue
		}
		d.expect(']')
		*p = out
		return
	}
}

// Ptr reads a value into a new one, by read.
func Ptr[T any](d *Decoder, p **T, read func(*T)) {
	if d.Null() {
		return
	}
	*p = new(T)
	read(*p)
}

// StringMap reads an object of strings, a null value being "" as
// encoding/json has it.
func (d *Decoder) StringMap(p *map[string]string) {
	if d.Null() {
		return
	}
	d.expect('{')
	m := map[string]string{}
	if d.next() == '}' {
		d.i++
		*p = m
		return
	}
	for d.ok {
		key := string(d.plain())
		d.expect(':')
		if _, dup := m[key]; dup {
			d.ok = false
			return
		}
		var v string
		d.Str(&v)
		m[key] = v
		if d.next() == ',' {
			d.i++
			continue
		}
		d.expect('}')
		*p = m
		return
	}
}

// plain is a string's bytes, which must hold no escape and be valid UTF-8
// (encoding/json would replace what is not).
func (d *Decoder) plain() []byte {
	if d.next() != '"' {
		d.ok = false
		return nil
	}
	s := d.b[d.i+1:]
	end := bytes.IndexByte(s, '"')
	if end < 0 || bytes.IndexByte(s[:end], '\\') >= 0 || !utf8.Valid(s[:end]) {
		d.ok = false
		return nil
	}
	d.i += end + 2
	return s[:end]
}

// Str reads a string.
func (d *Decoder) Str(p *string) {
	if !d.Null() {
		*p = string(d.plain())
	}
}

// StrPtr reads a string into a new one.
func (d *Decoder) StrPtr(p **string) { Ptr(d, p, d.Str) }

// Bool reads true or false.
func (d *Decoder) Bool(p *bool) {
	switch d.next() {
	case 'n':
		d.Null()
	case 't':
		*p, d.i = true, d.i+len("true")
	case 'f':
		*p, d.i = false, d.i+len("false")
	default:
		d.ok = false
	}
}

// number is a number's text (json.Valid has checked its form).
func (d *Decoder) number() string {
	if c := d.next(); c != '-' && (c < '0' || c > '9') {
		d.ok = false
		return ""
	}
	start := d.i
	for d.i < len(d.b) && strings.IndexByte("+-.0123456789eE", d.b[d.i]) >= 0 {
		d.i++
	}
	return string(d.b[start:d.i])
}

// Int reads an integer as encoding/json reads one into an int: its text
// parsed in base 10.
func (d *Decoder) Int(p *int) {
	if d.Null() {
		return
	}
	n, err := strconv.ParseInt(d.number(), 10, strconv.IntSize)
	if err != nil {
		d.ok = false
	}
	*p = int(n)
}

// Uint64 reads an integer as encoding/json reads one into a uint64.
func (d *Decoder) Uint64(p *uint64) {
	if d.Null() {
		return
	}
	n, err := strconv.ParseUint(d.number(), 10, 64)
	if err != nil {
		d.ok = false
	}
	*p = n
}

// Text reads a string through UnmarshalText, as encoding/json reads a
// TextUnmarshaler; a refusal gives up, for encoding/json to report.
func Text[T any, P interface {
	*T
	UnmarshalText([]byte) error
}](d *Decoder, p P) {
	if d.Null() {
		return
	}
	s := d.plain()
	if d.ok && p.UnmarshalText(s) != nil {
		d.ok = false
	}
}

// Raw reads any value as its bytes, as encoding/json hands them to a
// json.RawMessage: a null is "null".
func (d *Decoder) Raw(p *json.RawMessage) {
	d.next()
	start := d.i
	d.Skip()
	if d.ok {
		*p = append(json.RawMessage(nil), d.b[start:d.i]...)
	}
}

// Skip passes over any value.
func (d *Decoder) Skip() {
	switch d.next() {
	case '{', '[':
		d.skipNested()
	case '"':
		d.i++
		for d.i < len(d.b) && d.b[d.i] != '"' {
			if d.b[d.i] == '\\' {
				d.i++
			}
			d.i++
		}
		d.i++
	case 't', 'n':
		d.i += len("true")
	case 'f':
		d.i += len("false")
	case 0:
		d.ok = false
	default:
		d.number()
	}
}

// skipNested passes over an object or a list, whose strings may hold
// brackets.
func (d *Decoder) skipNested() {
	depth := 0
	for ; d.i < len(d.b); d.i++ {
		switch d.b[d.i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				d.i++
				return
			}
		case '"':
			for d.i++; d.b[d.i] != '"'; d.i++ {
				if d.b[d.i] == '\\' {
					d.i++
				}
			}
		}
	}
	d.ok = false
}
