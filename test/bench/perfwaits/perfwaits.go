package perfwaits

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// waitKey is one kind of wait: a row's threads off the CPU in kernel
// functions where.
type waitKey struct{ row, where string }

type waitStat struct {
	n      int
	total  time.Duration
	wakers map[string]int
	calls  map[int]bool // the invocations that waited so
}

// Waits are the off-CPU waits of the profiled invocations.
type Waits struct {
	calls map[string]int // invocations per row
	stats map[waitKey]*waitStat
	// destroy is each run of the nf_tables destroy work, from its
	// queueing to its end.
	destroy []time.Duration
}

// otherReleases is the row of other tasks' waits in a netfilter socket's
// release.
const otherReleases = "other tasks releasing a netfilter socket"

var (
	perfHeader = regexp.MustCompile(`^\s*(.+?)\s+(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)$`)
	switchOut  = regexp.MustCompile(`prev_pid=(\d+) .*prev_state=(\S+) ==>`)
	wakeupOf   = regexp.MustCompile(`\bpid=(\d+)`)
	kworkerNum = regexp.MustCompile(`[/:]\d.*$`)
)

// perfEvent is one event of `perf script` and its stack, innermost first.
type perfEvent struct {
	comm       string
	pid, tid   int
	at         time.Duration
	name, info string
	stack      []string
}

// Parse reads `perf script` output: a thread of a profiled process
// (pid in verbOf) switched out asleep waits from then until its wakeup.
// The Go runtime's idle threads (futex, epoll, nanosleep in a sleeping
// state) are left out: they wait for work, not for the kernel.
func Parse(r io.Reader, verbOf map[int]string) *Waits {
	w := &Waits{calls: map[string]int{}, stats: map[waitKey]*waitStat{}}
	for _, row := range verbOf {
		w.calls[row]++
	}
	type pending struct {
		at  time.Duration
		key waitKey
		pid int
	}
	asleep := map[int]pending{}
	queued := map[string]time.Duration{}
	eachPerfEvent(r, func(e perfEvent) {
		switch e.name {
		case "workqueue:workqueue_queue_work", "workqueue:workqueue_execute_end":
			w.destroyWork(e, queued)
		case "sched:sched_switch":
			m := switchOut.FindStringSubmatch(e.info)
			row, ok := verbOf[e.pid]
			if !ok && slices.Contains(e.stack, "nft_rcv_nl_event") {
				row, ok = otherReleases, true
			}
			if m == nil || !ok || strings.HasPrefix(m[2], "R") {
				return
			}
			where := waitedIn(e.stack)
			if m[2] == "S" && idle(where) {
				return
			}
			tid, _ := strconv.Atoi(m[1])
			asleep[tid] = pending{e.at, waitKey{row, m[2][:1] + " " + where}, e.pid}
		case "sched:sched_wakeup":
			m := wakeupOf.FindStringSubmatch(e.info)
			if m == nil {
				return
			}
			tid, _ := strconv.Atoi(m[1])
			p, ok := asleep[tid]
			if !ok {
				return
			}
			delete(asleep, tid)
			st := w.stats[p.key]
			if st == nil {
				st = &waitStat{wakers: map[string]int{}, calls: map[int]bool{}}
				w.stats[p.key] = st
			}
			st.n++
			st.total += e.at - p.at
			st.wakers[kworkerNum.ReplaceAllString(e.comm, "")]++
			st.calls[p.pid] = true
		}
	})
	return w
}

var workStruct = regexp.MustCompile(`work struct[= ](0x)?([0-9a-f]+)`)

// destroyWork times the nf_tables destroy work from its queueing to its
// end (the kernel queues a pending work once).
func (w *Waits) destroyWork(e perfEvent, queued map[string]time.Duration) {
	m := workStruct.FindStringSubmatch(e.info)
	if m == nil || !strings.Contains(e.info, "nf_tables_trans_destroy_work") {
		return
	}
	if e.name == "workqueue:workqueue_queue_work" {
		queued[m[2]] = e.at
		return
	}
	if at, ok := queued[m[2]]; ok {
		w.destroy = append(w.destroy, e.at-at)
		delete(queued, m[2])
	}
}

// eachPerfEvent calls f for each event of `perf script` output.
func eachPerfEvent(r io.Reader, f func(perfEvent)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur *perfEvent
	flush := func() {
		if cur != nil {
			f(*cur)
		}
		cur = nil
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if fs := strings.Fields(line); cur != nil && len(fs) >= 2 && !perfHeader.MatchString(line) {
				cur.stack = append(cur.stack, fs[1])
				continue
			}
		}
		m := perfHeader.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		flush()
		pid, _ := strconv.Atoi(m[2])
		tid, _ := strconv.Atoi(m[3])
		secs, _ := strconv.ParseFloat(m[4], 64)
		cur = &perfEvent{comm: m[1], pid: pid, tid: tid, at: time.Duration(secs * 1e9), name: m[5], info: m[6]}
	}
	flush()
}

// schedFrames are the scheduler's own frames atop every sleeping stack.
var schedFrames = map[string]bool{
	"__schedule": true, "schedule": true, "schedule_timeout": true, "schedule_preempt_disabled": true,
	"io_schedule": true, "wait_for_completion": true, "__wait_for_common": true, "wait_for_common": true,
	"__cond_resched": true, "preempt_schedule_common": true, "schedule_hrtimeout_range_clock": true,
	"schedule_hrtimeout_range": true, "__traceiter_sched_switch": true,
}

// waitedIn names a sleeping stack by its first three frames below the
// scheduler's: "__flush_work < nft_rcv_nl_event < notifier_call_chain".
func waitedIn(stack []string) string {
	var out []string
	for _, fr := range stack {
		if schedFrames[fr] || strings.HasPrefix(fr, "[") {
			continue
		}
		if out = append(out, fr); len(out) == 3 {
			break
		}
	}
	if len(out) == 0 {
		return "(no stack)"
	}
	return strings.Join(out, " < ")
}

// idle tells a Go runtime thread waiting for work from a wait in the
// kernel.
func idle(where string) bool {
	for _, f := range []string{"futex", "epoll", "nanosleep"} {
		if strings.Contains(where, f) {
			return true
		}
	}
	return false
}

// String prints, per row, each kind of wait with its count per
// invocation, its share of invocations, and its time.
func (w *Waits) String() string {
	var sb strings.Builder
	if len(w.destroy) > 0 {
		d := slices.Sorted(slices.Values(w.destroy))
		fmt.Fprintf(&sb, "nf_tables destroy work, queued to done: %d runs, p50 %s, p95 %s, max %s\n",
			len(d), ms(d[len(d)/2]), ms(d[(len(d)*95-1)/100]), ms(d[len(d)-1]))
	}
	for _, row := range append(slices.Sorted(maps.Keys(w.calls)), otherReleases) {
		n, label, per := w.calls[row], row, "count"
		if n > 0 {
			label, per = fmt.Sprintf("%s (%d invocations)", row, n), "per call, calls that waited so"
		}
		fmt.Fprintf(&sb, "waits off the CPU, %s: %s, total and mean, who woke it, state, kernel functions\n", label, per)
		keys := slices.Collect(maps.Keys(w.stats))
		keys = slices.DeleteFunc(keys, func(k waitKey) bool { return k.row != row })
		slices.SortFunc(keys, func(a, b waitKey) int { return int(w.stats[b].total - w.stats[a].total) })
		for _, k := range keys {
			st := w.stats[k]
			per := fmt.Sprintf("%5.2f %4d/%d", float64(st.n)/float64(n), len(st.calls), n)
			if n == 0 { // other tasks: no invocations to count per
				per = fmt.Sprintf("%5d waits", st.n)
			}
			fmt.Fprintf(&sb, "  %s %9s %9s  %-12s %s\n", per, ms(st.total), ms(st.total/time.Duration(st.n)), topWaker(st.wakers), k.where)
		}
		if len(keys) == 0 {
			sb.WriteString("  none\n")
		}
	}
	return sb.String()
}

func topWaker(wakers map[string]int) string {
	best, n := "", 0
	for _, k := range slices.Sorted(maps.Keys(wakers)) {
		if wakers[k] > n {
			best, n = k, wakers[k]
		}
	}
	return best
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
