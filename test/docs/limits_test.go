package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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

// The README says what an unusable IP in the static list does to each
// verb: the config Load of ADD, CHECK, GC and STATUS refuses it, and
// LoadForDel passes it over, since a DEL must release what the record
// holds whatever the config says.
func TestTheReadmeSaysWhichVerbsRefuseAnUnusableStaticIP(t *testing.T) {
	conf := []byte(`{"cniVersion":"1.0.0","name":"n","type":"external-ip","externalIPs":["127.0.0.1"]}`)
	if _, err := config.Load(conf); err == nil {
		t.Fatal("Load took 127.0.0.1 in externalIPs: the README's row has nothing to say")
	}
	if _, ignored, err := config.LoadForDel(conf); err != nil || len(ignored) != 1 {
		t.Fatalf("LoadForDel with 127.0.0.1 in externalIPs: %v, passed over %v; want it passed over", err, ignored)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `externalIPs` \\|.*$").Find(b)
	if row == nil {
		t.Fatal("README.md has no row for `externalIPs` in its table of keys")
	}
	for _, want := range []string{"ADD, CHECK, GC and STATUS", "DEL passes it over"} {
		if !strings.Contains(string(row), want) {
			t.Errorf("README.md's row for externalIPs says %q, not %q: an unusable static IP fails every verb but DEL, which passes it over", row, want)
		}
	}
}
