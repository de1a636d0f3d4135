package install

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// chainSeeds are primaries as people and CNIs write them, and the edges of
// libcni's loader: null and wrong-typed keys, versions, duplicate keys.
var chainSeeds = []string{
	bridgeList, bridgeConf,
	`{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"bridge"},{"type":"external-ip","x":1}]}`,
	`{"name":"n","cniVersion":"0.3.1","plugins":[{"type":"bridge","dns":{"nameservers":["10.0.0.1"]}}]}`,
	`{"name":"n","cniVersions":["0.4.0","1.0.0"],"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersion":"1.0.0","disableCheck":"TRUE","plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"bridge"}],"plugins":[{"type":"ptp"}]}`,
	`{"cniVersion":"0.2.0","name":"one","type":"bridge"}`,
	`{"cniVersion":"1.0.0","name":"one","type":"external-ip"}`,
	`{"cniVersion":"1.0.0","name":null,"type":"bridge"}`,
}

// Whatever primary the runtime loads, what install writes into it loads
// in libcni with our entry last and the primary's plugins before it as
// they were; or install refuses, on one line, as invalid.
func FuzzChainedListLoadsInLibcni(f *testing.F) {
	for _, s := range chainSeeds {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	e, err := ParseEntry([]byte(entryJSON))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, list bool) {
		before, out, err := chainAsInstall(data, list, e)
		if before == nil || (out == nil && err == nil) {
			return // not a primary the runtime loads, or already chained
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("refused %q with %v; want one line of ErrInvalid", data, err)
			}
			return
		}
		l, err := libcni.ConfListFromBytes(out)
		if err != nil {
			t.Fatalf("chained %q into %q, which libcni refuses: %v", data, out, err)
		}
		if last := l.Plugins[len(l.Plugins)-1]; last.Network.Type != PluginType {
			t.Fatalf("chained %q: the last plugin is %q", data, last.Network.Type)
		}
		var kept []string
		for _, p := range before.Plugins {
			if p.Network.Type != PluginType {
				kept = append(kept, string(mustMarshal(p.Network)))
			}
		}
		for k, p := range kept {
			if got := string(mustMarshal(l.Plugins[k].Network)); got != p {
				t.Fatalf("chained %q: plugin %d is %s, was %s", data, k, got, p)
			}
		}
	})
}

// chainAsInstall is install's change to a primary the runtime loads, as
// libcni loaded it before; before is nil for a file the runtime skips.
func chainAsInstall(data []byte, list bool, e *Entry) (*libcni.NetworkConfigList, []byte, error) {
	if list {
		l, err := libcni.ConfListFromBytes(data)
		if err != nil || len(l.Plugins) == 0 {
			return nil, nil, nil // skipped, or refused for its subdirectory
		}
		out, err := chainList("p.conflist", data, e)
		return l, out, err
	}
	c, err := libcni.ConfFromBytes(data)
	if err != nil {
		return nil, nil, nil
	}
	l, err := libcni.ConfListFromConf(c)
	if err != nil {
		return nil, nil, nil
	}
	out, err := listFromConf("p.conf", data, e)
	return l, out, err
}
