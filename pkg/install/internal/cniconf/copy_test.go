package cniconf

import (
	"bytes"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// libcniDir is the source of the libcni that go.mod names.
func libcniDir(t *testing.T) string {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-f", "{{.Dir}}", "github.com/containernetworking/cni/libcni").Output()
	if err != nil {
		t.Fatalf("go list libcni: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// decls prints every top-level func and type of the files, by name,
// without comments: what the compiler sees.
func decls(t *testing.T, files ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, 0) // no comments
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range parsed.Decls {
			var buf bytes.Buffer
			if err := format.Node(&buf, token.NewFileSet(), d); err != nil {
				t.Fatal(err)
			}
			switch d := d.(type) {
			case *ast.FuncDecl:
				out[d.Name.Name] = buf.String()
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						var one bytes.Buffer
						format.Node(&one, token.NewFileSet(), ts)
						out[ts.Name.Name] = one.String()
					}
				}
			}
		}
	}
	return out
}

// The copy is libcni's code: every declaration here is, token for token,
// the declaration of the same name in the libcni that go.mod names. A
// libcni upgrade that changes one fails here until the copy is refreshed.
func TestTheCopyIsLibcnisOwnCode(t *testing.T) {
	dir := libcniDir(t)
	theirs := decls(t, filepath.Join(dir, "conf.go"), filepath.Join(dir, "api.go"))
	ours := decls(t, "libcni.go")
	if len(ours) < 12 {
		t.Fatalf("the copy declares %d names; it should hold libcni's loading (12 or more)", len(ours))
	}
	for name, src := range ours {
		want, ok := theirs[name]
		switch {
		case !ok:
			t.Errorf("%s: libcni has no such declaration", name)
		case src != want:
			t.Errorf("%s differs from libcni's:\n--- ours\n%s\n--- libcni\n%s", name, src, want)
		}
	}
}
