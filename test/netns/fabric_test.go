package netns

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A routed fabric: the node peers with a router (the test LAN's namespace)
// over its uplink; a client sits behind the router on a subnet the node is
// not on; the external IPs are outside every subnet of the node. The node's
// own routing daemon (FRR or BIRD, from Debian's packages) advertises the
// routes that route mode puts in its main table; nothing of ours speaks BGP.
const (
	fabV4      = "198.51.100.10"
	fabV6      = "2001:db8:ff::10"
	clientV4   = "203.0.113.2"
	clientV6   = "2001:db8:2::2"
	fabRange4  = "198.51.100.0/24"
	fabRange6  = "2001:db8:ff::/64"
	asNode     = 64512
	asRouter   = 64513
	frrDir     = "/usr/lib/frr"
	learnBound = time.Second // a held IP reaches the fabric's router within 1 s, with the timers of docs/routed-fabrics.md
)

type fabric struct {
	w      *world
	router string // the LAN namespace
	client string
}

func newFabric(t *testing.T) *fabric {
	t.Helper()
	for _, bin := range []string{frrDir + "/zebra", frrDir + "/bgpd"} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("FRR is not installed (%v): make deps installs it", err)
		}
	}
	logFile := filepath.Join(t.TempDir(), "external-ip.log")
	// announce.count 0, as docs/routed-fabrics.md has it for IPs on no
	// uplink's subnet.
	w := newWorldWith(t, "both", map[string]any{"allowedRanges": []string{subnet4, subnet6, fabRange4, fabRange6},
		"logFile": logFile, "logLevel": "debug", "announce": map[string]any{"count": 0}})
	t.Cleanup(func() {
		if b, err := os.ReadFile(logFile); err == nil && t.Failed() {
			t.Logf("external-ip's log:\n%s", b)
		}
	})
	h := w.h
	f := &fabric{w: w, router: h.lan, client: "eipcl-" + randomID(4)}
	h.sh("ip netns add %s", f.client)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", f.client).Run() })
	h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0", f.client)
	h.sh("ip -n %s link set lo up", f.client)
	h.sh("ip -n %s link add cl0 type veth peer name eth0 netns %s", f.router, f.client)
	h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.cl0.accept_dad=0 net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1", f.router)
	h.sh("ip -n %s addr add 203.0.113.1/24 dev cl0", f.router)
	h.sh("ip -n %s addr add 2001:db8:2::1/64 dev cl0 nodad", f.router)
	h.sh("ip -n %s addr add %s/24 dev eth0", f.client, clientV4)
	h.sh("ip -n %s addr add %s/64 dev eth0 nodad", f.client, clientV6)
	h.sh("ip -n %s link set cl0 up", f.router)
	h.sh("ip -n %s link set eth0 up", f.client)
	h.sh("ip -n %s route add default via 203.0.113.1", f.client)
	h.sh("ip -n %s -6 route add default via 2001:db8:2::1", f.client)
	// The node reaches everything beyond its LAN through the router; these
	// routes (proto boot) are kernel routes to FRR too, which the
	// route-map must keep from being advertised.
	h.sh("ip -n %s route add default via %s", h.name, lanV4)
	h.sh("ip -n %s -6 route add default via %s", h.name, lanV6)
	return f
}

// daemons are the routing daemons a test started, with their output.
type daemons struct {
	t    *testing.T
	mu   sync.Mutex
	out  bytes.Buffer
	cmds []*exec.Cmd
}

func (d *daemons) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.Write(p)
}

func (d *daemons) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

func newDaemons(t *testing.T) *daemons {
	d := &daemons{t: t}
	t.Cleanup(func() {
		for _, c := range d.cmds {
			c.Process.Kill()
			c.Wait()
		}
		if t.Failed() {
			t.Logf("routing daemons' output:\n%s", d.output())
		}
	})
	return d
}

// start runs a daemon in the foreground in netns ns, its output kept.
func (d *daemons) start(ns string, args ...string) {
	d.t.Helper()
	c := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	c.Stdout, c.Stderr = d, d
	if err := c.Start(); err != nil {
		d.t.Fatalf("starting %v: %v", args, err)
	}
	d.cmds = append(d.cmds, c)
}

// frr starts zebra and bgpd in ns with bgpdConf, under a path space of
// their own (sockets in /run/frr/<space>/), no TCP vty, as root.
func (d *daemons) frr(ns, name, bgpdConf string) {
	d.t.Helper()
	space := "eip-" + name + "-" + randomID(3)
	run := filepath.Join("/run/frr", space)
	if err := os.MkdirAll(run, 0o755); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { os.RemoveAll(run) })
	dir := d.t.TempDir()
	write := func(file, text string) string {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			d.t.Fatal(err)
		}
		return p
	}
	common := []string{"-N", space, "-P", "0", "-u", "root", "-g", "frrvty", "--log", "stdout"}
	d.start(ns, append([]string{frrDir + "/zebra", "-f", write("zebra.conf", "hostname "+name+"\n")}, common...)...)
	waitFor(d.t, 10*time.Second, "zebra's socket in "+run, func() bool {
		_, err := os.Stat(filepath.Join(run, "zserv.api"))
		return err == nil
	})
	d.start(ns, append([]string{frrDir + "/bgpd", "-f", write("bgpd.conf", bgpdConf)}, common...)...)
}

// configErrors are the lines in which a daemon refused its config: FRR's
// "% ..." answers and "No such command" lines, BIRD's parse errors.
func (d *daemons) configErrors() []string {
	var out []string
	for _, l := range strings.Split(d.output(), "\n") {
		if strings.HasPrefix(l, "%") || strings.Contains(l, "No such command") || strings.Contains(l, "Parse error") {
			out = append(out, l)
		}
	}
	return out
}

// sessionsUp tells whether an FRR daemon logged the session with each peer
// up ("%ADJCHANGE: neighbor 192.0.2.1(Unknown) in vrf default Up").
func (d *daemons) sessionsUp(peers ...string) bool {
	out := d.output()
	for _, p := range peers {
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
			return strings.Contains(l, "%ADJCHANGE: neighbor "+p+"(") && strings.HasSuffix(strings.TrimSpace(l), " Up")
		}) {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// fabricVars fills a daemon config's placeholders.
var fabricVars = strings.NewReplacer(
	"NODE4", nodeV4, "NODE6", nodeV6, "ROUTER4", lanV4, "ROUTER6", lanV6,
	"ASNODE", fmt.Sprint(asNode), "ASROUTER", fmt.Sprint(asRouter),
	"RANGE4", fabRange4, "RANGE6", fabRange6,
)

// frrRouterConf is the router's bgpd: it accepts what the node sends.
func frrRouterConf() string {
	return fabricVars.Replace(`frr defaults datacenter
hostname router
router bgp ASROUTER
 bgp router-id ROUTER4
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor NODE4 remote-as ASNODE
 neighbor NODE4 timers 3 9
 neighbor NODE4 timers connect 1
 neighbor NODE4 advertisement-interval 0
 neighbor NODE6 remote-as ASNODE
 neighbor NODE6 timers 3 9
 neighbor NODE6 timers connect 1
 neighbor NODE6 advertisement-interval 0
 address-family ipv4 unicast
  neighbor NODE4 activate
 exit-address-family
 address-family ipv6 unicast
  neighbor NODE6 activate
 exit-address-family
`)
}

// frrNodeConf is the node's bgpd as docs/routed-fabrics.md gives it:
// redistribute kernel, through route-maps that let only host routes in
// the allowed ranges out, and coalesce-time 0 so that an ADD soon after a
// session came up is not held for the first update's coalescing.
func frrNodeConf() string {
	return fabricVars.Replace(`frr defaults datacenter
hostname node
ip prefix-list EXTERNAL-IP4 seq 5 permit RANGE4 ge 32
ipv6 prefix-list EXTERNAL-IP6 seq 5 permit RANGE6 ge 128
route-map EXTERNAL-IP4 permit 10
 match ip address prefix-list EXTERNAL-IP4
exit
route-map EXTERNAL-IP6 permit 10
 match ipv6 address prefix-list EXTERNAL-IP6
exit
router bgp ASNODE
 bgp router-id NODE4
 coalesce-time 0
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor ROUTER4 remote-as ASROUTER
 neighbor ROUTER4 timers 3 9
 neighbor ROUTER4 timers connect 1
 neighbor ROUTER4 advertisement-interval 0
 neighbor ROUTER6 remote-as ASROUTER
 neighbor ROUTER6 timers 3 9
 neighbor ROUTER6 timers connect 1
 neighbor ROUTER6 advertisement-interval 0
 address-family ipv4 unicast
  redistribute kernel route-map EXTERNAL-IP4
  neighbor ROUTER4 activate
 exit-address-family
 address-family ipv6 unicast
  redistribute kernel route-map EXTERNAL-IP6
  neighbor ROUTER6 activate
 exit-address-family
`)
}

// birdNodeConf is the node's BIRD 2 as docs/routed-fabrics.md gives it:
// the kernel protocol learns the main table's routes of protocol 200.
func birdNodeConf() string {
	return fabricVars.Replace(`log stderr all;
router id NODE4;
protocol device {}
protocol kernel {
  learn;
  ipv4 { import where krt_source = 200; export none; };
}
protocol kernel {
  learn;
  ipv6 { import where krt_source = 200; export none; };
}
protocol bgp router4 {
  local NODE4 as ASNODE;
  neighbor ROUTER4 as ASROUTER;
  hold time 9; keepalive time 3; connect retry time 1;
  ipv4 { import none; export where net ~ [ RANGE4{32,32} ]; };
}
protocol bgp router6 {
  local NODE6 as ASNODE;
  neighbor ROUTER6 as ASROUTER;
  hold time 9; keepalive time 3; connect retry time 1;
  ipv6 { import none; export where net ~ [ RANGE6{128,128} ]; };
}
`)
}

// bgpRoutes lists the routes the router's kernel has from BGP, of a family.
func (f *fabric) bgpRoutes(family string) []string {
	f.w.t.Helper()
	out := f.w.h.sh("ip -n %s %s -j route show proto bgp", f.router, family)
	var rs []struct{ Dst string }
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		f.w.t.Fatalf("ip -j route: %q: %v", out, err)
	}
	var dst []string
	for _, r := range rs {
		dst = append(dst, r.Dst)
	}
	slices.Sort(dst)
	return dst
}

// hasRoute tells whether the router's kernel has a BGP route to ip.
func (f *fabric) hasRoute(ip string) bool {
	fam := "-4"
	if strings.Contains(ip, ":") {
		fam = "-6"
	}
	return slices.Contains(f.bgpRoutes(fam), ip)
}

// untilEach polls every condition until each has held once, within limit,
// and returns how long each took from the call.
func untilEach(t *testing.T, limit time.Duration, conds map[string]func() bool) map[string]time.Duration {
	t.Helper()
	start, took := time.Now(), map[string]time.Duration{}
	for {
		var pending []string
		for what, ok := range conds {
			if _, done := took[what]; !done && ok() {
				took[what] = time.Since(start)
			} else if !done {
				pending = append(pending, what)
			}
		}
		if len(pending) == 0 {
			return took
		}
		if time.Since(start) > limit {
			t.Fatalf("%v: not within %v (the others took %v)", pending, limit, took)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// routerSees times, from now, the router's kernel gaining (learn) or
// losing each external IP's BGP route, and fails the test on any beyond
// learnBound.
func (f *fabric) routerSees(t *testing.T, daemon, after string, learn bool) {
	t.Helper()
	conds := map[string]func() bool{}
	for _, ip := range []string{fabV4, fabV6} {
		conds[ip] = func() bool { return f.hasRoute(ip) == learn }
	}
	verb := map[bool]string{true: "learnt", false: "withdrew"}[learn]
	times := untilEach(t, 10*time.Second, conds)
	for _, ip := range []string{fabV4, fabV6} {
		took := times[ip]
		t.Logf("%s: the router %s %s %v after %s returned", daemon, verb, ip, took.Round(time.Millisecond), after)
		if took > learnBound {
			t.Errorf("%s: the router %s %s %v after %s, want within %v", daemon, verb, ip, took, after, learnBound)
		}
	}
}

func TestARoutingDaemonAdvertisesRouteModesRoutesAndNothingElse(t *testing.T) {
	for _, daemon := range []string{"frr", "bird"} {
		t.Run(daemon, func(t *testing.T) {
			f := newFabric(t)
			d := newDaemons(t)
			d.frr(f.router, "router", frrRouterConf())
			if daemon == "frr" {
				d.frr(f.w.h.name, "node", frrNodeConf())
			} else {
				d.bird(f.w.h.name, birdNodeConf())
			}
			// Both families' sessions, as the router's FRR logs them (and the
			// node's, when FRR): an ADD before a session is up would time
			// the session's coming up, not the route's way.
			peers := []string{nodeV4, nodeV6}
			if daemon == "frr" {
				peers = append(peers, lanV4, lanV6)
			}
			waitFor(t, 30*time.Second, "both BGP sessions up", func() bool { return d.sessionsUp(peers...) })
			if errs := d.configErrors(); len(errs) > 0 {
				t.Fatalf("a daemon refused its config:\n%s", strings.Join(errs, "\n"))
			}
			a := f.w.add("a", fabV4, fabV6)
			f.routerSees(t, daemon, "ADD", true)
			if got4, got6 := f.bgpRoutes("-4"), f.bgpRoutes("-6"); !slices.Equal(got4, []string{fabV4}) || !slices.Equal(got6, []string{fabV6}) {
				t.Errorf("the router has BGP routes %v and %v, want only the external IPs' (no default, no pod subnet)", got4, got6)
			}
			serve(t, a.netns, "a", svPort)
			for _, c := range [][2]string{{fabV4, clientV4}, {fabV6, clientV6}} {
				mustAsk(t, "the client behind the router over TCP", nsPath(f.client), "tcp", c[0], svPort, "a", c[1])
				mustAsk(t, "the client behind the router over UDP", nsPath(f.client), "udp", c[0], svPort, "a", c[1])
			}
			f.w.del(a)
			f.routerSees(t, daemon, "DEL", false)
			if got4, got6 := f.bgpRoutes("-4"), f.bgpRoutes("-6"); len(got4)+len(got6) != 0 {
				t.Errorf("after DEL the router still has BGP routes %v and %v", got4, got6)
			}
		})
	}
}

// bird starts BIRD 2 in ns with conf, its control socket in a directory
// of the test.
func (d *daemons) bird(ns, conf string) {
	d.t.Helper()
	dir := d.t.TempDir()
	p := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		d.t.Fatal(err)
	}
	if out, err := exec.Command("bird", "-p", "-c", p).CombinedOutput(); err != nil {
		d.t.Fatalf("bird refuses its config: %v\n%s", err, out)
	}
	d.start(ns, "bird", "-f", "-c", p, "-s", filepath.Join(dir, "bird.ctl"), "-P", filepath.Join(dir, "bird.pid"))
}
