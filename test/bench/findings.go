package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// findings turns what the run measured into sentences, so that the doc
// says why a goal fails for as long as the cause is there, and no longer.
func (b *bench) findings(d *doc, r *results) {
	d.w("## What this run shows\n\n")
	met, notMet := r.goalSummary()
	d.w("Met: %s. Not met: %s.\n\n", orNone(met), orNone(notMet))
	pr := r.profile
	if pr == nil {
		pr = &profile{}
	}
	for _, f := range [](func() string){
		func() string { return r.latencyFinding(pr) },
		r.heldFinding,
		r.ipv6Limit,
		func() string { return r.concFinding(pr) },
		r.failureFindings,
		func() string { return packetFinding(pr) },
	} {
		if s := f(); s != "" {
			d.w("%s\n\n", s)
		}
	}
}

// goalSummary lists the goals met and not met, briefly.
func (r *results) goalSummary() (met, notMet []string) {
	for _, g := range r.goals() {
		what := strings.TrimSuffix(g.what, " (p50)")
		if g.ok {
			met = append(met, what)
		} else {
			notMet = append(notMet, what)
		}
	}
	return met, notMet
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}

// latencyFinding explains where an ADD's time goes against noop and
// host-local, when a latency goal fails.
func (r *results) latencyFinding(pr *profile) string {
	failed := false
	for _, g := range r.latencyGoals() {
		failed = failed || !g.ok
	}
	if !failed {
		return ""
	}
	e4, e6 := p(r.byName["external-ip ADD IPv4"], 50), p(r.byName["external-ip ADD IPv6"], 50)
	noop, hl, floor := p(r.byName["noop ADD"], 50), p(r.byName["host-local ADD"], 50), p(r.byName[floorRow], 50)
	var d doc
	d.w("**ADD against noop and host-local: not met.** At p50 an ADD of one IPv4 address takes %s and of one IPv6 address %s, against noop %s and host-local %s (the exec floor, a Go binary that only copies stdin to stdout, is %s). The goals allow %s (1.10 x noop) and %s (0.95 x host-local), that is %s over noop for everything external-ip does beyond parsing its config. Where the %s over noop (IPv4) goes:\n\n",
		ms(e4), ms(e6), ms(noop), ms(hl), ms(floor), ms(noop*110/100), ms(hl*95/100), ms(noop/10), ms(e4-noop))
	r.startupBullet(&d, pr)
	straceBullets(&d, pr)
	r.announcerBullet(&d, pr, e4, e6)
	if k, ok := r.kernel[""]; ok {
		d.w("- The kernel's own work for the address is small on an empty node: adding it takes %.3f ms, removing it %.3f ms (probe from the harness).\n",
			float64(median(k.add))/1e6, float64(median(k.del))/1e6)
	}
	d.w("\n%s", r.inherentParagraph(pr))
	return d.String()
}

// startupBullet compares start-up and CPU with noop's.
func (r *results) startupBullet(d *doc, pr *profile) {
	e, n := r.byName["external-ip ADD IPv4"], r.byName["noop ADD"]
	if st, ok := pr.inits["external-ip"]; ok {
		nst := pr.inits["noop"]
		d.w("- Start-up: %s from process start to the end of the last package init against noop's %s (%+.2f ms; inittrace). Of that, the package inits account for %+.2f ms (%s against %s) and the runtime starting a bigger binary for the rest (%s against %s; %d against %d minor page faults over the whole ADD).\n",
			ms(st.toMain), ms(nst.toMain), float64(st.toMain-nst.toMain)/1e6, float64(st.sum-nst.sum)/1e6, ms(st.sum), ms(nst.sum),
			r.binSize("external-ip"), r.binSize("noop"), faultsP50(e), faultsP50(n))
	}
	d.w("- CPU: %s of user and system time per ADD against noop's %s (%+.2f ms); wall and CPU are close, so the ADD is busy, not waiting.\n",
		ms(cpuP50(e)), ms(cpuP50(n)), float64(cpuP50(e)-cpuP50(n))/1e6)
}

// straceBullets counts external-ip's system calls against noop's.
func straceBullets(d *doc, pr *profile) {
	e, n := pr.strace["external-ip"], pr.strace["noop"]
	if !pr.traced || e == nil || e.runs == 0 || n == nil || n.runs == 0 {
		d.w("- System calls: not counted (no strace on PATH).\n")
		return
	}
	per := func(s *straceSum) float64 { return float64(s.calls) / float64(s.runs) }
	d.w("- System calls (strace, the plugin's own process): %.0f per ADD against noop's %.0f; %.0f against %.0f of them are the Go runtime's bookkeeping (signals, memory, threads, poller). The rest is the work:\n",
		per(e), per(n), e.perRun(runtimeCalls...), n.perRun(runtimeCalls...))
	d.w("  - netlink: %.0f requests on %.0f sockets (%s);\n", e.perRun("sendto(NETLINK)"), e.perRun("socket(NETLINK)"), netlinkTypes(e))
	d.w("  - crash-safe state on the tmpfs: %.0f files opened (%.0f of them failing: files not there yet), %.0f written, %.0f fsync'd, %.0f renamed into place, %.0f removed, %.0f flock (noop: %.0f opened, %.0f written);\n",
		e.perRun("openat(file)"), e.failedPerRun("openat(file)"), e.perRun("write(file)"), e.perRun("fsync"), e.perRun("renameat", "renameat2", "rename"),
		e.perRun("unlinkat", "unlink"), e.perRun("flock"), n.perRun("openat(file)"), n.perRun("write(file)"))
	d.w("  - %.0f reads of /proc/sys (the uplink's settings);\n", e.perRun("openat(/proc/sys)"))
	d.w("  - the first announcement: %.0f raw socket (AF_PACKET) and %.0f frames;\n", e.perRun("socket(PACKET)", "socket(INET6)"), e.perRun("sendto(PACKET)", "sendto(INET6)"))
	d.w("  - %.1f threads started against noop's %.1f, and %.1f processes (the detached announcer), which make %.0f system calls of their own per ADD.\n",
		threads(e), threads(n), float64(e.children)/float64(e.runs), e.childCalls())
}

// runtimeCalls are the calls a Go program makes for its runtime rather
// than for its work.
var runtimeCalls = []string{"rt_sigaction", "rt_sigprocmask", "sigaltstack", "mmap", "munmap", "madvise", "mprotect",
	"prctl", "futex", "nanosleep", "tgkill", "rt_sigreturn", "sched_getaffinity", "gettid", "getpid", "arch_prctl",
	"set_tid_address", "set_robust_list", "rseq", "prlimit64", "brk", "epoll_create1", "epoll_ctl", "epoll_pwait",
	"eventfd2", "fcntl", "sched_yield", "getrandom", "uname", "clone", "clone3"}

func threads(s *straceSum) float64 {
	return s.perRun("clone", "clone3") - float64(s.children)/float64(s.runs)
}

// netlinkTypes lists the plugin's netlink requests per ADD by type.
func netlinkTypes(s *straceSum) string {
	var types []string
	for t := range s.netlink {
		types = append(types, t)
	}
	slices.Sort(types)
	var parts []string
	for _, t := range types {
		parts = append(parts, fmt.Sprintf("%s %.0f", t, float64(s.netlink[t])/float64(s.runs)))
	}
	return strings.Join(parts, ", ")
}

// announcerBullet says what the detached announcer costs IPv4 ADDs.
func (r *results) announcerBullet(d *doc, pr *profile, e4, e6 time.Duration) {
	a := pr.announcer
	if a.runs == 0 {
		return
	}
	d.w("- The detached announcer: an IPv4 ADD hands its AF_PACKET socket to a child so that the socket's last close, which waits for an RCU grace period (10 to 13 ms), happens outside ADD. Starting that child (fork and exec, which `syscall.ForkExec` waits for) costs the ADD %s, measured by starting it from the harness as `announce.Detach` does; the child then uses %s of CPU off the ADD's path and lives %s. An IPv6 ADD with `announce.count` 1 starts none, which is most of why it is %s faster than the IPv4 ADD.\n",
		ms(a.spawn), ms(a.cpu), ms(a.wall), ms(e4-e6))
}

// inherentParagraph separates what the design needs from what could go.
func (r *results) inherentParagraph(pr *profile) string {
	var d doc
	d.w("What is inherent: the exec and Go start-up that every Go plugin pays (the exec floor), parsing the config (noop does as much), the kernel round trips of a chained plugin that changes the node (look up the holder, the route and the uplink, add the address; for IPv6 also the proxy NDP entry), crash-safe state (a journal, the attachment's record and the IP's index entry, each written to a temporary file, fsync'd and renamed under a flock), and for IPv4 the first ARP round and the start of the detached announcer. ")
	noop := p(r.byName["noop ADD"], 50)
	startup := pr.inits["external-ip"].toMain - pr.inits["noop"].toMain
	if a := pr.announcer; a.runs > 0 && a.spawn+startup > noop/10 {
		d.w("The announcer's start (%s) and the start-up difference (%s) alone exceed the %s that 1.10 x noop leaves, so that goal cannot be met by a Go plugin that must announce from a child; ",
			ms(a.spawn), ms(startup), ms(noop/10))
	}
	hl := p(r.byName["host-local ADD"], 50)
	d.w("0.95 x host-local (%s) leaves external-ip %s over noop for its kernel and state work, where host-local itself spends %s over noop on its file work alone (a lock and one file per address, no fsync), so that goal is out of reach too.\n\n",
		ms(hl*95/100), ms(hl*95/100-noop), ms(hl-noop))
	d.w("What could still be cut, plugin side, each small next to the exec floor: ")
	if e := pr.strace["external-ip"]; pr.traced && e != nil && e.runs > 0 {
		d.w("%s", cuttable(e))
	}
	d.w("and the binary's extra start-up over noop's.")
	return d.String()
}

// cuttable lists the calls an ADD makes more than once, by this run's
// counts, with where they come from.
func cuttable(e *straceSum) string {
	var d doc
	runs := float64(e.runs)
	if n := float64(e.netlink["RTM_GETLINK"]) / runs; n > 2 {
		d.w("%.0f RTM_GETLINK requests per ADD where two would do: screening and the locked part each look up the holder by name and the uplink by index and, for a bridge holder, count its ports; ", n)
	}
	if n := e.perRun("socket(NETLINK)"); n > 1 {
		d.w("%.0f netlink sockets where one would do: `bridgePorts` opens its own for each count of a bridge holder's ports (the holder is a bridge where the kernel has no dummy driver); ", n)
	}
	if n := float64(e.children) / runs; n > 1 {
		d.w("%.0f processes started where one would do: os/exec checks once per process that pidfds work by starting a throw-away child, which `syscall.ForkExec` in `announce.Detach` would not; ", n)
	}
	return d.String()
}

// heldFinding explains a held-address goal that fails, by the kernel's
// share.
func (r *results) heldFinding() string {
	k0, ok := r.kernel[""]
	if !ok {
		return ""
	}
	var out []string
	base := p(r.byName["external-ip ADD IPv4"], 50)
	a0, d0 := median(k0.add), median(k0.del)
	for _, row := range r.heldRows() {
		fam, held := heldParts(row)
		k, ok := r.kernel[held]
		if fam != "IPv4" || !ok || p(row, 50)-base <= 2500*time.Microsecond {
			continue
		}
		a, dl := median(k.add), median(k.del)
		out = append(out, fmt.Sprintf("**ADD with %s: not met.** The ADD is %.2f ms slower than on an empty node; the kernel alone takes %.2f ms more to add the address (%.3f ms against %.3f ms; to remove it, %.3f against %.3f ms). IPv4 keeps a device's addresses, and the nexthops of their local routes, in lists that every add and remove walks (in perf: fib_sync_up, __inet_insert_ifa, inet_rtm_newaddr, inet_rtm_deladdr, fib_del_ifaddr), so only fewer addresses per device (holder devices sharded by address) would make it flat; the rest of the difference is the plugin's.",
			held, float64(p(row, 50)-base)/1e6, float64(a-a0)/1e6, float64(a)/1e6, float64(a0)/1e6, float64(dl)/1e6, float64(d0)/1e6))
	}
	return strings.Join(out, "\n\n")
}

// ipv6Limit documents what many IPv6 addresses cost the kernel, from the
// largest IPv6 fill of this run.
func (r *results) ipv6Limit() string {
	best, bestRow := 0, (*series)(nil)
	for _, row := range r.heldRows() {
		fam, held := heldParts(row)
		if info := r.held[held]; fam == "IPv6" && info.family == "IPv6" && info.count > best {
			best, bestRow = info.count, row
		}
	}
	if best < 10000 {
		return "**IPv6 limit.** Not measured in this run: it held fewer than 10,000 IPv6 addresses (`-held6`). Issue 6 measured that the kernel takes about 5 ms to add an IPv6 address once 10,000 IPv6 addresses are on the device."
	}
	_, held := heldParts(bestRow)
	base := p(r.byName["external-ip ADD IPv6"], 50)
	return fmt.Sprintf("**IPv6 limit.** With %s the ADD of one more IPv6 address takes %s (%+.2f ms against an empty node) and the kernel alone takes %s to add and remove it (probe); issue 6 had measured about 5 ms for the add. %s",
		held, ms(p(bestRow, 50)), float64(p(bestRow, 50)-base)/1e6, r.kernelCost(held), ipv6Cause)
}

// ipv6Cause is where the kernel's time goes, from perf on this machine.
const ipv6Cause = "IPv6 keeps a device's addresses in a list that every add walks, and a removal also walks the routing tree (`addrconf_verify_rtnl`, `fib6_clean_all` in perf), so the cost grows with the IPv6 addresses held per device; only fewer addresses per device (holder devices sharded by address) would make it flat. The holder is NOARP, as a dummy is: on a bridge holder without NOARP each IPv6 address also joined its solicited-node multicast group, and every add walked all the groups and queued MLD reports (`igmp6_group_added`, `ipv6_get_lladdr` in perf); measured so before the plugin set NOARP, with 10,000 IPv6 held, one more ADD took 22.50 ms and the kernel 13.06 ms to add the address."

// concFinding explains the concurrency rows by the CPU they need.
func (r *results) concFinding(pr *profile) string {
	g, ok := r.concGoal()
	if !ok {
		return ""
	}
	last := r.conc[len(r.conc)-1]
	cpu := cpuP50(r.byName["external-ip ADD IPv4"])
	need := time.Duration(last.k) * (cpu + pr.announcer.cpu) / time.Duration(runtime.NumCPU())
	verdict := "met"
	if !g.ok {
		verdict = "not met"
	}
	return fmt.Sprintf("**K concurrent ADDs: %s** (%s). On %d CPUs a burst is bound by CPU: an IPv4 ADD uses %s of CPU and its detached announcer %s more, so %d ADDs and their announcers need about %s of the CPUs' time, against %s measured for K=%d (serial: %s): little CPU is left idle to gain. Earlier runs showed K=2 at 2.5 x serial: that was the harness, whose goroutines feeding the plugins' stdin waited up to 10 ms for a Go P (see How each scenario runs); a shell in the node namespace starting two ADDs with `&` also finishes them sooner than two in a row.",
		verdict, g.measured, runtime.NumCPU(), ms(cpu), ms(pr.announcer.cpu), last.k, ms(need), ms(median(last.concurrent)), last.k, ms(median(last.serial)))
}

// failureFindings explain failures of the concurrency and cold rows.
func (r *results) failureFindings() string {
	timeouts, race := 0, false
	var errs []string
	for _, c := range r.conc {
		errs = append(errs, c.errs...)
	}
	if r.cold != nil {
		errs = append(errs, r.cold.errs...)
	}
	for _, e := range errs {
		timeouts += strings.Count(e, "lock not had in time")
		race = race || strings.Contains(e, "not marked")
	}
	var out []string
	if timeouts > 0 {
		out = append(out, "Concurrent ADDs failed with code 11 (lock not had in time): the holder's lock is held for the whole state change, so the last of K waiters waits for K-1 changes; a burst larger than the lock timeout allows fails rather than queue for ever.")
	}
	if race {
		out = append(out, "Concurrent first ADDs on a node without the holder device fail with \"exists and is not marked as an external-ip holder\": screen looks the device up before taking the lock and sees the device that another ADD has just created but not yet marked with its alias.")
	}
	return strings.Join(out, "\n\n")
}

// packetFinding flags a slow AF_PACKET close or bind inside the plugin's
// own process, which the detached announcer and the unbound socket of
// protocol 0 exist to avoid.
func packetFinding(pr *profile) string {
	s := pr.strace["external-ip"]
	if s == nil || s.runs == 0 {
		return ""
	}
	per := func(key string) float64 {
		if x := s.rows[key]; x != nil {
			return x.secs * 1000 / float64(s.runs)
		}
		return 0
	}
	var out []string
	if v := per("close(PACKET)"); v > 1 {
		out = append(out, fmt.Sprintf("Closing the AF_PACKET socket of the gratuitous ARP takes %.1f ms per IPv4 ADD in the plugin's own process: the kernel's packet_release waits for an RCU grace period (synchronize_net) on every AF_PACKET close, and the last close should happen in the detached announcer.", v))
	}
	if v := per("bind(PACKET)"); v > 1 {
		out = append(out, fmt.Sprintf("Binding the AF_PACKET socket takes %.1f ms per ADD (a rebind unregisters the protocol hook, which also waits for a grace period).", v))
	}
	return strings.Join(out, "\n\n")
}
