package install

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// confInputs are the edges of libcni's loader: wrong types where a string,
// list or bool belongs, JSON null (which decodes into Go zero values without
// error), versions, and plugin entries that are not objects or have no type.
var confInputs = []string{
	`{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`,
	`{"name":"n","plugins":[{"type":"bridge"},{"type":"portmap","capabilities":{"portMappings":true}}]}`,
	`{"name":"","plugins":[{"type":"bridge"}]}`,
	`{"plugins":[{"type":"bridge"}]}`,
	`{"NAME":"n","plugins":[{"type":"bridge"}]}`,
	`{"name":null,"plugins":[{"type":"bridge"}]}`,
	`{"name":5,"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersion":null,"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersion":1,"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersions":["0.4.0","1.0.0"],"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersions":["9.9.9"],"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersions":["x"],"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersions":[""],"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersions":[null],"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersions":null,"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersions":"1.0.0","plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersions":["1.0.0"],"cniVersion":"bad","plugins":[{"type":"bridge"}]}`,
	`{"name":"n","cniVersions":["1.0.0"],"cniVersion":"","plugins":[{"type":"bridge"}]}`,
	`{"name":"n","disableCheck":true,"disableGC":"TRUE","plugins":[{"type":"bridge"}]}`,
	`{"name":"n","disableCheck":"yes","plugins":[{"type":"bridge"}]}`,
	`{"name":"n","disableGC":null,"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","loadOnlyInlinedPlugins":1,"plugins":[{"type":"bridge"}]}`,
	`{"name":"n","loadOnlyInlinedPlugins":true}`,
	`{"name":"n"}`,
	`{"name":"n","plugins":[]}`,
	`{"name":"n","plugins":null}`,
	`{"name":"n","plugins":{"type":"bridge"}}`,
	`{"name":"n","plugins":[null]}`,
	`{"name":"n","plugins":["bridge"]}`,
	`{"name":"n","plugins":[{"type":""}]}`,
	`{"name":"n","plugins":[{"type":5}]}`,
	`{"name":"n","plugins":[{"type":"bridge"},{}]}`,
	`{"name":"n","plugins":[{"type":"bridge","capabilities":{"x":"y"}}]}`,
	`{"name":"n","plugins":[{"Type":"bridge"}]}`,
	`{"cniVersion":"1.0.0","name":"one","type":"bridge"}`,
	`{"cniVersion":"1.0.0","name":"one"}`,
	`{"type":null}`,
	`null`,
	`[]`,
	`"n"`,
	`{"name":"n","plugins":[{"type":"bridge"}]`,
	``,
	` {"name" : "n" , "plugins" : [ {"type":"bridge"} ] } `,
}

// libcniLoads is what findPrimary decided with libcni: a list must load with
// plugins inline, a single config must load with a type.
func libcniLoads(data []byte, list bool) bool {
	if list {
		l, err := libcni.NetworkConfFromBytes(data)
		return err == nil && len(l.Plugins) > 0
	}
	c, err := libcni.NetworkPluginConfFromBytes(data)
	return err == nil && c.Network.Type != ""
}

func agreeWithLibcni(t *testing.T, data []byte) {
	t.Helper()
	for _, list := range []bool{true, false} {
		check := checkPluginConf
		if list {
			check = checkConfList
		}
		err := check(data)
		if want := libcniLoads(data, list); (err == nil) != want {
			t.Errorf("list=%v %q: libcni loads it: %v; ours: %v", list, data, want, err)
		}
	}
}

func TestConfLoaderAgreesWithLibcni(t *testing.T) {
	accepted := 0
	for _, in := range confInputs {
		agreeWithLibcni(t, []byte(in))
		if checkConfList([]byte(in)) == nil {
			accepted++
		}
	}
	// The table must hold both answers, or agreement proves little.
	if accepted == 0 || accepted == len(confInputs) {
		t.Fatalf("%d of %d inputs accepted as lists: the table needs both kinds", accepted, len(confInputs))
	}
}

func FuzzConfLoaderAgreesWithLibcni(f *testing.F) {
	for _, in := range confInputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) { agreeWithLibcni(t, data) })
}

func TestConfFilesListsWhatLibcniLists(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"10-a.conflist", "20-b.conf", "30-c.json", "40-d.txt", "50-e.conf.bak", ".hidden.conf", "noext"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "60-dir.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("10-a.conflist", filepath.Join(dir, "70-link.conf")); err != nil {
		t.Fatal(err)
	}
	got, err := confFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := libcni.ConfFiles(dir, confExts)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range paths {
		want = append(want, filepath.Base(p))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || len(got) != 5 {
		t.Fatalf("confFiles = %q, libcni.ConfFiles = %q (want 5 names each)", got, want)
	}
	if got, err := confFiles(filepath.Join(dir, "missing")); err != nil || got != nil {
		t.Fatalf("missing dir: %q, %v; want no files and no error, as libcni", got, err)
	}
}
