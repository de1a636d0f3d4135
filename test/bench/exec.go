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

type nsNetNS = ns.NetNS

// call is one plugin invocation as a runtime makes it.
type call struct {
	bin         string
	args        []string // before the plugin: a wrapper such as strace runs it
	command     string
	containerID string
	ifName      string
	netns       string
	cniArgs     string
	stdin       []byte
	env         []string // extra environment, after the CNI variables
}

// sample is what one invocation cost.
type sample struct {
	wall   time.Duration // fork to wait, stdout read to EOF
	spawn  time.Duration // fork until the child's exec succeeded
	cpu    time.Duration // user + system of the child
	minflt int64         // minor page faults of the child
	err    error
	stdout []byte
	stderr []byte
}

// environ is libcni's invoke.Args.AsEnv: the caller's environment with the
// CNI variables set.
func (b *bench) environ(c call) []string {
	env := make([]string, 0, len(b.env)+8)
	for _, kv := range b.env {
		if !strings.HasPrefix(kv, "CNI_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"CNI_COMMAND="+c.command,
		"CNI_CONTAINERID="+c.containerID,
		"CNI_NETNS="+c.netns,
		"CNI_ARGS="+c.cniArgs,
		"CNI_IFNAME="+c.ifName,
		"CNI_PATH="+b.tmp+"/bin",
	)
	return append(env, c.env...)
}

// execIn runs c from a thread in node's namespace.
func (b *bench) execIn(n *node, c call) sample {
	var s sample
	err := n.ns.Do(func(ns.NetNS) error {
		s = b.exec(c)
		return nil
	})
	if err != nil {
		s.err = err
	}
	return s
}

// exec is libcni's invoke.RawExec.ExecPlugin, with the clock and rusage
// around it: fork from the calling thread, so the plugin starts in that
// thread's network namespace, read stdout to EOF, wait.
func (b *bench) exec(c call) sample {
	p := b.start(c)
	for p.err == nil && !p.read() {
	}
	return p.finish()
}

// proc is one plugin started by the harness.
//
// os/exec given a bytes.Buffer, as libcni gives it, feeds stdin and drains
// stdout from goroutines of the harness. Those must get one of the
// harness's GOMAXPROCS Ps, and a P whose thread is blocked in a system call
// (waiting for its child) is only taken back by Go's sysmon, which sleeps up
// to 10 ms when the process has been idle. With two plugins started at once
// on two CPUs, both sat in read(0) for up to 10 ms with both CPUs idle
// (perf sched: anon_pipe_read; the stdin write came from
// os/exec.(*Cmd).childStdin right after sysmon woke), which made two
// concurrent ADDs look 2.5 times slower than two serial ones. So here stdin
// is a pipe already holding the config and closed, stdout a pipe that the
// launching thread reads itself, stderr a memfd: no goroutine of the
// harness has to run for a plugin to get its config or to finish.
type proc struct {
	c      call
	cmd    *exec.Cmd
	io     *childIO
	t0     time.Time
	spawn  time.Duration
	err    error
	stdout []byte
}

// start forks and execs c, and returns once the exec has succeeded.
func (b *bench) start(c call) *proc {
	p := &proc{c: c}
	p.cmd = exec.Command(c.bin)
	if len(c.args) > 0 {
		p.cmd = exec.Command(c.args[0], c.args[1:]...)
	}
	p.cmd.Env = b.environ(c)
	if p.io, p.err = newChildIO(c.stdin); p.err != nil {
		return p
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = p.io.stdin, p.io.stdoutW, p.io.stderr
	p.t0 = time.Now()
	p.err = p.cmd.Start()
	p.spawn = time.Since(p.t0)
	p.io.closeChildEnds()
	return p
}

// read takes what stdout holds, blocking until there is some, and reports
// whether stdout reached EOF: closed by the plugin and by anything it left
// holding it.
func (p *proc) read() bool {
	buf := make([]byte, 8192)
	for {
		n, err := unix.Read(p.io.stdoutR, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n <= 0 || err != nil {
			return true
		}
		p.stdout = append(p.stdout, buf[:n]...)
		return false
	}
}

// finish waits for the plugin, once stdout is at EOF, and says what it cost.
func (p *proc) finish() sample {
	if p.io != nil {
		defer p.io.close()
	}
	if p.err != nil {
		return sample{err: fmt.Errorf("%s %s: %w", p.c.command, p.c.bin, p.err)}
	}
	err := p.cmd.Wait()
	s := sample{wall: time.Since(p.t0), spawn: p.spawn, stdout: p.stdout, stderr: p.io.readStderr()}
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		s.minflt = ru.Minflt
	}
	if err != nil {
		s.err = p.failure(err, s.stderr)
	}
	return s
}

// failure names a failed invocation by the CNI error it printed, if any.
func (p *proc) failure(err error, stderr []byte) error {
	var e types.Error
	if json.Unmarshal(p.stdout, &e) == nil && e.Msg != "" {
		return fmt.Errorf("%s %s: %w: code %d: %s", p.c.command, p.c.bin, err, e.Code, e.Msg)
	}
	return fmt.Errorf("%s %s: %w: %s %s", p.c.command, p.c.bin, err,
		strings.TrimSpace(string(p.stdout)), strings.TrimSpace(string(stderr)))
}

// launch runs count calls from the calling thread with at most width in
// flight: it forks the next as soon as there is room, and collects each
// plugin as soon as its stdout reaches EOF, so that no finished plugin waits
// for a slower one to be noticed. done gets each call's index and sample.
func (b *bench) launch(count, width int, mk func(int) call, done func(int, sample)) {
	running := map[int]*proc{} // by index
	next := 0
	for next < count || len(running) > 0 {
		if next < count && len(running) < width {
			running[next] = b.start(mk(next))
			next++
			collect(running, 0, done) // a quick look between forks
			continue
		}
		collect(running, -1, done)
	}
}

// collect polls the running plugins' stdout for up to timeout milliseconds
// (-1: until one has something) and finishes those at EOF.
func collect(running map[int]*proc, timeout int, done func(int, sample)) {
	fds := make([]unix.PollFd, 0, len(running))
	idx := make([]int, 0, len(running))
	for i, p := range running {
		if p.err != nil {
			delete(running, i)
			done(i, p.finish())
			continue
		}
		fds = append(fds, unix.PollFd{Fd: int32(p.io.stdoutR), Events: unix.POLLIN})
		idx = append(idx, i)
	}
	if len(fds) == 0 {
		return
	}
	if _, err := unix.Poll(fds, timeout); err != nil && !errors.Is(err, unix.EINTR) {
		logf("poll: %v", err)
		return
	}
	for k, fd := range fds {
		if fd.Revents == 0 {
			continue
		}
		if p := running[idx[k]]; p.read() {
			delete(running, idx[k])
			done(idx[k], p.finish())
		}
	}
}

// childIO is a plugin's stdin, stdout and stderr: plain blocking
// descriptors, which os/exec hands straight to the child.
type childIO struct {
	stdin, stdoutW, stderr *os.File
	stdoutR                int
}

func newChildIO(stdin []byte) (*childIO, error) {
	in, err := filledPipe(stdin)
	if err != nil {
		return nil, err
	}
	var out [2]int
	if err := unix.Pipe2(out[:], unix.O_CLOEXEC); err != nil {
		in.Close()
		return nil, err
	}
	errFD, err := unix.MemfdCreate("stderr", unix.MFD_CLOEXEC)
	if err != nil {
		in.Close()
		unix.Close(out[0])
		unix.Close(out[1])
		return nil, err
	}
	return &childIO{
		stdin: in, stdoutW: os.NewFile(uintptr(out[1]), "stdout"),
		stderr: os.NewFile(uintptr(errFD), "stderr"), stdoutR: out[0],
	}, nil
}

// filledPipe is the read end of a pipe that holds data and whose write end
// is closed: the plugin reads its config and EOF without waiting for anyone.
func filledPipe(data []byte) (*os.File, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	if len(data) > 64<<10 {
		unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, len(data))
	}
	n, err := unix.Write(p[1], data)
	unix.Close(p[1])
	if err == nil && n < len(data) {
		err = fmt.Errorf("%d of %d bytes fit", n, len(data))
	}
	if err != nil {
		unix.Close(p[0])
		return nil, fmt.Errorf("filling stdin: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "stdin"), nil
}

// closeChildEnds drops the harness's copies of the child's stdin and
// stdout, so that stdout reads EOF once the plugin, and anything it left
// holding stdout, is gone.
func (c *childIO) closeChildEnds() {
	c.stdin.Close()
	c.stdoutW.Close()
}

func (c *childIO) readStderr() []byte {
	if _, err := c.stderr.Seek(0, 0); err != nil {
		return nil
	}
	out, _ := io.ReadAll(c.stderr)
	return out
}

func (c *childIO) close() {
	c.stdin.Close()
	c.stdoutW.Close()
	c.stderr.Close()
	unix.Close(c.stdoutR)
}
