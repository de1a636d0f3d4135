// Command bench measures what external-ip costs on a pod's start-up path
// (issue 6): ADD and DEL side by side with the exec floor, the CNI noop test
// plugin and host-local, with thousands of addresses already held, and with
// K concurrent ADDs against K serial ones.
//
// It must run as root: every binary runs in network namespaces it creates
// (a node with an uplink veth to a LAN namespace, as test/netns does), with
// state on a tmpfs it mounts, and nothing touches the machine's own
// interfaces. Binaries are exec'd the way libcni does it (environment,
// config on stdin, stdout read to EOF, wait), forked from an OS thread that
// has entered the node namespace, so no `ip netns exec` adds to the figures.
//
// Usage (from the repository root):
//
//	go run ./test/bench -out docs
//
// writes docs/benchmark.md and docs/benchmark.svg and prints the table.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	n           int
	warmup      int
	out         string
	held4       []int
	held6       []int
	concMax     int
	concReps    int
	fillWorkers int
	profile     bool
	keep        bool
	seed        uint64
	src         string
	candidate   string
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
	// Namespaces, mount and temp dir go on every exit path, ^C included.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// A closed pipe on stdout or stderr (| head) must not kill the run
	// before it cleans up.
	signal.Ignore(syscall.SIGPIPE)
	go func() {
		s := <-sig
		logf("%v: cleaning up", s)
		b.close()
		os.Exit(130)
	}()
	err = b.run()
	b.close()
	if err != nil {
		fatalf("%v", err)
	}
}

func parseFlags() options {
	var o options
	var held4, held6 string
	flag.IntVar(&o.n, "n", 200, "iterations of the interleaved scenarios")
	flag.IntVar(&o.warmup, "warmup", 3, "iterations run first and not recorded")
	flag.StringVar(&o.out, "out", "", "directory for benchmark.md and benchmark.svg (none: print only)")
	flag.StringVar(&held4, "held", "1000,10000", "IPv4 addresses held before the held-address scenarios (comma list)")
	flag.StringVar(&held6, "held6", "1000,10000", "IPv6 addresses held before the IPv6 held-address scenarios (comma list)")
	flag.IntVar(&o.concMax, "conc-max", 64, "largest K for the concurrency scenario (powers of two from 1)")
	flag.IntVar(&o.concReps, "conc-reps", 6, "repetitions of each K, concurrent and serial")
	flag.IntVar(&o.fillWorkers, "fill-workers", 2*runtime.NumCPU(), "concurrent ADDs while filling held addresses")
	flag.BoolVar(&o.profile, "profile", true, "add the profile section (inittrace, strace -c, CPU and faults)")
	flag.BoolVar(&o.keep, "keep", false, "keep namespaces, tmpfs and binaries at the end (debugging)")
	flag.StringVar(&o.src, "src", "", "build external-ip from this tree instead of the repository (to measure a candidate fix)")
	flag.StringVar(&o.candidate, "candidate", "", "also build external-ip from this tree and interleave its IPv4 and IPv6 ADD/DEL as extra rows")
	flag.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()), "seed of the per-iteration shuffle")
	flag.Parse()
	o.held4, o.held6 = parseCounts(held4), parseCounts(held6)
	if o.n < 1 {
		fatalf("-n must be at least 1")
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
		if err != nil || v < 0 {
			fatalf("-held: %q is not a count", f)
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
