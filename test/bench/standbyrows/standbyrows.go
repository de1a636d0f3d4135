package standbyrows

import (
	"fmt"
	"net/netip"
	"time"
)

// Bench is what the standby rows need of the bench that runs them.
type Bench interface {
	// Pair adds an ADD row named row and its DEL row to the bench's
	// iterations: attachment k's ADD of the plugin on n, as the bench
	// makes it with its default traffic, with the network config's keys
	// that keys(it) gives set, then the same call as DEL.
	Pair(row string, n Node, k int, keys func(it int) map[string]any) error
	// Record adds a row of times the rows measured themselves, with the
	// rounds that gave no time.
	Record(row string, took []time.Duration, fails int)
	// Print prints a table of the rows' own after the bench's tables.
	Print(table string)
	// Logf prints progress.
	Logf(format string, args ...any)
}

// Node is a node namespace of a pair.
type Node struct {
	NetNS   string // its name under /var/run/netns
	Pod     string // a pod's namespace, the CNI_NETNS of its calls
	DataDir string // the plugin's state directory
}

// Config is where the standby rows run.
type Config struct {
	ID      string // in every namespace's name, as the bench's own
	Dir     string // scratch: the nodes' state, the node processes' files and logs
	Plugin  string // the external-ip binary, which is also the node process
	Traffic string // the network's traffic key: the bench's default
	Rounds  int    // rounds of each takeover row
}

// Rows are the standby rows. Rows:
//   - for each family, node 2's ADD of an IP node 1 holds (another node
//     answers the conflict probe: the IP stands by), and its ADD of an IP
//     nobody holds (today's ADD, the same probe window), timed by the
//     bench in its iterations;
//   - for each family and fault, from the fault to the LAN client's first
//     answer from the standby, over Config.Rounds rounds;
//   - a table of the check traffic while nothing fails: the frames about
//     each IP per second, counted on the LAN.
type Rows struct {
	cfg   Config
	b     Bench
	pairs []*pair
	made  int // pairs made, which names the next
}

const (
	// lan4 and lan6 are the pairs' LAN, test/netns's.
	lan4, lan6 = "192.0.2.0/24", "2001:db8:1::/64"
	// probe is the conflict probe of every row: the default.
	probe = "150ms"
	// every is the node processes' --standby-every: the default.
	every = 200 * time.Millisecond
	// counted is how long the check traffic is counted.
	counted = 5 * time.Second
)

// held are the IPs node 1 holds and node 2 stands by for; free, the
// IPs nobody holds, of today's ADD rows.
var (
	held = map[bool]netip.Addr{false: netip.MustParseAddr("192.0.2.81"), true: netip.MustParseAddr("2001:db8:1::81")}
	free = map[bool]netip.Addr{false: netip.MustParseAddr("192.0.2.91"), true: netip.MustParseAddr("2001:db8:1::91")}
)

// RowStandby names the ADD row of a standby, RowToday today's ADD row.
func RowStandby(fam string) string {
	return fmt.Sprintf("external-ip ADD %s, standby: another node answers the %s conflict probe", fam, probe)
}

func RowToday(fam string) string {
	return fmt.Sprintf("external-ip ADD %s, today's: nobody answers the %s conflict probe", fam, probe)
}

// Fault is a way the active node fails, a row of takeover times per family.
type Fault struct {
	what string
	// Goal is the takeover's goal, for the bench's comparisons.
	Goal string
	// watch are the nodes (0: the active) whose node process runs: not
	// the active's where the fault is its death or DEL, as test/netns.
	watch []int
	do    func(r *Rows, p *pair, ip netip.Addr) error
}

// Row names the fault's row of a family.
func (f Fault) Row(fam string) string {
	return fmt.Sprintf("standby %s: %s, to the client's first answer from the standby", fam, f.what)
}

// Faults are the takeover rows' faults.
var Faults = []Fault{
	{what: "the active node's uplink down", Goal: "<= 1 s", watch: []int{0, 1}, do: func(_ *Rows, p *pair, _ netip.Addr) error {
		return run("ip", "-n", p.nodes[0].NetNS, "link", "set", "uplink0", "down")
	}},
	{what: "the active node's namespace deleted", Goal: "<= 1 s", watch: []int{1}, do: func(_ *Rows, p *pair, _ netip.Addr) error {
		return run("ip", "netns", "del", p.nodes[0].NetNS)
	}},
	{what: "the active holder's DEL", Goal: "<= 0.3 s", watch: []int{1}, do: func(r *Rows, p *pair, ip netip.Addr) error {
		return r.plugin(p.nodes[0], "DEL", r.conf(p.nodes[0], 1, ip))
	}},
}

func family(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// New is the standby rows of cfg; Start runs the takeovers and adds the
// ADD rows, Close removes what Start made, whether or not it failed.
func New(cfg Config) *Rows { return &Rows{cfg: cfg} }

// Start measures the takeovers and the check traffic, then adds the ADD
// rows to b's iterations.
func (r *Rows) Start(b Bench) error {
	r.b = b
	for _, step := range []func() error{r.takeovers, r.checkTraffic, r.addRows} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// Close removes every pair left.
func (r *Rows) Close() {
	for _, p := range r.pairs {
		p.drop()
	}
}

// addRows: node 1 of a pair holds both families' IPs; node 2's ADDs of
// them stand by (checked once, outside the figures, then deleted: an IP
// a node holds is not probed again), its ADDs of IPs nobody holds are
// today's.
func (r *Rows) addRows() error {
	p, err := r.newPair()
	if err != nil {
		return err
	}
	ips := []netip.Addr{held[false], held[true]}
	if err := r.hold(p, ips...); err != nil {
		return err
	}
	if err := r.plugin(p.nodes[1], "DEL", r.conf(p.nodes[1], 2, ips...)); err != nil {
		return err
	}
	for i, v6 := range []bool{false, true} {
		standby, today := keys(true, held[v6]), keys(false, free[v6])
		k := 4_000_000 + 2*i
		if err := r.b.Pair(RowStandby(family(v6)), p.nodes[1], k, func(int) map[string]any { return standby }); err != nil {
			return err
		}
		if err := r.b.Pair(RowToday(family(v6)), p.nodes[1], k+1, func(int) map[string]any { return today }); err != nil {
			return err
		}
	}
	return nil
}

// keys are the network config's keys of a row's ADD of ip, over the
// bench's: the pairs' LAN, the probe, standby or not (today's).
func keys(standby bool, ips ...netip.Addr) map[string]any {
	var list []string
	for _, ip := range ips {
		list = append(list, ip.String())
	}
	k := map[string]any{"allowedRanges": []string{lan4, lan6}, "conflictProbe": probe, "runtimeConfig": map[string]any{"externalIPs": list}}
	if standby {
		k["standby"] = true
	}
	return k
}

// Goal is a figure the bench states for the standby rows: Ours against
// Ref (the difference of their p50s), or, with Max, Ours's largest time.
type Goal struct {
	Ours, Ref string
	Max       bool
	Goal      string
}

// Goals are the standby rows' figures. empty names the bench's ADD row
// of a family on a node with nothing held, which no probe delays: what
// an answered probe and the standby's record add to an ADD.
func Goals(empty func(fam string) string) []Goal {
	var gs []Goal
	for _, fam := range []string{"IPv4", "IPv6"} {
		gs = append(gs, Goal{Ours: RowStandby(fam), Ref: RowToday(fam), Goal: "<= +1 ms"}, Goal{Ours: RowStandby(fam), Ref: empty(fam)})
		for _, f := range Faults {
			gs = append(gs, Goal{Ours: f.Row(fam), Ref: f.Row(fam), Max: true, Goal: f.Goal})
		}
	}
	return gs
}
