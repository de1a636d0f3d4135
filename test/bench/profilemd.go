package main

import "strings"

// profileSection is "Where the time of an ADD goes".
func (b *bench) profileSection(d *doc, r *results, pr *profile) {
	d.w("\n## Where the time of an ADD goes\n\n")
	d.w("Start-up from `GODEBUG=inittrace=1` (median of %d ADDs each): *to main* is the time from the runtime's start to the end of the last package init, *inits* the sum of the inits' own clock time. CPU and faults are from the latency table.\n\n", pr.runs)
	d.w("| binary | to main | inits | init allocations | CPU p50 (ADD) | faults p50 (ADD) | wall p50 (ADD) |\n|---|---:|---:|---:|---:|---:|---:|\n")
	rows := map[string]*series{"exec floor": r.byName[floorRow], "noop": r.byName["noop ADD"],
		"host-local": r.byName["host-local ADD"], "external-ip": r.byName["external-ip ADD IPv4"]}
	for _, name := range profiled {
		st, s := pr.inits[name], rows[name]
		d.w("| %s | %s | %s | %d kB | %s | %d | %s |\n", name, ms(st.toMain), ms(st.sum), st.bytes/1000, ms(cpuP50(s)), faultsP50(s), ms(p(s, 50)))
	}
	d.w("\nexternal-ip's costliest package inits (median clock time):\n\n| package | init | allocated |\n|---|---:|---:|\n")
	for _, t := range pr.top {
		d.w("| `%s` | %.3f ms | %d kB |\n", t.pkg, float64(t.clock)/1e6, t.bytes/1000)
	}
	if a := pr.announcer; a.runs > 0 {
		d.w("\nThe detached announcer of an IPv4 ADD, started %d times from the harness as `announce.Detach` starts it (a plan with no rounds left, as with `announce.count` 1): fork and exec until the exec succeeded, which the ADD waits for, %s; its own CPU %s; it lives %s.\n", a.runs, ms(a.spawn), ms(a.cpu), ms(a.wall))
	}
	if pr.traced {
		syscallTables(d, pr)
	}
	floor, noop, eip := p(r.byName[floorRow], 50), p(r.byName["noop ADD"], 50), p(r.byName["external-ip ADD IPv4"], 50)
	d.w("\nSo, at p50: the exec floor is %s; noop adds %s to it and external-ip ADD (IPv4) %s, of which start-up to main accounts for %s more than the floor's.\n",
		ms(floor), ms(noop-floor), ms(eip-floor), ms(pr.inits["external-ip"].toMain-pr.inits["exec floor"].toMain))
}

// profiled are the binaries of the profile, in table order.
var profiled = []string{"exec floor", "noop", "host-local", "external-ip"}

// syscallTables are the strace tables: calls by purpose for every binary,
// then external-ip's calls with the most time against noop's.
func syscallTables(d *doc, pr *profile) {
	d.w("\nSystem calls of one ADD (`strace -f -yy -T`, summed over %d ADDs and divided by their number), of the plugin's own process unless said otherwise. strace slows every call by tens of microseconds, so its times are not the latency table's; the counts are exact.\n\n", pr.runs)
	d.w("| per ADD | %s |\n|---|%s\n", strings.Join(profiled, " | "), strings.Repeat("---:|", len(profiled)))
	for _, row := range syscallRows {
		d.w("| %s |", row.what)
		for _, name := range profiled {
			if s := pr.strace[name]; s != nil && s.runs > 0 {
				d.w(" %.1f |", row.count(s))
			} else {
				d.w(" - |")
			}
		}
		d.w("\n")
	}
	if s := pr.strace["external-ip"]; s != nil && s.runs > 0 {
		d.w("\nexternal-ip's netlink requests per ADD: %s.\n", netlinkTypes(s))
		timeTable(d, s, pr.strace["noop"])
	}
}

// syscallRow is one line of the calls-by-purpose table.
type syscallRow struct {
	what  string
	count func(*straceSum) float64
}

var syscallRows = []syscallRow{
	{"system calls", func(s *straceSum) float64 { return float64(s.calls) / float64(s.runs) }},
	{"of which Go runtime (signals, memory, threads, poller)", func(s *straceSum) float64 { return s.perRun(runtimeCalls...) }},
	{"threads started", threads},
	{"netlink sockets opened", func(s *straceSum) float64 { return s.perRun("socket(NETLINK)") }},
	{"netlink requests", func(s *straceSum) float64 { return s.perRun("sendto(NETLINK)") }},
	{"/proc/sys files read", func(s *straceSum) float64 { return s.perRun("openat(/proc/sys)") }},
	{"files opened (failures included)", func(s *straceSum) float64 { return s.perRun("openat(file)") }},
	{"files written", func(s *straceSum) float64 { return s.perRun("write(file)") }},
	{"fsync", func(s *straceSum) float64 { return s.perRun("fsync") }},
	{"rename", func(s *straceSum) float64 { return s.perRun("renameat", "renameat2", "rename") }},
	{"unlink", func(s *straceSum) float64 { return s.perRun("unlinkat", "unlink") }},
	{"flock", func(s *straceSum) float64 { return s.perRun("flock") }},
	{"raw sockets opened (AF_PACKET, ICMPv6)", func(s *straceSum) float64 { return s.perRun("socket(PACKET)", "socket(INET6)") }},
	{"frames sent on them", func(s *straceSum) float64 { return s.perRun("sendto(PACKET)", "sendto(INET6)") }},
	{"processes started", func(s *straceSum) float64 { return float64(s.children) / float64(s.runs) }},
	{"system calls of those processes", (*straceSum).childCalls},
}

// timeTable is external-ip's calls with the most time, against noop's.
func timeTable(d *doc, s, noop *straceSum) {
	d.w("\nexternal-ip's calls with the most time (by call and the kind of file or socket it works on; the calls in which idle Go runtime threads wait, futex, nanosleep, epoll_pwait, are left out), against noop's:\n\n")
	d.w("| call | external-ip calls/ADD | external-ip ms/ADD | failed/ADD | noop calls/ADD | noop ms/ADD |\n|---|---:|---:|---:|---:|---:|\n")
	for _, row := range s.topRows(15) {
		nc, nt := 0.0, 0.0
		if noop != nil && noop.runs > 0 {
			if x := noop.rows[row.name]; x != nil {
				nc, nt = float64(x.calls)/float64(noop.runs), x.secs*1000/float64(noop.runs)
			}
		}
		d.w("| `%s` | %.1f | %.3f | %.1f | %.1f | %.3f |\n", row.name, float64(row.calls)/float64(s.runs), row.secs*1000/float64(s.runs),
			float64(row.errs)/float64(s.runs), nc, nt)
	}
}
