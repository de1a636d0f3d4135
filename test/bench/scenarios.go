package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// prevResult is what a main plugin (bridge with host-local) hands on, at
// the cniVersion podman and containerd accept.
const prevResult = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:01:00:05","sandbox":"/var/run/netns/c"}],"ips":[{"interface":0,"address":"10.1.0.5/24"}]}`

// series is one row of the table: the samples of one kind of invocation.
type series struct {
	name    string
	verb    string // ADD, DEL or exec; the ratio columns compare like verbs
	group   string
	note    string
	samples []sample
	fails   int
	errs    []string
}

func (s *series) record(x sample, keep bool) {
	if x.err != nil {
		s.fails++
		if len(s.errs) < 3 {
			s.errs = append(s.errs, x.err.Error())
		}
		logf("FAIL %s: %v", s.name, x.err)
	}
	if keep {
		x.stdout, x.stderr = nil, nil
		s.samples = append(s.samples, x)
	}
}

// unit is what one iteration runs for a scenario: an ADD and its DEL, which
// stay in that order while the units are shuffled.
type unit struct {
	tag string
	run func(it int, keep bool)
}

type results struct {
	rows    []*series
	byName  map[string]*series
	units   []unit
	conc    []concRow
	cold    *coldRow
	held    map[string]heldInfo
	kernel  map[string]*kernelProbe // "" for the empty node's IPv4, "IPv6" for its IPv6, else a held label
	profile *profile
	bins    map[string]binary
	holder  string // the holder device's kind on this kernel: dummy, or bridge without the dummy driver
	n       int
	elapsed time.Duration
	seed    uint64
}

type heldInfo struct {
	count  int
	family string
	took   time.Duration
	fails  int
}

// heldNode is a node filled with addresses before the iterations.
type heldNode struct {
	n     *node
	count int
	v6    bool
	label string
}

func (r *results) add(s *series) *series {
	r.rows = append(r.rows, s)
	r.byName[s.name] = s
	return s
}

// eipConf is the plugin's network config: state on the tmpfs, one requested
// IP through runtimeConfig (libcni's capability path), announce count 1 and
// conflictProbe 0s unless extra says otherwise.
func eipConf(n *node, ip string, extra map[string]any) []byte {
	conf := map[string]any{
		"cniVersion":    "1.0.0",
		"name":          "bench",
		"type":          "external-ip",
		"dataDir":       n.dataDir,
		"allowedRanges": []string{range4, range6},
		"announce":      map[string]any{"count": 1},
		"conflictProbe": "0s",
		"prevResult":    json.RawMessage(prevResult),
		"runtimeConfig": map[string]any{"externalIPs": []string{ip}},
	}
	for k, v := range extra {
		if v == nil {
			delete(conf, k)
		} else {
			conf[k] = v
		}
	}
	b, _ := json.Marshal(conf)
	return b
}

func (b *bench) eipCall(bin, command string, n *node, id, ip string, extra map[string]any) call {
	return call{
		bin: bin, command: command, containerID: id, ifName: "eth0",
		netns: n.podPath(), stdin: eipConf(n, ip, extra),
	}
}

// addr4 and addr6 count up from a base address.
func addr4(base string, i int) string {
	a := netip.MustParseAddr(base).As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

func addr6(base string, i int) string {
	a := netip.MustParseAddr(base).As16()
	v := uint32(a[12])<<24 | uint32(a[13])<<16 | uint32(a[14])<<8 | uint32(a[15])
	v += uint32(i)
	a[12], a[13], a[14], a[15] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	return netip.AddrFrom16(a).String()
}

// v4 and v6 give scenario s a new address per iteration.
func v4(s int) func(int) string {
	return func(it int) string { return fmt.Sprintf("198.19.%d.%d", s, (it+1000)%250+1) }
}

func v6(s int) func(int) string {
	return func(it int) string { return fmt.Sprintf("2001:db8:1::a:%x:%x", s, it+1000) }
}

// run is the whole benchmark: nodes, the interleaved iterations, the
// concurrency rows, the profile, then the report.
func (b *bench) run() error {
	o := b.opts
	res := &results{byName: map[string]*series{}, held: map[string]heldInfo{}, kernel: map[string]*kernelProbe{}, bins: b.bins, n: o.n, seed: o.seed}
	t0 := time.Now()
	n0, err := b.newNode("n0")
	if err != nil {
		return err
	}
	if err := b.sanity(n0); err != nil {
		return err
	}
	res.holder = holderKind(n0)
	helds, err := b.heldNodes(res)
	if err != nil {
		return err
	}
	if err := b.addUnits(res, n0, helds); err != nil {
		return err
	}
	b.iterate(res)
	if err := b.afterIterations(res, n0); err != nil {
		return err
	}
	res.elapsed = time.Since(t0)
	return b.report(res)
}

// heldNodes makes one node per held-address scenario and fills it through
// the plugin itself.
func (b *bench) heldNodes(res *results) ([]heldNode, error) {
	var helds []heldNode
	for _, c := range b.opts.held4 {
		if c == 0 {
			continue // the empty case is n0
		}
		helds = append(helds, heldNode{count: c, label: fmt.Sprintf("%s IPv4 held", thousands(c))})
	}
	for _, c := range b.opts.held6 {
		if c > 0 {
			helds = append(helds, heldNode{count: c, v6: true, label: fmt.Sprintf("%s IPv6 held", thousands(c))})
		}
	}
	for i := range helds {
		h := &helds[i]
		tag := fmt.Sprintf("h4x%d", h.count)
		if h.v6 {
			tag = fmt.Sprintf("h6x%d", h.count)
		}
		var err error
		if h.n, err = b.newNode(tag); err != nil {
			return nil, err
		}
	}
	for _, h := range helds {
		info, err := b.fill(h.n, h.count, h.v6)
		if err != nil {
			return nil, err
		}
		res.held[h.label] = info
	}
	return helds, nil
}

// addUnits lists every scenario of an iteration, in the order of the table.
func (b *bench) addUnits(res *results, n0 *node, helds []heldNode) error {
	b.floorUnit(res, n0)
	if err := b.noopUnit(res, n0); err != nil {
		return err
	}
	b.hostLocalUnit(res, n0)
	b.eipUnits(res, n0, helds)
	return b.kernelUnits(res, n0, helds)
}

// iterate runs every unit once per iteration, in a new order each time.
func (b *bench) iterate(res *results) {
	o := b.opts
	rng := rand.New(rand.NewPCG(o.seed, 0x6569702d62656e63))
	order := make([]int, len(res.units))
	tick := time.Now()
	for it := -o.warmup; it < o.n; it++ {
		keep := it >= 0
		for i := range order {
			order[i] = i
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			res.units[k].run(it, keep)
		}
		if !keep && it == -o.warmup {
			logf("warm-up: %d iterations of %d scenarios (%d execs each), shuffled", o.warmup, len(res.units), 2*len(res.units)-1)
		}
		if keep && (it == 0 || it+1 == o.n || (it+1)%10 == 0 || time.Since(tick) > 15*time.Second) {
			tick = time.Now()
			logProgress(res, it+1, o.n)
		}
	}
}

func logProgress(res *results, it, n int) {
	logf("iteration %d/%d: p50 so far: floor %s, noop ADD %s, host-local ADD %s, external-ip ADD IPv4 %s",
		it, n, ms(p(res.byName[floorRow], 50)), ms(p(res.byName["noop ADD"], 50)),
		ms(p(res.byName["host-local ADD"], 50)), ms(p(res.byName["external-ip ADD IPv4"], 50)))
}

// afterIterations closes the kernel probes and runs what is not
// interleaved: the concurrency rows, the cold bursts and the profile.
func (b *bench) afterIterations(res *results, n0 *node) error {
	for label, k := range res.kernel {
		unix.Close(k.fd)
		if k.err != nil {
			return fmt.Errorf("kernel probe %q: %w", label, k.err)
		}
	}
	var err error
	if res.conc, err = b.concurrency(n0); err != nil {
		return err
	}
	if b.opts.concMax > 1 {
		if res.cold, err = b.coldBurst(3); err != nil {
			return err
		}
	}
	if b.opts.profile {
		res.profile = b.profileRun(n0)
	}
	return nil
}

// sanity checks once, with `ip`, that an ADD really puts the addresses and
// the proxy entry in place and that DEL takes them away: the figures are of
// the real work.
func (b *bench) sanity(n *node) error {
	ips := []string{"198.19.0.9", "2001:db8:1::a:0:9"}
	conf := eipConf(n, "", map[string]any{"runtimeConfig": map[string]any{"externalIPs": ips}})
	c := call{bin: b.bins["external-ip"].path, command: "ADD", containerID: "sanity", ifName: "eth0",
		netns: n.podPath(), stdin: conf}
	if x := b.execIn(n, c); x.err != nil {
		return fmt.Errorf("sanity ADD: %w", x.err)
	}
	addrs := ipOut("-n", n.name, "-o", "addr", "show", "dev", "eip0")
	proxy := ipOut("-n", n.name, "-6", "neigh", "show", "proxy", "dev", "uplink0")
	if !bytes.Contains(addrs, []byte(" "+ips[0]+"/32")) || !bytes.Contains(addrs, []byte(" "+ips[1]+"/128")) ||
		!bytes.Contains(proxy, []byte(ips[1])) {
		return fmt.Errorf("sanity: after ADD, eip0 has %q and uplink0's proxies are %q", addrs, proxy)
	}
	c.command = "DEL"
	if x := b.execIn(n, c); x.err != nil {
		return fmt.Errorf("sanity DEL: %w", x.err)
	}
	addrs = ipOut("-n", n.name, "-o", "addr", "show", "dev", "eip0")
	if bytes.Contains(addrs, []byte(ips[0])) || bytes.Contains(addrs, []byte(ips[1])) {
		return fmt.Errorf("sanity: after DEL, eip0 still has %q", addrs)
	}
	logf("sanity: ADD put %v on eip0 (and the IPv6 proxy entry on uplink0), DEL took them away", ips)
	return nil
}

// holderKind is "dummy" or "bridge", from `ip -d link show eip0`.
func holderKind(n *node) string {
	f := strings.Fields(string(ipOut("-n", n.name, "-d", "-o", "link", "show", "eip0")))
	for _, k := range []string{"dummy", "bridge"} {
		if slices.Contains(f, k) {
			return k
		}
	}
	return "unknown"
}

// ipOut is what `ip args...` prints, errors included.
func ipOut(args ...string) []byte {
	out, _ := exec.Command("ip", args...).CombinedOutput()
	return out
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
