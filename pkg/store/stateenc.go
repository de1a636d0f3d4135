package store

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The state files an ADD and a DEL write (journal, record, index entry)
// encode themselves: encoding/json builds an encoder for each type by
// reflection on its first use in a process, and for the journal's types
// that cost every invocation more than all the state encoding does once
// built (figure: docs/performance.md, "Figures behind design choices").
// They write exactly the bytes json.Marshal writes
// (FuzzStateEncodingIsEncodingJSONs compares them, and
// TestStateEncodersWriteEveryField fills every field by reflection, so a
// field added without its encoder fails), so files written by
// either read the same, and writeJSON still sees an unchanged file as
// unchanged. Reading is statedec.go's.

// stateEncoder is a state file's value that encodes itself.
type stateEncoder interface {
	appendJSON(b []byte) []byte
}

// encodeState is json.Marshal(v), by hand where v knows how. A journal
// with a step whose raw data is not JSON goes to encoding/json, for its
// error.
func encodeState(v any) ([]byte, error) {
	if e, ok := handEncoder(v); ok {
		return e.appendJSON(nil), nil
	}
	return json.Marshal(v)
}

// handEncoder is v's own encoder, when encodeState uses it for v.
func handEncoder(v any) (stateEncoder, bool) {
	if j, ok := v.(*Journal); ok && slices.ContainsFunc(j.Steps, badData) {
		return nil, false
	}
	e, ok := v.(stateEncoder)
	return e, ok
}

func (j *Journal) appendJSON(b []byte) []byte {
	b = appendKey(b, '{', "op")
	b = appendString(b, j.Op)
	b = appendKey(b, ',', "key")
	b = appendString(b, j.Key)
	b = appendKey(b, ',', "record")
	b = j.Record.appendJSON(b)
	b = appendKey(b, ',', "touch")
	b = appendAddrs(b, j.Touch)
	if len(j.Uplinks) > 0 {
		b = appendKey(b, ',', "uplinks")
		b = appendByAddr(b, j.Uplinks, appendString)
	}
	if j.Old != nil {
		b = appendKey(b, ',', "old")
		b = j.Old.appendJSON(b)
	}
	if len(j.OldUplinks) > 0 {
		b = appendKey(b, ',', "oldUplinks")
		b = appendByAddr(b, j.OldUplinks, appendString)
	}
	if len(j.OldIPs) > 0 {
		b = appendByAddr(appendKey(b, ',', "oldIPs"), j.OldIPs, func(b []byte, e IPEntry) []byte { return e.appendJSON(b) })
	}
	if len(j.Proxied) > 0 {
		b = appendAddrs(appendKey(b, ',', "proxied"), j.Proxied)
	}
	if len(j.Steps) > 0 {
		b = appendList(appendKey(b, ',', "steps"), j.Steps, func(b []byte, s Step) []byte { return s.appendJSON(b) })
	}
	return append(b, '}')
}

// badData says that s's data is not JSON, which encoding/json refuses to
// copy.
func badData(s Step) bool { return len(s.Data) > 0 && !json.Valid(s.Data) }

// appendJSON encodes s, whose data handEncoder has found to be JSON. Every
// release of a steered attachment journals one (a DEL's): encoding/json
// took 0.085 ms of each DEL to build the encoders of the journal's types
// (profile of 300 steered IPv4 DELs at an exec floor of 1.5 ms; end to
// end, with the hand decoder of statedec.go: see there).
func (s Step) appendJSON(b []byte) []byte {
	b = appendString(appendKey(b, '{', "kind"), s.Kind)
	if len(s.Data) > 0 {
		b = appendRaw(appendKey(b, ',', "data"), s.Data)
	}
	return append(b, '}')
}

// appendRaw copies raw, which is JSON, as encoding/json copies a
// RawMessage: compacted, and <, >, &, U+2028 and U+2029 escaped.
func appendRaw(b []byte, raw json.RawMessage) []byte {
	var compact, escaped bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		panic("store: step data that handEncoder found to be JSON does not compact: " + err.Error())
	}
	json.HTMLEscape(&escaped, compact.Bytes())
	return append(b, escaped.Bytes()...)
}

// appendJSON encodes r; a nil record is null, as in a release's journal.
func (r *Record) appendJSON(b []byte) []byte {
	if r == nil {
		return append(b, "null"...)
	}
	b = appendKey(b, '{', "network")
	b = appendString(b, r.Network)
	b = appendKey(b, ',', "containerID")
	b = appendString(b, r.ContainerID)
	b = appendKey(b, ',', "ifName")
	b = appendString(b, r.IfName)
	b = appendKey(b, ',', "ips")
	b = appendAddrs(b, r.IPs)
	if r.Steering != nil {
		b = appendKey(b, ',', "steering")
		b = r.Steering.appendJSON(b)
	}
	if r.Route != 0 {
		b = strconv.AppendInt(appendKey(b, ',', "route"), int64(r.Route), 10)
	}
	if r.Owner != "" {
		b = appendString(appendKey(b, ',', "owner"), r.Owner)
	}
	if len(r.Owned) > 0 {
		b = appendAddrs(appendKey(b, ',', "owned"), r.Owned)
	}
	if r.Standby {
		b = append(appendKey(b, ',', "standby"), "true"...)
	}
	if len(r.StandbyIPs) > 0 {
		b = appendAddrs(appendKey(b, ',', "standbyIPs"), r.StandbyIPs)
	}
	if r.Netns != nil {
		b = r.Netns.appendJSON(appendKey(b, ',', "netns"))
	}
	return append(b, '}')
}

func (n *Netns) appendJSON(b []byte) []byte {
	b = appendString(appendKey(b, '{', "path"), n.Path)
	b = strconv.AppendUint(appendKey(b, ',', "dev"), n.Dev, 10)
	b = strconv.AppendUint(appendKey(b, ',', "ino"), n.Ino, 10)
	b = strconv.AppendUint(appendKey(b, ',', "dirDev"), n.DirDev, 10)
	b = strconv.AppendUint(appendKey(b, ',', "dirIno"), n.DirIno, 10)
	return append(b, '}')
}

func (s *Steering) appendJSON(b []byte) []byte {
	sep := byte('{')
	if s.Traffic != "" {
		b = appendString(appendKey(b, sep, "traffic"), s.Traffic)
		sep = ','
	}
	if len(s.Container) > 0 {
		b = appendList(appendKey(b, sep, "containerAddrs"), s.Container, func(b []byte, p netip.Prefix) []byte { return appendText(b, p) })
		sep = ','
	}
	if len(s.Egress) > 0 {
		b = appendList(appendKey(b, sep, "egress"), s.Egress, appendEgress)
		sep = ','
	}
	if len(s.Hairpin) > 0 {
		b = appendList(appendKey(b, sep, "hairpin"), s.Hairpin, appendHairpin)
		sep = ','
	}
	if len(s.Excluded) > 0 {
		b = appendList(appendKey(b, sep, "excluded"), s.Excluded, func(b []byte, p netip.Prefix) []byte { return appendText(b, p) })
		sep = ','
	}
	if sep == '{' {
		b = append(b, '{')
	}
	return append(b, '}')
}

func appendEgress(b []byte, r EgressRule) []byte {
	b = appendText(appendKey(b, '{', "source"), r.Source)
	b = appendString(appendKey(b, ',', "uplink"), r.Uplink)
	b = appendText(appendKey(b, ',', "ip"), r.IP)
	return append(b, '}')
}

func appendHairpin(b []byte, r HairpinRule) []byte {
	b = appendText(appendKey(b, '{', "source"), r.Source)
	b = appendText(appendKey(b, ',', "target"), r.Target)
	return append(b, '}')
}

func (e IPEntry) appendJSON(b []byte) []byte {
	b = appendKey(b, '{', "holders")
	if e.Holders == nil {
		b = append(b, "null"...)
	} else {
		b = appendList(b, e.Holders, appendString)
	}
	if e.Uplink != "" {
		b = appendString(appendKey(b, ',', "uplink"), e.Uplink)
	}
	if e.Route != 0 {
		b = strconv.AppendInt(appendKey(b, ',', "route"), int64(e.Route), 10)
	}
	if e.KeepProxy {
		b = append(appendKey(b, ',', "keepProxy"), "true"...)
	}
	if len(e.Standby) > 0 {
		b = appendList(appendKey(b, ',', "standby"), e.Standby, appendString)
	}
	return append(b, '}')
}

// appendKey writes sep and "name":.
func appendKey(b []byte, sep byte, name string) []byte {
	return append(appendString(append(b, sep), name), ':')
}

// appendAddrs is a list of addresses, null when nil as encoding/json has it.
func appendAddrs(b []byte, as []netip.Addr) []byte {
	if as == nil {
		return append(b, "null"...)
	}
	return appendList(b, as, func(b []byte, a netip.Addr) []byte { return appendText(b, a) })
}

func appendList[T any](b []byte, xs []T, f func([]byte, T) []byte) []byte {
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = f(b, x)
	}
	return append(b, ']')
}

// appendByAddr is a map keyed by address, its keys sorted as
// encoding/json sorts them, each value written by f.
func appendByAddr[V any](b []byte, m map[netip.Addr]V, f func([]byte, V) []byte) []byte {
	keys := make([]string, 0, len(m))
	by := make(map[string]V, len(m))
	for a, v := range m {
		k, _ := a.MarshalText()
		keys = append(keys, string(k))
		by[string(k)] = v
	}
	slices.Sort(keys)
	sep := byte('{')
	for _, k := range keys {
		b = f(appendKey(b, sep, k), by[k])
		sep = ','
	}
	if sep == '{' {
		b = append(b, '{')
	}
	return append(b, '}')
}

// appendText is a value's MarshalText as a JSON string, as encoding/json
// writes a TextMarshaler.
func appendText[T interface{ MarshalText() ([]byte, error) }](b []byte, v T) []byte {
	t, _ := v.MarshalText() // netip's never fail
	return appendString(b, string(t))
}

// appendString writes s as a JSON string the way encoding/json does: <, >
// and & escaped (its HTML-safe default), control characters as \b, \f,
// \n, \r, \t or \u00XX, invalid UTF-8 as \ufffd, and U+2028 and U+2029
// escaped.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || strings.IndexByte("<>&", c) >= 0:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
