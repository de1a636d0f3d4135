package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// decodeError is the config's decoding error on one line that names the
// key and the value: encoding/json's own names a Go struct and type
// ("Go struct field announceRaw.announce.count of type int"), which says
// nothing to the person who wrote the config.
func decodeError(stdin []byte, err error) error {
	return decodeErrorIn("", stdin, err)
}

// decodeErrorIn is decodeError for a key whose value, raw, is decoded on
// its own (as uplinkRouting is): the fields are named under key, and a
// value of the wrong type for the key itself by key.
func decodeErrorIn(key string, raw []byte, err error) error {
	var typeErr *json.UnmarshalTypeError
	field := key
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		field = strings.TrimPrefix(key+"."+typeErr.Field, ".")
	}
	if typeErr == nil || field == "" {
		if key != "" {
			err = fmt.Errorf("%s: %w", key, err)
		}
		return decodef("decoding network config: %v", err)
	}
	kind, _, _ := strings.Cut(typeErr.Value, " ") // "number 3.5": the number's text follows
	got := "a JSON " + kind
	if v := literalBefore(raw, typeErr.Offset); v != "" {
		got = v + " is " + got
	}
	return decodef("decoding network config: %s: %s, not %s", field, got, jsonKind(typeErr.Type))
}

// literalBefore is the JSON literal (string, number, true, false, null)
// that ends at offset, where encoding/json reports a literal of the wrong
// type, or "" when the bytes there are not one (an object or a list).
func literalBefore(stdin []byte, offset int64) string {
	if offset <= 0 || offset > int64(len(stdin)) {
		return ""
	}
	head := bytes.TrimRight(stdin[:offset], " \t\r\n")
	start := bytes.LastIndexAny(head, ":[,")
	lit := bytes.TrimSpace(head[start+1:])
	if len(lit) == 0 || len(lit) > 64 || lit[0] == '{' || lit[0] == '[' || !json.Valid(lit) {
		return ""
	}
	return string(lit)
}

// jsonKind says what JSON a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}
