package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

// The kernel refuses some names (dev_valid_name) and expands others: a name
// with a % is a pattern that dev_alloc_name fills with a free number, so
// the device made is not the one named, and state under dataDir would be
// kept under the pattern.
func TestCheckIfNameRefusesWhatTheKernelRefusesOrExpands(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"eip0", true},
		{"abcdefghijklmno", true},
		{"e-ip_0.x", true},
		{"", false},
		{"abcdefghijklmnop", false},
		{".", false},
		{"..", false},
		{"../outside", false},
		{"eip/0", false},
		{"eip0:1", false},
		{"eip 0", false},
		{"eip\t0", false},
		{"eip\x000", false},
		{"eip\xa00", false},
		{"eip%d", false},
		{"rv%d", false},
		{"%", false},
		{"eip%%", false},
	}
	for _, tt := range tests {
		err := config.CheckIfName("device", tt.name)
		if tt.ok {
			if err != nil {
				t.Errorf("CheckIfName(%q) refused a name the kernel takes as it is: %v", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, config.ErrInvalid) {
			t.Errorf("CheckIfName(%q) = %v, want an error of kind ErrInvalid", tt.name, err)
			continue
		}
		if tt.name != "" && !strings.HasPrefix(err.Error(), "device: ") {
			t.Errorf("CheckIfName(%q) = %q, want it to name the field first", tt.name, err)
		}
	}
}
