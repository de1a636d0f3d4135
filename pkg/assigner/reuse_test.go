package assigner

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
)

// One Assigner serves call after call, as a long-running caller may use
// it: nothing a call learned about the kernel (the holder, its index) is
// taken as true by the next. The holder goes between two calls, as an
// operator's `ip link del` would take it: CHECK must see it gone, and GC
// make it again, rather than both trusting the device an earlier ADD made.
func TestOneAssignerServesAddAddDelGCAndCheckInTurn(t *testing.T) {
	f := newFixture(t)
	a := f.assigner()
	if _, err := a.Add(attA, []netip.Addr{v4a}, nil); err != nil {
		t.Fatalf("Add(attA): %v", err)
	}
	if _, err := a.Add(attB, []netip.Addr{v4b}, nil); err != nil {
		t.Fatalf("Add(attB) on the same Assigner: %v", err)
	}
	if err := a.Del(attA); err != nil {
		t.Fatalf("Del(attA) on the same Assigner: %v", err)
	}
	f.k.deleteLink(t, testDevice)
	if _, err := a.Check(attB); !errors.Is(err, ErrDrift) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Check(attB) once the holder is gone = %v, want ErrDrift saying it is missing", err)
	}
	if err := a.GC("net1", []Attachment{attB}); err != nil {
		t.Fatalf("GC once the holder is gone = %v, want it made again with attB's IP", err)
	}
	if _, err := a.Check(attB); err != nil {
		t.Errorf("Check(attB) after GC = %v, want no drift", err)
	}
	assertState(t, f, holdings{attB: {v4b}})
}

// What an ADD put on the kernel is its own: where the kernel refuses every
// change (no CAP_NET_ADMIN), an ADD undone on a reused Assigner has
// nothing to take off for an IP it never put there, even though an
// earlier ADD through the same Assigner did put it there once.
func TestAnAddUndoneOnAReusedAssignerUndoesOnlyWhatItPut(t *testing.T) {
	f := newFixture(t)
	a := f.assigner()
	if _, err := a.Add(attA, []netip.Addr{v4a}, nil); err != nil {
		t.Fatalf("Add(attA): %v", err)
	}
	if err := a.Del(attA); err != nil {
		t.Fatalf("Del(attA): %v", err)
	}
	refused := Errorf(ErrHost, "operation not permitted")
	f.k.failWith("addAddr", v4a, refused)
	f.k.failWith("delAddr", v4a, refused)
	_, err := a.Add(attB, []netip.Addr{v4a}, nil)
	if !errors.Is(err, ErrHost) || strings.Contains(err.Error(), "rolling back") {
		t.Fatalf("Add the kernel refuses = %v, want the refusal alone, the ADD rolled back", err)
	}
	if exists(t, filepath.Join(f.stateDir(), "journal")) {
		t.Error("the ADD's journal stayed: undoing it asked the kernel to remove an address the ADD never put there")
	}
	assertState(t, f, holdings{})
}

// notCalls are the exported methods that learn nothing in a call of their
// own: Conntrack hands over the queue as the last call left it (what it
// queued; the clean-up runner's drain, which GC and Repair run inside
// their own call, reads and settles the queue alone), Close closes.
var notCalls = map[string]bool{"Conntrack": true, "Close": true}

// TestEveryCallStartsKnowingNothing reads the package's source: every
// other exported method of Assigner must start with a.startCall(), or a
// new one would silently work from what the previous call learned.
func TestEveryCallStartsKnowingNothing(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() || notCalls[fn.Name.Name] || receiver(fn) != "Assigner" {
				continue
			}
			checked++
			if !startsCall(fn) {
				t.Errorf("Assigner.%s does not begin with a.startCall(): it would work from what the previous call learned", fn.Name.Name)
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked %d methods of Assigner, want its ten or more calls: the test reads the wrong files", checked)
	}
}

func receiver(fn *ast.FuncDecl) string {
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	id, _ := typ.(*ast.Ident)
	return id.String()
}

func startsCall(fn *ast.FuncDecl) bool {
	if len(fn.Body.List) == 0 {
		return false
	}
	stmt, ok := fn.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	c, ok := stmt.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "startCall" && len(c.Args) == 0
}
