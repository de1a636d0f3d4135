package plainjson_test

import "testing"

// A key given twice merges in encoding/json where its value is an object
// behind a pointer or a map (the second object is decoded into the first),
// and replaces it where it is a string: the Decoder must give up on both,
// since a reading that replaces would differ on the first kind. The seeds
// held only a repeated string, which reads the same either way, so a
// Decoder that took repeated keys passed them.
func TestARepeatedKeyIsNeverReadDifferentlyFromEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{"in":{"x":1},"in":{"y":2}}`,
		`{"objs":[{"x":1,"x":2}]}`,
		`{"in":{"x":1,"y":2,"x":3}}`,
	} {
		if check(t, []byte(doc)) {
			t.Logf("%s: taken by hand, and read as encoding/json reads it", doc)
		}
	}
}
