package config

import "testing"

// A key of a pointer or a map given twice: encoding/json decodes the
// second value into the first (announce's count and interval both set,
// the two annotation maps merged), so the hand path must give up and
// leave it to encoding/json. netConfSeeds repeated only a string, which
// reads the same either way.
func TestARepeatedObjectKeyOfTheConfigReadsAsEncodingJSONReadsIt(t *testing.T) {
	for _, doc := range []string{
		`{"name":"n","announce":{"count":1},"announce":{"interval":"1s"}}`,
		`{"name":"n","runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"a":"b"},"io.kubernetes.cri.pod-annotations":{"c":"d"}}}`,
	} {
		checkNetConfDecoding(t, []byte(doc))
	}
}

// A result the hand path takes but which may not go out verbatim: a second
// "cniVersion" inside an object the hand path passes over, or invalid
// UTF-8 in a value it passes over. The library's path says "not the same"
// for both (verbatim); the hand path must too, or the plugin would print
// a result that a stricter runtime reads with two versions, or that
// encoding/json would have repaired. No seed had either, so the hand
// path's verbatim check could go unnoticed.
func TestAPrevResultTakenByHandGoesOutVerbatimOnlyWhenTheLibrarysWould(t *testing.T) {
	for _, raw := range []string{
		`{"cniVersion":"1.0.0","x-vendor":{"cniVersion":"0.4.0"}}`,
		`{"cniVersion":"1.0.0","x-vendor":{"CNIVersion":"1.0.0"}}`,
		"{\"cniVersion\":\"1.0.0\",\"x-vendor\":\"\xff\"}",
	} {
		if _, ok := plainResult("1.0.0", []byte(raw)); !ok {
			t.Fatalf("%q: the hand path gave up, so this test would compare the library with itself", raw)
		}
		checkPrevResult(t, "1.0.0", []byte(raw))
	}
}
