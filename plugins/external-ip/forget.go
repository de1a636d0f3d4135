package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/detach"
	"github.com/external-ip/external-ip/pkg/linger"
	"github.com/external-ip/external-ip/pkg/steer"
)

// envForget carries, to the detached child that deletes the conntrack
// entries of targets that left, the state whose queue it works through.
const envForget = "EXTERNAL_IP_FORGET"

// runnerFd is the child's descriptor of the runner lock, which it
// inherits held.
const runnerFd = 3

type forgetJob struct {
	// Runner says the child inherits the runner lock as runnerFd. A job
	// without it comes from a binary of before the runner lock (a DEL
	// that started while this one replaced it): the child then takes the
	// lock itself, and never takes fd 3 for what it is not.
	Runner  bool              `json:"runner,omitempty"`
	DataDir string            `json:"dataDir"`
	Device  string            `json:"device"`
	Log     *announce.PlanLog `json:"log,omitempty"`
}

// startForget starts the clean-up child once the lock is released, when
// this invocation queued one (only on a node with conntrack entries) and
// no runner is draining the queue already (that one takes this entry
// too): the walk of the kernel's conntrack hash then holds neither the
// node's other invocations nor the runtime, which waits for our exit, and
// K DELs start one runner, not K. Its failure is logged: GC and repair
// retry what stays queued.
func startForget(inv *invocation) {
	q := inv.as.Conntrack()
	if !q.Queued() {
		return
	}
	r, err := q.TakeRunner()
	if err == nil && r == nil {
		return
	}
	if err == nil {
		err = detachForget(forgetJob{Runner: true, DataDir: inv.conf.DataDir, Device: inv.conf.Device, Log: inv.logTo}, r)
		r.Close() // the child holds the lock now
	}
	if err != nil {
		inv.log.Warn("conntrack clean-up not started; GC or repair runs it", "error", err)
	}
}

// detachForget starts this binary as a detached child (package detach),
// handing it the runner lock.
func detachForget(job forgetJob, runner *os.File) error {
	b, err := json.Marshal(job)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("starting the conntrack clean-up: %w", err)
	}
	if err := detach.Start(exe, envForget+"="+string(b), runner.Fd()); err != nil {
		return fmt.Errorf("starting the conntrack clean-up %s: %w", exe, err)
	}
	return nil
}

// runForget is the clean-up child's whole life.
func runForget(env string) int {
	var job forgetJob
	if err := json.Unmarshal([]byte(env), &job); err != nil || job.DataDir == "" || job.Device == "" {
		return 1
	}
	log, done, _ := logOrDiscard(job.Log)
	log = log.With("pid", os.Getpid())
	defer done()
	nat := steer.HostNAT()
	// Its ctnetlink socket's release would hold the commit lock through a
	// pending destroy work, as the plugin's would: the sink takes it when
	// one runs; else it is closed here, off every call's path.
	keep := linger.New(linger.Options{Sink: sinkIn(job.DataDir, log, false), Log: log})
	defer func() {
		nat.Linger(keep)
		keep.Done()
	}()
	as := assigner.New(assigner.Options{Device: job.Device, DataDir: job.DataDir, LockTimeout: config.DefaultLockTimeout, Log: log, NAT: nat})
	q := as.Conntrack()
	drain := q.Run
	if job.Runner {
		drain = func() error { return q.Drain(os.NewFile(runnerFd, "conntrack runner lock")) }
	}
	if err := drain(); err != nil {
		return 1 // logged by Drain, and kept in the queue
	}
	log.Debug("conntrack clean-up done")
	return 0
}
