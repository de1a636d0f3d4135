package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/external-ip/external-ip/test/bench/stats"
)

// subject is one binary the profiling hooks run: mk(i) is an ADD, and the
// same call as DEL undoes it.
type subject struct {
	name string
	mk   func(i int) call
}

func (p *profiler) subjects() []subject {
	ss := []subject{{"host-local", p.refCall(p.n, "host-local", "prof", p.hostLocalConf("host-local-profile"))}}
	for _, t := range p.trafficModes() {
		for _, v6 := range []bool{false, true} {
			ss = append(ss, subject{fmt.Sprintf("external-ip-%s-%s", famName(v6), t), func(i int) call {
				return p.eipCall(p.bins["external-ip"], "ADD", p.n, 2_000_000+i, t, scenarioIP(60, i, v6))
			}})
		}
	}
	return ss
}

// profiler runs the profiling hooks of -strace, -perf and -inittrace on
// node n, keeping each tool's raw output in dir.
type profiler struct {
	*bench
	n   *node
	dir string
}

// profiles runs the hooks the flags ask for, after the iterations (the
// waits profile on the churn rows' back-to-back node), printing
// each tool's summary and keeping its raw output in a directory of its own
// that outlives the run (perf data does not belong in docs/).
func (b *bench) profiles(n *node, churn *churn) error {
	if !b.opts.strace && !b.opts.perf && !b.opts.inittrace && !b.opts.waits {
		return nil
	}
	dir := filepath.Join(os.TempDir(), "eip-bench-profile-"+b.id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if b.opts.waits {
		if err := churn.waits(dir); err != nil {
			return err
		}
	}
	p := &profiler{bench: b, n: n, dir: dir}
	for _, s := range p.subjects() {
		if b.opts.inittrace {
			p.inittrace(s)
		}
		if b.opts.strace {
			if err := p.straceOne(s); err != nil {
				return err
			}
		}
		if b.opts.perf {
			if err := p.perfRecord(s); err != nil {
				return err
			}
		}
	}
	logf("profile: raw output in %s", dir)
	return nil
}

// runPair runs one ADD and its DEL of s, the ADD changed by wrap, or the
// DEL when onDel (-strace-del: a steered DEL's extra work, its conntrack
// queue and clean-up child, shows only there), and returns that call's.
func (p *profiler) runPair(s subject, i int, wrap func(*call), onDel bool) sample {
	add := s.mk(i)
	del := add
	del.command = "DEL"
	wrap(map[bool]*call{false: &add, true: &del}[onDel])
	x := p.execIn(p.n, add)
	if onDel && x.err != nil {
		return x
	}
	if d := p.execIn(p.n, del); onDel || d.err != nil && x.err == nil {
		return d
	}
	return x
}

// inittrace runs ADDs with GODEBUG=inittrace=1 and prints the median time
// from the runtime's start to the end of the last package init, and the
// costliest inits. Lines read "init pkg @0.008 ms, 0.002 ms clock, ...".
func (p *profiler) inittrace(s subject) {
	var toMain []time.Duration
	perPkg := map[string][]time.Duration{}
	for i := range p.opts.profileRuns {
		x := p.runPair(s, 1000+i, func(c *call) { c.env = []string{"GODEBUG=inittrace=1"} }, false)
		if x.err != nil {
			logf("inittrace %s: %v", s.name, x.err)
			continue
		}
		writeFile(filepath.Join(p.dir, "inittrace-"+s.name+".txt"), string(x.stderr))
		var last time.Duration
		for _, line := range strings.Split(string(x.stderr), "\n") {
			f := strings.Fields(line)
			if len(f) < 5 || f[0] != "init" || !strings.HasPrefix(f[2], "@") {
				continue
			}
			at, _ := strconv.ParseFloat(strings.TrimPrefix(f[2], "@"), 64)
			clock, _ := strconv.ParseFloat(f[4], 64)
			last = max(last, time.Duration((at+clock)*1e6))
			perPkg[f[1]] = append(perPkg[f[1]], time.Duration(clock*1e6))
		}
		toMain = append(toMain, last)
	}
	pkgs := slices.Collect(maps.Keys(perPkg))
	slices.SortFunc(pkgs, func(a, b string) int { return int(stats.Median(perPkg[b]) - stats.Median(perPkg[a])) })
	var top []string
	for _, pkg := range pkgs[:min(6, len(pkgs))] {
		top = append(top, fmt.Sprintf("%s %.3f", pkg, float64(stats.Median(perPkg[pkg]))/1e6))
	}
	fmt.Printf("inittrace %s: to main %s (median of %d); costliest inits (ms): %s\n", s.name, ms(stats.Median(toMain)), len(toMain), strings.Join(top, ", "))
}

var (
	nlSend   = regexp.MustCompile(`^\d+\s+(?:[\d:.]+\s+)?(?:sendto|sendmsg)\(.*?nlmsg_type=(\w+)`)
	sockCall = regexp.MustCompile(`^\d+\s+(?:[\d:.]+\s+)?socket\((AF_\w+)`)
	sysName  = regexp.MustCompile(`^\d+\s+(?:[\d:.]+\s+)?(\w+)\(`)
)

// straceOne runs one ADD under `strace -f -C -w -yy -T`, keeps the log and
// prints its summary (wall time in each call) and, from the log, the
// netlink requests by type, the sockets by family and a few calls that cost.
func (p *profiler) straceOne(s subject) error {
	path := filepath.Join(p.dir, "strace-"+s.name+".txt")
	x := p.runPair(s, 3000, func(c *call) {
		c.args = []string{"strace", "-f", "-C", "-w", "-yy", "-tt", "-T", "-s", "256", "-o", path}
	}, p.opts.straceDel)
	if x.err != nil {
		return fmt.Errorf("strace %s: %w", s.name, x.err)
	}
	log, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	summary := log[max(0, bytes.LastIndex(log, []byte("% time"))):]
	nl, socks, calls := map[string]int{}, map[string]int{}, map[string]int{}
	for _, line := range strings.Split(string(log), "\n") {
		if m := nlSend.FindStringSubmatch(line); m != nil {
			nl[m[1]]++
		}
		if m := sockCall.FindStringSubmatch(line); m != nil {
			socks[m[1]]++
		}
		if m := sysName.FindStringSubmatch(line); m != nil {
			calls[m[1]]++
		}
	}
	what := "ADD"
	if p.opts.straceDel {
		what = "DEL"
	}
	fmt.Printf("strace %s (one %s, its children included):\n%s", s.name, what, summary)
	fmt.Printf("  netlink requests %v; sockets %v; openat %d, fsync %d, rename %d, flock %d, clone %d, execve %d\n\n",
		nl, socks, calls["openat"], calls["fsync"]+calls["fdatasync"], calls["rename"]+calls["renameat"]+calls["renameat2"],
		calls["flock"], calls["clone"]+calls["clone3"], calls["execve"])
	return nil
}

// perfRecord samples the whole machine while profileRuns ADDs of s run, and
// prints the symbols of s's own processes (by comm): the other helpers'
// load lands in the file but not in the report.
func (p *profiler) perfRecord(s subject) error {
	data := filepath.Join(p.dir, "perf-"+s.name+".data")
	rec := exec.Command("perf", "record", "-F", "4999", "-a", "-g", "-q", "-o", data)
	if err := rec.Start(); err != nil {
		return fmt.Errorf("perf record: %w", err)
	}
	time.Sleep(500 * time.Millisecond) // perf sets up its buffers before it samples
	for i := range p.opts.profileRuns {
		if x := p.runPair(s, 5000+i, func(*call) {}, false); x.err != nil {
			logf("perf %s: %v", s.name, x.err)
		}
	}
	rec.Process.Signal(syscall.SIGINT)
	rec.Wait() // perf ends by the signal; the report below fails if it wrote nothing
	comm := filepath.Base(s.mk(0).bin)
	out, err := exec.Command("perf", "report", "-i", data, "--comm", comm, "--stdio", "--no-children",
		"--sort", "dso,symbol", "-g", "none", "--percentage", "relative", "--percent-limit", "1.5").CombinedOutput()
	if err != nil {
		return fmt.Errorf("perf report: %v: %s", err, out)
	}
	writeFile(filepath.Join(p.dir, "perf-"+s.name+".txt"), string(out))
	fmt.Printf("perf %s (%d ADDs and DELs, comm %s):\n%s\n", s.name, p.opts.profileRuns, comm, out)
	return nil
}
