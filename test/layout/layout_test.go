// Package layout_test holds the house to its figures, so that they cannot
// regress unseen: no package over its budget of production lines, no
// type with more methods than a reader can hold, a config parser that
// links no kernel library, docs/architecture.md naming every package and
// only tests that exist, and no code citing a tracker's issue number.
package layout_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// root is the repository, from test/layout.
const root = "../.."

// The budgets: production lines per package, methods per type.
const (
	maxLines   = 2500
	maxMethods = 40
)

// pkg is one package of the module: its path inside the module and its
// directory.
type pkg struct{ rel, dir string }

func goTool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// packages lists the module's packages, as go list ./... does.
func packages(t *testing.T) []pkg {
	t.Helper()
	mod := strings.TrimSpace(goTool(t, "list", "-m"))
	var out []pkg
	for _, line := range strings.Split(strings.TrimSpace(goTool(t, "list", "-f", "{{.ImportPath}} {{.Dir}}", "./...")), "\n") {
		path, dir, _ := strings.Cut(line, " ")
		out = append(out, pkg{rel: strings.TrimPrefix(path, mod+"/"), dir: dir})
	}
	if len(out) < 20 {
		t.Fatalf("go list ./... gave %d packages: not the module's", len(out))
	}
	return out
}

// production lists a package's Go files but its tests, whatever their
// build tags.
func production(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
}

func lines(t *testing.T, files []string) int {
	t.Helper()
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), "\n")
	}
	return n
}

func TestNoPackageIsOverItsBudgetOfProductionLines(t *testing.T) {
	sizes := map[string]int{}
	for _, p := range packages(t) {
		sizes[p.rel] = lines(t, production(t, p.dir))
		if sizes[p.rel] > maxLines {
			t.Errorf("%s has %d production lines, over the budget of %d: split it along a seam (docs/architecture.md)", p.rel, sizes[p.rel], maxLines)
		}
	}
	if sizes["pkg/assigner"] < 1000 || sizes["pkg/host"] < 500 {
		t.Fatalf("counted %d lines in pkg/assigner and %d in pkg/host: the count reads the wrong files", sizes["pkg/assigner"], sizes["pkg/host"])
	}
}

// methods counts the methods declared on each type of a package's
// production files, by the receiver's type name.
func methods(t *testing.T, files []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil {
				out[receiver(fn.Recv.List[0].Type)]++
			}
		}
	}
	return out
}

// receiver is the name of a receiver's type: T of T, *T, T[P] or *T[P].
func receiver(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiver(x.X)
	case *ast.IndexExpr:
		return receiver(x.X)
	case *ast.IndexListExpr:
		return receiver(x.X)
	case *ast.Ident:
		return x.Name
	}
	return fmt.Sprintf("%T", e)
}

func TestNoTypeHasMoreMethodsThanItsBudget(t *testing.T) {
	counted := map[string]int{}
	for _, p := range packages(t) {
		for typ, n := range methods(t, production(t, p.dir)) {
			name := p.rel + "." + typ
			counted[name] = n
			if n > maxMethods {
				t.Errorf("%s has %d methods, over the budget of %d: give a part of its work a type of its own", name, n, maxMethods)
			}
		}
	}
	if counted["pkg/assigner.Assigner"] < 10 || counted["pkg/host.Netlink"] < 10 {
		t.Fatalf("counted %d methods of assigner.Assigner and %d of host.Netlink: the count reads the wrong files", counted["pkg/assigner.Assigner"], counted["pkg/host.Netlink"])
	}
}

func TestTheConfigParserLinksNoKernelLibrary(t *testing.T) {
	deps := strings.Fields(goTool(t, "list", "-deps", "./pkg/config"))
	if !slices.ContainsFunc(deps, func(d string) bool { return strings.HasSuffix(d, "/pkg/errkind") }) {
		t.Fatalf("go list -deps ./pkg/config lists %d packages, without pkg/errkind: not config's", len(deps))
	}
	for _, d := range deps {
		if strings.Contains(d, "netlink") || strings.Contains(d, "nftables") {
			t.Errorf("pkg/config links %s: the parser must link only what it parses (a leaf such as pkg/traffic holds the types)", d)
		}
	}
}

func architecture(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTheArchitecturePageNamesEveryPackage(t *testing.T) {
	page := architecture(t)
	for _, p := range packages(t) {
		if !strings.Contains(page, "`"+p.rel+"`") {
			t.Errorf("docs/architecture.md does not name `%s`: say what it owns and where it sits", p.rel)
		}
	}
}

// TestEveryTestTheArchitecturePageCitesExists keeps the invariants' table
// honest: a test renamed or removed leaves an invariant unguarded.
func TestEveryTestTheArchitecturePageCitesExists(t *testing.T) {
	cited := slices.Compact(slices.Sorted(slices.Values(regexp.MustCompile("`(Test[A-Z][A-Za-z0-9]*)`").FindAllString(architecture(t), -1))))
	if len(cited) < 20 {
		t.Fatalf("found %d tests cited in docs/architecture.md: the pattern misses them", len(cited))
	}
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		for _, m := range regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9]*)\(`).FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cited {
		if name := strings.Trim(c, "`"); !defined[name] {
			t.Errorf("docs/architecture.md cites %s, which no test defines", name)
		}
	}
}

// issueNumber is a tracker's number cited in place of the goal itself,
// which a reader of the code cannot follow.
var issueNumber = regexp.MustCompile(`\b[Ii]ssues? #?[0-9]`)

func TestNoCodeCitesAnIssueNumber(t *testing.T) {
	if !issueNumber.MatchString("meets " + "issue" + " 24's goal") {
		t.Fatal("the pattern misses an issue number")
	}
	checked := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if issueNumber.MatchString(line) {
				t.Errorf("%s:%d cites an issue number; say the goal itself: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("read %d Go files: the walk looked in the wrong place", checked)
	}
}
