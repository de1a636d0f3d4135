package assigner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The process tests re-run this test binary as plugin invocations: real
// processes, each with its own file descriptors and flock, sharing one data
// directory and one fake host kept in a file.
const (
	helperRole     = "EXTERNAL_IP_TEST_HELPER"
	helperDataDir  = "EXTERNAL_IP_TEST_DATADIR"
	helperKernel   = "EXTERNAL_IP_TEST_KERNEL"
	helperWorker   = "EXTERNAL_IP_TEST_WORKER"
	helperSeed     = "EXTERNAL_IP_TEST_SEED"
	helperOps      = "EXTERNAL_IP_TEST_OPS"
	helperOut      = "EXTERNAL_IP_TEST_OUT"
	helperScenario = "EXTERNAL_IP_TEST_SCENARIO"
	helperStep     = "EXTERNAL_IP_TEST_STEP"
)

// runHelper is the body of a child process that a process test started;
// TestMain dispatches to it, so that it is never counted as a test.
func runHelper(t testing.TB, role string) {
	k := newFakeKernel(t)
	if err := k.persistTo(os.Getenv(helperKernel)); err != nil {
		t.Fatalf("child: sharing the fake host: %v", err)
	}
	f := &fixture{t: t, k: k, opts: Options{Device: testDevice, DataDir: os.Getenv(helperDataDir), LockTimeout: time.Minute}}
	switch role {
	case "random":
		helperRandom(t, f)
	case "hold":
		helperHold(t, f)
	case "crash":
		helperCrash(t, f)
	default:
		t.Fatalf("child: unknown role %q", role)
	}
}

// helperRandom runs random ADDs and DELs and writes the records it expects
// to survive to the output file.
func helperRandom(t testing.TB, f *fixture) {
	worker, _ := strconv.Atoi(os.Getenv(helperWorker))
	seed, _ := strconv.ParseUint(os.Getenv(helperSeed), 10, 64)
	ops, _ := strconv.Atoi(os.Getenv(helperOps))
	rng := rand.New(rand.NewPCG(seed, uint64(worker)))
	res := childResult{Start: time.Now()}
	mine, err := randomOps(rng, worker, ops, ipPool(), func(op string, att Attachment, ips []netip.Addr) error {
		a := f.assigner()
		if op == "del" {
			return a.Del(att)
		}
		_, err := a.Add(att, ips, nil)
		return err
	})
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	res.End = time.Now()
	for att, ips := range mine {
		res.Records = append(res.Records, record{Attachment: att, IPs: ips})
	}
	b, err := json.Marshal(res)
	if err == nil {
		err = os.WriteFile(os.Getenv(helperOut), b, 0o600)
	}
	if err != nil {
		t.Fatalf("child: writing what it holds: %v", err)
	}
}

// childResult is what a random child reports: the records it expects to
// survive, and when it ran, to show that the children overlapped.
type childResult struct {
	Records []record  `json:"records"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
}

// helperHold adds attA, and with the lock held says "locked" on stdout and
// waits for stdin to close.
func helperHold(t testing.TB, f *fixture) {
	a := f.assigner()
	a.step = func(step string) {
		if step == "record" {
			fmt.Println("locked")
			io.Copy(io.Discard, os.Stdin)
		}
	}
	if _, err := a.Add(attA, []netip.Addr{v4b}, nil); err != nil {
		t.Fatalf("child: Add while holding the lock: %v", err)
	}
}

// helperCrash runs a crash scenario's operation and kills itself with
// SIGKILL at the given step: no deferred function runs, and only the kernel
// releases the flock.
func helperCrash(t testing.TB, f *fixture) {
	sc, _ := strconv.Atoi(os.Getenv(helperScenario))
	n, _ := strconv.Atoi(os.Getenv(helperStep))
	a := f.assigner()
	seen := 0
	a.step = func(string) {
		if seen == n {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		seen++
	}
	crashScenarios[sc].op(a)
	t.Fatalf("child: the operation finished before step %d", n)
}

// child returns a command re-running this test binary in role.
func child(ctx context.Context, role, dataDir, kernel string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), helperRole+"="+role, helperDataDir+"="+dataDir, helperKernel+"="+kernel)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// sharedFixture is a fixture on the fake host kept in a file, as the
// children see it.
func sharedFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	f := newFixture(t)
	path := filepath.Join(t.TempDir(), "host.json")
	if err := f.k.persistTo(path); err != nil {
		t.Fatalf("sharing the fake host: %v", err)
	}
	return f, path
}

func TestConcurrentProcessesKeepTheIndexEqualToTheRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 12 processes; skipped with -short")
	}
	const children, ops = 12, 30
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	f, kernel := sharedFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cmds := make([]*exec.Cmd, children)
	outs := make([]string, children)
	for i := range children {
		outs[i] = filepath.Join(t.TempDir(), "out.json")
		cmds[i] = child(ctx, "random", f.opts.DataDir, kernel,
			helperWorker+"="+strconv.Itoa(i), helperSeed+"="+strconv.FormatUint(seed, 10),
			helperOps+"="+strconv.Itoa(ops), helperOut+"="+outs[i])
		cmds[i].Stdout, cmds[i].Stderr = new(limitedBuffer), new(limitedBuffer)
		if err := cmds[i].Start(); err != nil {
			t.Fatalf("starting child %d: %v", i, err)
		}
	}
	var all []holdings
	var ran []childResult
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d (seed %d): %v\n%s%s", i, seed, err, cmd.Stdout, cmd.Stderr)
		}
		var res childResult
		decodeFile(t, outs[i], &res)
		h := holdings{}
		for _, r := range res.Records {
			h[r.Attachment] = r.IPs
		}
		all = append(all, h)
		ran = append(ran, res)
	}
	if !overlapped(ran) {
		t.Errorf("no two children ran at the same time, so the lock was never contended: %+v", ran)
	}

	want := merge(all)
	assertState(t, f, want)
	for att := range want {
		f.del(att)
	}
	assertState(t, f, holdings{})
}

// holdLock starts a child that adds attA and waits, holding the lock, in
// its change; release lets it finish and says how it ended.
func holdLock(t *testing.T, f *fixture, kernel string) (release func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	holder := child(ctx, "hold", f.opts.DataDir, kernel)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(limitedBuffer)
	holder.Stderr = stderr
	if err := holder.Start(); err != nil {
		t.Fatalf("starting the child that holds the lock: %v", err)
	}
	locked := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "locked\n" {
			err = fmt.Errorf("child said %q", line)
		}
		locked <- err
		io.Copy(io.Discard, stdout)
	}()
	select {
	case err := <-locked:
		if err != nil {
			stdin.Close()
			holder.Wait()
			t.Fatalf("the child never held the lock: %v\n%s", err, stderr)
		}
	case <-ctx.Done():
		t.Fatalf("the child never held the lock\n%s", stderr)
	}
	return func() error {
		defer cancel()
		stdin.Close()
		if err := holder.Wait(); err != nil {
			return fmt.Errorf("the child holding the lock: %w\n%s", err, stderr)
		}
		return nil
	}
}

func TestLockTimeoutWhileAnotherProcessHoldsTheLock(t *testing.T) {
	f, kernel := sharedFixture(t)
	release := holdLock(t, f, kernel)
	impatient := *f
	impatient.opts.LockTimeout = 100 * time.Millisecond
	start := time.Now()
	_, err := impatient.assigner().Add(attC, []netip.Addr{v4c}, nil)
	took := time.Since(start)
	if !errors.Is(err, ErrLockTimeout) {
		t.Errorf("Add while another process holds the lock = %v, want ErrLockTimeout", err)
	}
	if took < 100*time.Millisecond || took > 2*time.Second {
		t.Errorf("Add gave up after %v, want about the 100ms lock timeout", took)
	}

	if err := release(); err != nil {
		t.Fatal(err)
	}
	f.add(attC, v4c)
	assertState(t, f, holdings{attA: {v4b}, attC: {v4c}})
}

// limitedBuffer keeps the first 64 KiB a child writes, for the failure
// message.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 64<<10 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

func overlapped(ran []childResult) bool {
	for i, a := range ran {
		for _, b := range ran[i+1:] {
			if a.Start.Before(b.End) && b.Start.Before(a.End) {
				return true
			}
		}
	}
	return false
}

func TestKillDashNineAtAnyStepIsRepairedByTheNextProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process per step; skipped with -short")
	}
	stranger := Attachment{Network: "net9", ContainerID: "nobody", IfName: "eth0"}
	for sc, s := range crashScenarios {
		steps := s.steps(t)
		for n, step := range steps {
			t.Run(fmt.Sprintf("%s/killed at %s (step %d)", s.name, step, n+1), func(t *testing.T) {
				f, kernel := sharedFixture(t)
				pre := s.setupOn(f)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cmd := child(ctx, "crash", f.opts.DataDir, kernel,
					helperScenario+"="+strconv.Itoa(sc), helperStep+"="+strconv.Itoa(n))
				out := new(limitedBuffer)
				cmd.Stdout, cmd.Stderr = out, out
				err := cmd.Run()
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("the child was not killed at step %d: %v\n%s", n, err, out)
				}

				if err := f.assigner().Del(stranger); err != nil {
					t.Fatalf("the process after the kill: %v", err)
				}
				assertState(t, f, s.expect(steps, n, false, pre))
			})
		}
	}
}
