package config_test

import (
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

func TestStandbyDefaultsToFalseAndTakesABool(t *testing.T) {
	if mustLoad(t, netConf(t, nil)).Standby {
		t.Error("standby is on by default: a second node's ADD would no longer be refused")
	}
	for _, v := range []bool{true, false} {
		if got := mustLoad(t, netConf(t, map[string]any{"standby": v})).Standby; got != v {
			t.Errorf("standby %v loaded as %v", v, got)
		}
	}
}

func TestStandbyRefusesWhatIsNotABoolAndNeedsTheProbe(t *testing.T) {
	for _, tt := range []struct {
		name      string
		keys      map[string]any
		kind      error
		fragments []string
	}{
		{"a string", map[string]any{"standby": "yes"}, config.ErrDecode, []string{"standby:", `"yes"`}},
		{"a number", map[string]any{"standby": 1}, config.ErrDecode, []string{"standby:", "1"}},
		{"without a probe", map[string]any{"standby": true, "conflictProbe": "0s"}, config.ErrInvalid, []string{"standby:", "conflictProbe", `"0s"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Load(netConf(t, tt.keys))
			checkErr(t, err, tt.kind, tt.fragments...)
		})
	}
}
