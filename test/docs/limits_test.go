package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

// The README states how many IPs one attachment may hold: the number a
// user plans with must be the bound the config enforces.
func TestTheReadmesIPLimitIsTheOneTheConfigEnforces(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`At most (\d+) IPs per attachment`).FindSubmatch(b)
	if m == nil {
		t.Fatal(`README.md says nowhere "At most N IPs per attachment"`)
	}
	if n, _ := strconv.Atoi(string(m[1])); n != config.MaxIPs {
		t.Errorf("README.md says at most %d IPs per attachment; the config allows %d", n, config.MaxIPs)
	}
}
