package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// call is one plugin invocation as a runtime makes it.
type call struct {
	bin                         string
	args                        []string // before the plugin: a wrapper such as strace runs it
	command, containerID, netns string
	ifName                      string
	stdin                       []byte
	env                         []string // extra environment, after the CNI variables
}

// sample is what one invocation cost.
type sample struct {
	wall           time.Duration // fork to wait, stdout read to EOF
	cpu            time.Duration // user + system of the child
	minflt         int64         // minor page faults of the child
	it             int           // the iteration, for the raw data
	pid            int           // the plugin's process, for the waits profile
	err            error
	stdout, stderr []byte
}

// environ is libcni's invoke.Args.AsEnv: the caller's environment with the
// CNI variables set.
func (b *bench) environ(c call) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CNI_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CNI_COMMAND="+c.command, "CNI_CONTAINERID="+c.containerID, "CNI_NETNS="+c.netns,
		"CNI_ARGS=", "CNI_IFNAME="+c.ifName, "CNI_PATH="+b.tmp+"/bin")
	return append(env, c.env...)
}

// execIn runs c from a thread in node's namespace, so that the plugin
// starts there.
func (b *bench) execIn(n *node, c call) sample {
	var s sample
	if err := n.ns.Do(func(ns.NetNS) error { s = b.exec(c); return nil }); err != nil {
		s.err = err
	}
	return s
}

// exec is libcni's invoke.RawExec.ExecPlugin with the clock and rusage
// around it: fork, read stdout to EOF, wait.
//
// libcni hands os/exec a bytes.Buffer, so goroutines feed stdin and drain
// stdout; with every P's thread blocked waiting for a child, those waited
// up to 10 ms for Go's sysmon (perf sched showed plugins idle in read(0)).
// Here stdin is a pipe already holding the config and closed, stdout a
// pipe this thread reads itself, stderr a memfd: no goroutine of the
// harness has to run for a plugin to get its config or to finish.
func (b *bench) exec(c call) sample {
	argv := append(c.args, c.bin)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = b.environ(c)
	stdin, err := filledPipe(c.stdin)
	if err != nil {
		return sample{err: err}
	}
	defer stdin.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return sample{err: err}
	}
	defer outR.Close()
	errFD, err := unix.MemfdCreate("stderr", unix.MFD_CLOEXEC)
	if err != nil {
		outW.Close()
		return sample{err: err}
	}
	stderr := os.NewFile(uintptr(errFD), "stderr")
	defer stderr.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, outW, stderr
	t0 := time.Now()
	err = cmd.Start()
	outW.Close() // stdout reads EOF once the plugin, and all it left holding stdout, is gone
	if err != nil {
		return sample{err: fmt.Errorf("%s %s: %w", c.command, c.bin, err)}
	}
	s := sample{pid: cmd.Process.Pid, stdout: readAll(int(outR.Fd()))}
	err = cmd.Wait()
	s.wall = time.Since(t0)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.cpu, s.minflt = time.Duration(ru.Utime.Nano()+ru.Stime.Nano()), ru.Minflt
	}
	stderr.Seek(0, 0)
	s.stderr, _ = io.ReadAll(stderr)
	if err != nil {
		s.err = failure(c, err, s.stdout, s.stderr)
	}
	return s
}

// readAll reads fd to EOF with plain blocking reads on this thread (os.File
// would hand the wait to the runtime's poller).
func readAll(fd int) []byte {
	var out []byte
	buf := make([]byte, 8192)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n <= 0 || err != nil {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

// failure names a failed invocation by the CNI error it printed, if any.
func failure(c call, err error, stdout, stderr []byte) error {
	var e types.Error
	if json.Unmarshal(stdout, &e) == nil && e.Msg != "" {
		return fmt.Errorf("%s %s: %w: code %d: %s", c.command, c.bin, err, e.Code, e.Msg)
	}
	return fmt.Errorf("%s %s: %w: %s %s", c.command, c.bin, err, strings.TrimSpace(string(stdout)), strings.TrimSpace(string(stderr)))
}

// filledPipe is the read end of a pipe that holds data and whose write end
// is closed: the plugin reads its config and EOF without waiting for anyone.
func filledPipe(data []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if len(data) > 64<<10 {
		unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, len(data))
	}
	if _, err := w.Write(data); err != nil {
		r.Close()
		return nil, fmt.Errorf("filling stdin: %w", err)
	}
	return r, nil
}
