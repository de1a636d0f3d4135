package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/external-ip/external-ip/test/bench/perfwaits"
)

// waits runs -profile-n back-to-back ADD/DEL pairs of each churn mode on
// the back-to-back node under `perf record` of the scheduler's switch and wakeup
// events with kernel stacks, and prints, per row, where the plugin's
// threads waited off the CPU: how often per invocation and how long, by
// the kernel functions they waited in, and who woke them; and, on the
// kernel's side, how long the nf_tables destroy work took from its
// queueing to its end, and how long other tasks (the workers that close
// sockets kept past the exit) waited for it while releasing a netfilter
// socket, which they do holding the namespace's commit lock. Counts do not
// depend on the machine's load the way times do: a wait that a DEL leaves
// to its successor shows as one per ADD in any regime where the ADD comes
// before the DEL's leftovers are done.
func (c *churn) waits(dir string) error {
	b, n := c.b, c.n
	if _, err := os.Stat("/sys/kernel/tracing/events/sched"); err != nil {
		return fmt.Errorf("-waits: perf reads the scheduler's tracepoints from tracefs (mount -t tracefs nodev /sys/kernel/tracing): %w", err)
	}
	data := filepath.Join(dir, "waits.data")
	rec := exec.Command("perf", "record", "-e", "sched:sched_switch", "-e", "sched:sched_wakeup",
		"-e", "workqueue:workqueue_queue_work", "-e", "workqueue:workqueue_execute_end", "-g", "-a", "-q", "-o", data)
	if err := rec.Start(); err != nil {
		return fmt.Errorf("perf record (-waits needs perf): %w", err)
	}
	time.Sleep(500 * time.Millisecond) // perf sets up its buffers before it records
	verbOf := map[int]string{}
	for i, traffic := range c.modes() {
		k := 1_000_000 + 230 + i
		for r := -1; r < b.opts.profileRuns; r++ {
			call := b.eipCall(b.bins["external-ip"], "ADD", n, k, traffic, scenarioIP(230+i, r, false))
			for _, verb := range []string{"ADD", "DEL"} {
				call.command = verb
				x := b.execIn(n, call)
				if x.err != nil {
					logf("waits: %v", x.err)
				}
				if r >= 0 {
					verbOf[x.pid] = churnRow(verb, traffic)
				}
			}
		}
	}
	rec.Process.Signal(syscall.SIGINT)
	rec.Wait()
	script := exec.Command("perf", "script", "-i", data, "-F", "comm,pid,tid,time,event,trace,ip,sym")
	out, err := script.StdoutPipe()
	if err != nil {
		return err
	}
	if err := script.Start(); err != nil {
		return fmt.Errorf("perf script: %w", err)
	}
	w := perfwaits.Parse(out, verbOf)
	if err := script.Wait(); err != nil {
		return fmt.Errorf("perf script: %w", err)
	}
	report := w.String()
	writeFile(filepath.Join(dir, "waits.txt"), report)
	fmt.Print(report)
	return nil
}
