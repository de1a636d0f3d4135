package main

import (
	"bufio"
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// straceSum adds up `strace -f -yy -T` logs of one binary's ADDs, by
// system call and the kind of file it works on (close(PACKET) is not
// close(NETLINK)), separately for the plugin's own process and for the
// processes it starts (the detached announcer, os/exec's pidfd check).
type straceSum struct {
	runs     int
	rows     map[string]*straceRow // the plugin process
	child    map[string]*straceRow // processes the plugin started
	netlink  map[string]int        // the plugin's netlink requests by message type
	calls    int                   // the plugin process's calls
	secs     float64
	children int // processes started
}

type straceRow struct {
	name  string
	calls int
	errs  int
	secs  float64
}

func newStraceSum() *straceSum {
	return &straceSum{rows: map[string]*straceRow{}, child: map[string]*straceRow{}, netlink: map[string]int{}}
}

var (
	straceLine = regexp.MustCompile(`^(\d+)\s+(?:<\.\.\. (\w+) resumed>.*|(\w+)\((.*?))(?: <unfinished \.\.\.>)?$`)
	straceTime = regexp.MustCompile(`<(\d+\.\d+)>$`)
	straceRet  = regexp.MustCompile(`\) = (\d+)`)
	fdKind     = regexp.MustCompile(`^\d+<([A-Za-z0-9]+):`)
	fdPath     = regexp.MustCompile(`^\d+</`)
	// socketInode finds "<socket:[123]>", as strace prints a socket whose
	// protocol it does not decode (AF_PACKET).
	socketInode = regexp.MustCompile(`\d+<socket:\[(\d+)\]>`)
	// atCWD is the directory file descriptor as -yy prints it.
	atCWD   = regexp.MustCompile(`^AT_FDCWD(<[^>]*>)?, "`)
	nlmsgTy = regexp.MustCompile(`nlmsg_type=(\w+)`)
)

// straceParse is the state of one log while it is summed.
type straceParse struct {
	s       *straceSum
	procs   *procTree
	pending map[string]string // pid -> key of its unfinished call
	family  map[string]string // socket inode -> AF_ name, from socket()
}

// add sums one log into s.
func (s *straceSum) add(data []byte) {
	s.runs++
	st := &straceParse{s: s, procs: newProcTree(data), pending: map[string]string{}, family: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		st.line(sc.Text())
	}
	s.children += st.procs.children
}

func (st *straceParse) line(line string) {
	m := straceLine.FindStringSubmatch(line)
	if m == nil {
		return
	}
	pid, key := m[1], st.key(m, line)
	if key == "" {
		return // unfinished: counted when it resumes
	}
	t := straceTime.FindStringSubmatch(line)
	if t == nil {
		return
	}
	secs, _ := strconv.ParseFloat(t[1], 64)
	rows := st.s.child
	if st.procs.isPlugin(pid) {
		rows = st.s.rows
		st.s.calls++
		st.s.secs += secs
	}
	r := rows[key]
	if r == nil {
		r = &straceRow{name: key}
		rows[key] = r
	}
	r.calls++
	r.secs += secs
	if strings.Contains(line, ") = -1 ") {
		r.errs++
	}
}

// key names the call of a line, or is "" for a call left unfinished.
func (st *straceParse) key(m []string, line string) string {
	pid := m[1]
	if m[2] != "" { // "<... name resumed>"
		key := st.pending[pid]
		delete(st.pending, pid)
		if key == "" {
			key = m[2]
		}
		return key
	}
	if m[3] == "socket" {
		st.noteSocket(m[4], line)
	}
	key := m[3] + kindOf(m[3], m[4], st.family)
	if key == "sendto(NETLINK)" && st.procs.isPlugin(pid) {
		if t := nlmsgTy.FindStringSubmatch(m[4]); t != nil {
			st.s.netlink[t[1]]++
		}
	}
	if strings.HasSuffix(line, "<unfinished ...>") {
		st.pending[pid] = key
		return ""
	}
	return key
}

// noteSocket remembers the family of a socket strace prints by inode only.
func (st *straceParse) noteSocket(args, line string) {
	if f, _, ok := strings.Cut(args, ","); ok {
		if ino := socketInode.FindStringSubmatch(line); ino != nil {
			st.family[ino[1]] = strings.TrimPrefix(f, "AF_")
		}
	}
}

// kindOf names what a call works on, from its first argument as strace -yy
// prints it.
func kindOf(name, args string, family map[string]string) string {
	if loc := atCWD.FindStringIndex(args); loc != nil {
		if strings.HasPrefix(args[loc[1]:], "/proc/sys/") {
			return "(/proc/sys)"
		}
		return "(file)"
	}
	switch {
	case name == "socket":
		if f, _, ok := strings.Cut(args, ","); ok {
			return "(" + strings.TrimPrefix(f, "AF_") + ")"
		}
	case strings.Contains(args, "</proc/sys/"):
		return "(/proc/sys)"
	}
	if m := socketInode.FindStringSubmatch(args); m != nil && family[m[1]] != "" {
		return "(" + family[m[1]] + ")"
	}
	if m := fdKind.FindStringSubmatch(args); m != nil {
		return "(" + m[1] + ")"
	}
	if fdPath.MatchString(args) {
		return "(file)"
	}
	return ""
}

// procTree tells the plugin's own threads from the processes it starts,
// from the clone calls of one log: a clone with CLONE_THREAD is a thread
// of its caller's process, any other clone a new process.
type procTree struct {
	root     string
	parent   map[string]string
	thread   map[string]bool
	children int
}

func newProcTree(data []byte) *procTree {
	t := &procTree{parent: map[string]string{}, thread: map[string]bool{}}
	isThread := map[string]bool{} // pid -> flags of its unfinished clone
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		pid, rest, _ := strings.Cut(line, " ")
		if t.root == "" {
			t.root = pid
		}
		rest = strings.TrimSpace(rest)
		if strings.HasPrefix(rest, "clone") {
			isThread[pid] = strings.Contains(rest, "CLONE_THREAD")
		} else if !strings.HasPrefix(rest, "<... clone") {
			continue
		}
		if r := straceRet.FindStringSubmatch(rest); r != nil {
			t.parent[r[1]], t.thread[r[1]] = pid, isThread[pid]
			if !isThread[pid] && t.isPlugin(pid) {
				t.children++
			}
		}
	}
	return t
}

// isPlugin reports whether pid is a thread of the plugin's process.
func (t *procTree) isPlugin(pid string) bool {
	for range 64 {
		if pid == t.root {
			return true
		}
		if !t.thread[pid] {
			return false
		}
		pid = t.parent[pid]
	}
	return false
}

// idle reports the calls in which a Go runtime thread waits for work rather
// than the plugin waiting for the kernel.
func idle(key string) bool {
	for _, p := range []string{"futex", "nanosleep", "epoll_pwait", "wait4", "waitid", "sched_yield"} {
		if key == p || strings.HasPrefix(key, p+"(") {
			return true
		}
	}
	return false
}

// topRows are the plugin process's calls with the most wall time.
func (s *straceSum) topRows(n int) []*straceRow {
	var rows []*straceRow
	for _, r := range s.rows {
		if !idle(r.name) {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *straceRow) int {
		switch {
		case a.secs > b.secs:
			return -1
		case a.secs < b.secs:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	if len(rows) > n {
		rows = rows[:n]
	}
	return rows
}

// perRun is calls of the plugin process per ADD whose key matches one of
// the keys given, as "call(kind)" or a bare "call" for every kind.
func (s *straceSum) perRun(keys ...string) float64 {
	if s == nil || s.runs == 0 {
		return 0
	}
	n := 0
	for k, r := range s.rows {
		base, _, _ := strings.Cut(k, "(")
		if slices.Contains(keys, k) || slices.Contains(keys, base) {
			n += r.calls
		}
	}
	return float64(n) / float64(s.runs)
}

// failedPerRun is the failed calls per ADD of one key.
func (s *straceSum) failedPerRun(key string) float64 {
	if s == nil || s.runs == 0 || s.rows[key] == nil {
		return 0
	}
	return float64(s.rows[key].errs) / float64(s.runs)
}

// childCalls is the calls per ADD of the processes the plugin started.
func (s *straceSum) childCalls() float64 {
	if s == nil || s.runs == 0 {
		return 0
	}
	n := 0
	for _, r := range s.child {
		n += r.calls
	}
	return float64(n) / float64(s.runs)
}
