package config_test

import (
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

// A value of the wrong JSON type is named by its key and its value, as
// the person who wrote the config spells them, not by Go's types.
func TestAValueOfTheWrongTypeIsNamedByItsKeyAndValue(t *testing.T) {
	for _, tt := range []struct {
		keys map[string]any
		want string
	}{
		{map[string]any{"announce": map[string]any{"count": "3"}}, `announce.count: "3" is a JSON string, not a whole number`},
		{map[string]any{"announce": map[string]any{"count": 3.5}}, `announce.count: 3.5 is a JSON number, not a whole number`},
		{map[string]any{"allowedRanges": "10.0.0.0/8"}, `allowedRanges: "10.0.0.0/8" is a JSON string, not a list`},
		{map[string]any{"allowedRanges": []any{"10.0.0.0/8", true}}, `allowedRanges: true is a JSON bool, not a string`},
		{map[string]any{"podAnnotation": []string{"a"}}, `podAnnotation: a JSON array, not a string`},
		{map[string]any{"announce": 7}, `announce: 7 is a JSON number, not an object`},
		// uplinkRouting is decoded on its own, and named as a key of the config.
		{map[string]any{"uplinkRouting": map[string]any{"table": "100"}}, `uplinkRouting.table: "100" is a JSON string, not a whole number`},
		{map[string]any{"uplinkRouting": map[string]any{"priority": 1.5}}, `uplinkRouting.priority: 1.5 is a JSON number, not a whole number`},
		{map[string]any{"uplinkRouting": map[string]any{"mode": false}}, `uplinkRouting.mode: false is a JSON bool, not a string`},
		{map[string]any{"uplinkRouting": map[string]any{"gateways": map[string]any{"eth1": "192.0.2.1"}}}, `uplinkRouting.gateways: "192.0.2.1" is a JSON string, not a list`},
		{map[string]any{"uplinkRouting": "on"}, `uplinkRouting: "on" is a JSON string, not an object`},
	} {
		_, err := config.Load(netConf(t, tt.keys))
		checkErr(t, err, config.ErrDecode, tt.want)
		if err != nil && (strings.Contains(err.Error(), "Go struct") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("error %q names Go's types or spans lines", err)
		}
	}
}
