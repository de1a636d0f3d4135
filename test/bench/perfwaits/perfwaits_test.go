package perfwaits

import (
	"strings"
	"testing"
	"time"
)

// perfScript is `perf script -F comm,pid,tid,time,event,trace,ip,sym` as
// perf 6 prints it: the ADD (pid 100) waits twice in the kernel, once
// idle in a runtime futex, and is preempted once; another process waits
// too.
const perfScript = `external-ip 100/101    10.000000:       sched:sched_switch: prev_comm=external-ip prev_pid=101 prev_prio=120 prev_state=D ==> next_comm=swapper/0 next_pid=0 next_prio=120
	ffffffff82248208 __schedule
	ffffffff82248b73 schedule
	ffffffff8224fed0 schedule_timeout
	ffffffff82249d56 wait_for_completion
	ffffffff8138aae0 __flush_work
	ffffffff81fca63b nft_rcv_nl_event
	ffffffff8139f569 notifier_call_chain
	          9ce65 syscall.Close

kworker/1:1-eve    50/50     10.004000:      sched:sched_wakeup: comm=external-ip pid=101 prio=120 target_cpu=001
	ffffffff813a5db1 __traceiter_sched_wakeup

external-ip 100/102    10.005000:       sched:sched_switch: prev_comm=external-ip prev_pid=102 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
	ffffffff82248208 __schedule
	ffffffff82248b73 schedule
	ffffffff81448c0e futex_do_wait
	          4a1c3 runtime.futex.abi0

external-ip 100/101    10.006000:       sched:sched_switch: prev_comm=external-ip prev_pid=101 prev_prio=120 prev_state=R+ ==> next_comm=compile next_pid=7 next_prio=120
	ffffffff82248208 __schedule

external-ip 100/101    10.007000:       sched:sched_switch: prev_comm=external-ip prev_pid=101 prev_prio=120 prev_state=D ==> next_comm=swapper/0 next_pid=0 next_prio=120
	ffffffff82248208 __schedule
	ffffffff82248b73 schedule
	ffffffff82248c3f schedule_preempt_disabled
	ffffffff8224a1b5 __mutex_lock.constprop.0
	ffffffff81fc0d1e nf_tables_valid_genid
	ffffffff81f7cdd1 nfnetlink_rcv_batch

kworker/0:2-eve    60/60     10.008500:      sched:sched_wakeup: comm=external-ip pid=101 prio=120 target_cpu=000

external-ip 200/200    10.009000:       sched:sched_switch: prev_comm=external-ip prev_pid=200 prev_prio=120 prev_state=D ==> next_comm=swapper/0 next_pid=0 next_prio=120
	ffffffff82248208 __schedule
	ffffffff8138aae0 __flush_work
kworker/0:2-eve    60/60     10.010000:      sched:sched_wakeup: comm=external-ip pid=200 prio=120 target_cpu=000
external-ip 300/300    10.011000:    workqueue:workqueue_queue_work: work struct=0xffff8881096e5ca8 function=nf_tables_trans_destroy_work workqueue=events req_cpu=256 cpu=1
kworker/1:3-eve    70/70     10.012000:       sched:sched_switch: prev_comm=kworker/1:3 prev_pid=70 prev_prio=120 prev_state=D ==> next_comm=swapper/1 next_pid=0 next_prio=120
	ffffffff82248208 __schedule
	ffffffff8138aae0 __flush_work
	ffffffff81fca63b nft_rcv_nl_event
	ffffffff8139f569 notifier_call_chain
	ffffffff816dea46 __fput
	ffffffff816dea47 delayed_fput
kworker/1:2-eve    71/71     10.013000: workqueue:workqueue_execute_end: work struct 0xffff8881096e5ca8: function nf_tables_trans_destroy_work
kworker/1:2-eve    71/71     10.013000:      sched:sched_wakeup: comm=kworker/1:3 pid=70 prio=120 target_cpu=001
`

// The waits profile finds each wait of a profiled process in the kernel,
// names it by the frames below the scheduler's, times it to its wakeup
// and names the waker; it leaves out the runtime's idle threads, a
// preempted thread and processes it was not asked about, but for their
// waits in a netfilter socket's release; it times the destroy work.
func TestTheWaitsProfileCountsKernelWaitsPerRow(t *testing.T) {
	w := Parse(strings.NewReader(perfScript), map[int]string{100: "ADD row"})
	flush := w.stats[waitKey{"ADD row", "D __flush_work < nft_rcv_nl_event < notifier_call_chain"}]
	mutex := w.stats[waitKey{"ADD row", "D __mutex_lock.constprop.0 < nf_tables_valid_genid < nfnetlink_rcv_batch"}]
	if flush == nil || flush.n != 1 || flush.total != 4*time.Millisecond || topWaker(flush.wakers) != "kworker" {
		t.Errorf("the flush wait: %+v, want one of 4ms woken by a kworker", flush)
	}
	if mutex == nil || mutex.n != 1 || mutex.total != 1500*time.Microsecond {
		t.Errorf("the commit mutex wait: %+v, want one of 1.5ms", mutex)
	}
	worker := w.stats[waitKey{otherReleases, "D __flush_work < nft_rcv_nl_event < notifier_call_chain"}]
	if worker == nil || worker.n != 1 || worker.total != time.Millisecond {
		t.Errorf("the worker's wait in a socket's release: %+v, want one of 1ms", worker)
	}
	if len(w.stats) != 3 || w.calls["ADD row"] != 1 {
		t.Errorf("stats %v for %v calls, want the two waits of the one ADD and the worker's", w.stats, w.calls)
	}
	if len(w.destroy) != 1 || w.destroy[0] != 2*time.Millisecond {
		t.Errorf("destroy work runs %v, want one of 2ms", w.destroy)
	}
	if out := w.String(); !strings.Contains(out, "1/1") || !strings.Contains(out, "nft_rcv_nl_event") || !strings.Contains(out, "destroy work") {
		t.Errorf("report:\n%s", out)
	}
}
