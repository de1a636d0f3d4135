package assigner

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the test binary as a helper process when a process test
// started it (see runHelper), and as the tests otherwise.
func TestMain(m *testing.M) {
	if role := os.Getenv(helperRole); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// runChild runs the helper with a childTB and exits 1 on any failure, after
// running what the helper registered with Cleanup.
func runChild(role string) (code int) {
	c := &childTB{}
	defer func() {
		if r := recover(); r != nil && r != errChildFailed {
			panic(r)
		}
		for i := len(c.cleanups) - 1; i >= 0; i-- {
			c.cleanups[i]()
		}
		if c.failed {
			code = 1
		}
	}()
	runHelper(c, role)
	return 0
}

// errChildFailed unwinds a helper that called Fatal.
var errChildFailed = fmt.Errorf("child failed")

// childTB is the testing.TB of a helper process: failures go to stderr,
// which the parent test shows. Only what the helpers use is implemented;
// the embedded nil TB makes anything else panic loudly.
type childTB struct {
	testing.TB
	failed   bool
	cleanups []func()
}

func (c *childTB) Helper()                 {}
func (c *childTB) Cleanup(f func())        { c.cleanups = append(c.cleanups, f) }
func (c *childTB) Logf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }

func (c *childTB) Errorf(f string, a ...any) {
	c.failed = true
	c.Logf(f, a...)
}

func (c *childTB) Fatalf(f string, a ...any) {
	c.Errorf(f, a...)
	panic(errChildFailed)
}

func (c *childTB) Fatal(a ...any) { c.Fatalf("%s", fmt.Sprint(a...)) }
