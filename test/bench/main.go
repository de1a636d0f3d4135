// Command bench measures what external-ip costs on a pod's start-up path:
// ADD and DEL interleaved with the exec floor, the CNI noop plugin,
// host-local and portmap, with traffic steering on and off, and with
// attachments already held.
//
// It runs as root, in network namespaces it makes (a node with an uplink
// veth to a LAN namespace, as test/netns does), with state on a tmpfs. It
// execs binaries as libcni does (environment, config on stdin, stdout read
// to EOF, wait) from an OS thread inside the node namespace. It prints
// progress on stderr and the tables on stdout; with -out DIR it writes
// DIR/benchmark.svg and DIR/benchmark.csv (every sample). The analysis in
// docs/performance.md is written by a person from those.
//
//	go run ./test/bench -out docs     # the full run (make bench)
//	go run ./test/bench -quick        # a few iterations, to try a change
//	go run ./test/bench -quick -strace -perf -inittrace
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	n, warmup, fillWorkers int
	held4, held6           []int
	conntrack, concurrent  int
	uplinkRounds           int
	churnRounds            int
	// churnOnly runs the exec floor, host-local, the empty node's rows
	// and the churn rows, and nothing after the iterations.
	churnOnly bool
	out, src  string
	// ab is the tree of -ab's build B.
	ab   string
	seed uint64
	// Profiling hooks: each runs profileRuns ADDs of the profiled
	// binaries under the tool after the iterations.
	strace, perf, inittrace bool
	waits                   bool
	straceDel               bool
	profileRuns             int
	// The pool rows (pools.go, package poolrows): with the rest, or
	// alone; the build of poolsBaseline is the plugin before pools
	// (beforePools by default).
	pools, poolsOnly     bool
	poolsBaseline        string
	standby, standbyOnly bool // the standby rows (standby.go): with the rest, or alone
	standbyRounds        int
}

func main() {
	o := parseFlags()
	if os.Geteuid() != 0 {
		fatalf("bench needs root: it creates network namespaces and mounts a tmpfs; run it with sudo")
	}
	b, err := newBench(o)
	if err != nil {
		fatalf("%v", err)
	}
	// Namespaces, mount and temp dir go on every exit path, ^C and a
	// closed stdout (| head) included.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)
	go func() {
		s := <-sig
		logf("%v: cleaning up", s)
		b.close()
		os.Exit(130)
	}()
	err = b.run()
	if b.close(); err != nil {
		fatalf("%v", err)
	}
}

func parseFlags() options {
	var o options
	var held4, held6 string
	quick := flag.Bool("quick", false, "a short run to try a change: -n 10, 100 addresses held, 3 profile runs")
	flag.IntVar(&o.n, "n", 200, "recorded iterations of the interleaved scenarios")
	flag.IntVar(&o.warmup, "warmup", 3, "iterations run first and not recorded")
	flag.StringVar(&o.out, "out", "", "directory for benchmark.svg and benchmark.csv (none: print only)")
	flag.StringVar(&held4, "held", "1000,10000", "IPv4 attachments held on a node of their own, one held-node scenario per count (comma list)")
	flag.StringVar(&held6, "held6", "1000,10000", "IPv6 attachments held, as -held")
	flag.IntVar(&o.conntrack, "conntrack", 100_000, "unrelated conntrack entries of each family on a node of their own, whose steered DEL queues a clean-up that walks them (0: no such node)")
	flag.IntVar(&o.concurrent, "concurrent", 64, "largest batch of concurrent ADDs and DELs against serial on the conntrack node, after the iterations (0: none)")
	flag.IntVar(&o.uplinkRounds, "uplink-rounds", 5, "rounds per iteration of the uplink rows, each with its baseline (their paired difference needs more samples)")
	flag.IntVar(&o.churnRounds, "churn-rounds", 5, "rounds per iteration of the churn rows: ADD/DEL pairs back to back, and replacements on the cycling node")
	flag.BoolVar(&o.churnOnly, "churn-only", false, "only the exec floor, host-local, the empty node's rows and the churn rows (no portmap, held, conntrack, uplink or concurrent rows)")
	flag.IntVar(&o.fillWorkers, "fill-workers", 2, "concurrent ADDs while filling held nodes")
	flag.StringVar(&o.src, "src", "", "build external-ip from this tree instead of the repository")
	flag.StringVar(&o.ab, "ab", "", "also build external-ip from this tree (B) and pair its steered ADD/DEL with the repository's (A), back to back")
	flag.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()), "seed of the per-iteration shuffle")
	flag.BoolVar(&o.strace, "strace", false, "profile: strace -f -c and netlink message counts of one ADD per binary")
	flag.BoolVar(&o.straceDel, "strace-del", false, "with -strace: trace the DEL of each pair instead of its ADD")
	flag.BoolVar(&o.perf, "perf", false, "profile: perf record -a -g during the ADDs, reported per binary by comm")
	flag.BoolVar(&o.inittrace, "inittrace", false, "profile: GODEBUG=inittrace=1, time to main and the costliest package inits")
	flag.BoolVar(&o.waits, "waits", false, "profile: perf sched events over back-to-back ADD/DEL pairs; where each verb waits off the CPU, by kernel function")
	flag.IntVar(&o.profileRuns, "profile-n", 20, "ADDs of each binary per profiling hook")
	flag.BoolVar(&o.pools, "pools", true, "the pool rows, against the e2e's API server when its Kubernetes build is cached")
	flag.BoolVar(&o.poolsOnly, "pools-only", false, "only the exec floor, the references, the explicit-IP row and the pool rows")
	flag.StringVar(&o.poolsBaseline, "pools-baseline", beforePools, "the revision whose plugin (before pools) the explicit-IP row is held against (\"\": none)")
	flag.BoolVar(&o.standby, "standby", true, "the standby rows: a standby's ADD, takeover times and check traffic, on pairs of nodes on one LAN")
	flag.BoolVar(&o.standbyOnly, "standby-only", false, "only the exec floor, the references, the explicit-IP row and the standby rows")
	flag.IntVar(&o.standbyRounds, "standby-rounds", 5, "rounds of each takeover row (fault and family), a few seconds each")
	flag.Parse()
	if *quick {
		o.n, o.warmup, held4, held6, o.profileRuns, o.conntrack, o.concurrent = 10, 1, "100", "100", 3, 200, 8
	}
	o.held4, o.held6 = parseCounts(held4), parseCounts(held6)
	if o.n < 1 || o.uplinkRounds < 1 || o.churnRounds < 1 || o.standbyRounds < 1 {
		fatalf("-n, -uplink-rounds, -churn-rounds and -standby-rounds must be at least 1")
	}
	// An IPv6 scenario IP holds a round's number+1000 in one 16-bit group.
	if o.n*max(o.uplinkRounds, o.churnRounds)+1000 > 0xffff {
		fatalf("-n times -uplink-rounds or -churn-rounds must stay under %d", 0xffff-1000)
	}
	return o
}

// parseCounts reads -held's comma list.
func parseCounts(list string) []int {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			fatalf("-held: %q is not a positive count", f)
		}
		out = append(out, v)
	}
	return out
}

var start = time.Now()

// logf prints progress on stderr with the time since start.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}
