package detach

import (
	"os"
	"syscall"
)

// Start forks and execs exe with no arguments, in a session of its own,
// with /dev/null on descriptors 0 to 2 and extra from 3 on, "/" as its
// working directory and our environment plus env (a "KEY=value" that
// tells the child what it is). It returns once exe has started.
//
// syscall.ForkExec rather than os/exec: an ADD starts an announcer every
// time, and os/exec also forks a throw-away child once per process to
// probe for pidfd support and opens /dev/null three times (figure:
// docs/performance.md, "Figures behind design choices").
func Start(exe, env string, extra ...uintptr) error {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	files := append([]uintptr{null.Fd(), null.Fd(), null.Fd()}, extra...)
	_, err = syscall.ForkExec(exe, []string{exe}, &syscall.ProcAttr{
		Env:   append(os.Environ(), env),
		Files: files,
		Dir:   "/",
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	return err
}
