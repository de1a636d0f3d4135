// Package plainjson reads JSON documents of a known, plain shape by hand,
// for the few that every plugin invocation decodes: encoding/json builds
// each struct type's field table by reflection on its first use in a
// process, which in a process that lives for one CNI call costs more than
// the decoding itself (the figures are beside each use).
//
// It decides nothing about what a document means, and it never answers
// where encoding/json's rules are subtle: a key spelt in another case, a
// key given twice, an escape in a string or a key, invalid UTF-8, a value
// of another JSON type than its field's, a number that is not a plain
// integer. There a Decoder gives up (OK is false), and the caller decodes
// the whole document with encoding/json instead, which then gives the
// result or the error it always gave. Each caller holds its decoders to
// encoding/json with a differential fuzz test and a test that fills every
// field of its types by reflection.
package plainjson
