package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// profile is where the time of one ADD goes, beyond the exec floor.
type profile struct {
	runs      int
	inits     map[string]initStats // per binary
	top       []pkgInit            // external-ip's costliest package inits
	strace    map[string]*straceSum
	traced    bool
	announcer announcerCost
}

type initStats struct {
	toMain time.Duration // median: process start to the end of the last init
	sum    time.Duration // median: sum of the inits' clock time
	pkgs   int
	bytes  int64
}

type pkgInit struct {
	pkg   string
	clock time.Duration // median over runs
	bytes int64
}

// announcerCost is what the detached announcer of an IPv4 ADD costs,
// measured by starting it from the harness as announce.Detach does.
type announcerCost struct {
	runs  int
	spawn time.Duration // median: fork until its exec succeeded, which ADD waits for
	cpu   time.Duration // median: its own CPU, after ADD has returned
	wall  time.Duration // median: how long it lives
}

// subject is one binary the profile runs: its ADD and what undoes it.
type subject struct {
	name string
	add  func(i int) call
	del  func(i int) call // nil: nothing to undo
}

const profileRuns = 21

// profileRuns measures, for the floor, noop, host-local and external-ip
// ADD: Go's init trace (runtime start and package inits), the cost of the
// detached announcer and, when strace is installed, the system calls.
func (b *bench) profileRun(n *node) *profile {
	pr := &profile{runs: profileRuns, inits: map[string]initStats{}, strace: map[string]*straceSum{}}
	subjects := b.profileSubjects(n)
	b.inittraceRuns(n, subjects, pr)
	pr.announcer = b.announcerRuns(n)
	strace, err := exec.LookPath("strace")
	if err != nil {
		logf("profile: no strace on PATH; the syscall table is left out")
		return pr
	}
	pr.traced = true
	b.straceRuns(n, subjects, strace, pr)
	return pr
}

func (b *bench) profileSubjects(n *node) []subject {
	eip := b.bins["external-ip"].path
	hlConf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"bench","type":"host-local","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.129.0.0/16"}]]}}`,
		filepath.Join(b.state, "host-local-profile"))
	noopConf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"bench","type":"noop","debugFile":%q,"prevResult":%s}`,
		filepath.Join(b.state, "noop-debug.json"), prevResult)
	ref := func(bin, command string, conf []byte) func(int) call {
		return func(i int) call {
			return call{bin: b.bins[bin].path, command: command, containerID: fmt.Sprint("prof-", i), ifName: "eth0",
				netns: n.podPath(), stdin: conf}
		}
	}
	eipIP := func(i int) string { return fmt.Sprintf("198.19.6.%d", i%250+1) }
	return []subject{
		{"exec floor", func(int) call {
			return call{bin: b.bins["floor"].path, command: "ADD", stdin: []byte(prevResult)}
		}, nil},
		{"noop", ref("noop", "ADD", noopConf), nil},
		{"host-local", ref("host-local", "ADD", hlConf), ref("host-local", "DEL", hlConf)},
		{"external-ip", func(i int) call { return b.eipCall(eip, "ADD", n, fmt.Sprint("prof-", i), eipIP(i), nil) },
			func(i int) call { return b.eipCall(eip, "DEL", n, fmt.Sprint("prof-", i), eipIP(i), nil) }},
	}
}

// inittraceRuns runs each subject with GODEBUG=inittrace=1.
func (b *bench) inittraceRuns(n *node, subjects []subject, pr *profile) {
	logf("profile: GODEBUG=inittrace=1, %d ADDs of each binary", pr.runs)
	perPkg := map[string][]time.Duration{}
	pkgBytes := map[string]int64{}
	for _, s := range subjects {
		var toMain, sum []time.Duration
		var st initStats
		for i := range pr.runs {
			inits, ok := b.traceInits(n, s, i)
			if !ok {
				continue
			}
			var total, last time.Duration
			st.pkgs, st.bytes = len(inits), 0
			for _, in := range inits {
				total += in.clock
				last = max(last, in.at+in.clock)
				st.bytes += in.bytes
				if s.name == "external-ip" {
					perPkg[in.pkg] = append(perPkg[in.pkg], in.clock)
					pkgBytes[in.pkg] = in.bytes
				}
			}
			toMain, sum = append(toMain, last), append(sum, total)
		}
		st.toMain, st.sum = median(toMain), median(sum)
		pr.inits[s.name] = st
	}
	pr.top = topInits(perPkg, pkgBytes, 10)
}

// traceInits runs one ADD of s with the init trace on, and undoes it.
func (b *bench) traceInits(n *node, s subject, i int) ([]initLine, bool) {
	c := s.add(i)
	c.env = []string{"GODEBUG=inittrace=1"}
	x := b.execIn(n, c)
	if s.del != nil {
		b.execIn(n, s.del(i))
	}
	if x.err != nil {
		logf("profile: %s: %v", s.name, x.err)
		return nil, false
	}
	return parseInittrace(x.stderr), true
}

func topInits(perPkg map[string][]time.Duration, pkgBytes map[string]int64, n int) []pkgInit {
	var top []pkgInit
	for pkg, ds := range perPkg {
		top = append(top, pkgInit{pkg: pkg, clock: median(ds), bytes: pkgBytes[pkg]})
	}
	sort.Slice(top, func(i, j int) bool { return top[i].clock > top[j].clock })
	if len(top) > n {
		top = top[:n]
	}
	return top
}

// announcerRuns starts the plugin binary as announce.Detach starts its
// detached announcer for an IPv4 ADD with announce.count 1 (a plan with no
// rounds left: it holds the inherited socket, then exits), from a thread in
// n, and measures what ADD waits for (the fork and exec) and what the child
// costs afterwards.
func (b *bench) announcerRuns(n *node) announcerCost {
	var a announcerCost
	plan, err := b.announcerPlan(n)
	if err != nil {
		logf("profile: announcer: %v", err)
		return a
	}
	var spawn, cpu, wall []time.Duration
	for range profileRuns {
		x := b.execIn(n, call{bin: b.bins["external-ip"].path, env: []string{plan}})
		if x.err != nil {
			logf("profile: announcer: %v", x.err)
			continue
		}
		spawn, cpu, wall = append(spawn, x.spawn), append(cpu, x.cpu), append(wall, x.wall)
	}
	a.runs, a.spawn, a.cpu, a.wall = len(spawn), median(spawn), median(cpu), median(wall)
	logf("profile: detached announcer: start %s (in ADD), CPU %s, lives %s", ms(a.spawn), ms(a.cpu), ms(a.wall))
	return a
}

// announcerPlan is the environment variable of announce.Detach for n's
// uplink: no rounds left after the first, as with announce.count 1.
func (b *bench) announcerPlan(n *node) (string, error) {
	var plan string
	err := n.ns.Do(func(nsNetNS) error {
		up, err := net.InterfaceByName("uplink0")
		if err != nil {
			return err
		}
		plan = fmt.Sprintf(`EXTERNAL_IP_ANNOUNCE_PLAN={"uplink":"uplink0","index":%d,"mac":%q,"ips":["198.19.6.1"],"rounds":0,"interval":"1.1s"}`,
			up.Index, up.HardwareAddr.String())
		return nil
	})
	return plan, err
}

// straceRuns runs each subject under strace -f -yy -T.
func (b *bench) straceRuns(n *node, subjects []subject, strace string, pr *profile) {
	logf("profile: strace -f -yy -T, %d ADDs of each binary", pr.runs)
	out := filepath.Join(b.tmp, "strace.out")
	for _, s := range subjects {
		sum := newStraceSum()
		for i := range pr.runs {
			c := s.add(1000 + i)
			c.args = []string{strace, "-f", "-yy", "-T", "-o", out, c.bin}
			x := b.execIn(n, c)
			if s.del != nil {
				b.execIn(n, s.del(1000+i))
			}
			if x.err != nil {
				logf("profile: strace %s: %v", s.name, x.err)
				continue
			}
			if data, err := os.ReadFile(out); err == nil {
				sum.add(data)
			}
		}
		pr.strace[s.name] = sum
	}
}

type initLine struct {
	pkg   string
	at    time.Duration
	clock time.Duration
	bytes int64
}

// parseInittrace reads lines such as
// "init internal/bytealg @0.008 ms, 0.002 ms clock, 0 bytes, 0 allocs".
func parseInittrace(stderr []byte) []initLine {
	var out []initLine
	sc := bufio.NewScanner(bytes.NewReader(stderr))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 || f[0] != "init" || !strings.HasPrefix(f[2], "@") {
			continue
		}
		at, _ := strconv.ParseFloat(strings.TrimPrefix(f[2], "@"), 64)
		clock, _ := strconv.ParseFloat(f[4], 64)
		by, _ := strconv.ParseInt(f[7], 10, 64)
		out = append(out, initLine{pkg: f[1], at: msDur(at), clock: msDur(clock), bytes: by})
	}
	return out
}

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
