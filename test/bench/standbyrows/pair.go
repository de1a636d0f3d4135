package standbyrows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The pairs' nodes: the uplinks' MACs (node 1's the lower, which yields
// when both answer) and addresses, and the LAN client's addresses on br0.
var (
	macs      = [2]string{"02:00:00:00:01:01", "02:00:00:00:02:01"}
	nodeAddrs = [2][2]string{{"192.0.2.1", "2001:db8:1::1"}, {"192.0.2.3", "2001:db8:1::3"}}
)

const lanAddr4, lanAddr6 = "192.0.2.2", "2001:db8:1::2"

// pair is two nodes and the LAN namespace whose bridge br0 joins their
// uplinks (ports node1 and node2), and the node processes running there.
type pair struct {
	lan     string
	nodes   [2]Node
	dir     string
	procs   []proc
	dropped bool
}

// proc is a node process; done closes when it has exited.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// newPair makes a pair, named after the pairs made before it.
func (r *Rows) newPair() (*pair, error) {
	r.made++
	pre := fmt.Sprintf("eipsb-%s-%d", r.cfg.ID, r.made)
	p := &pair{lan: pre + "-lan", dir: filepath.Join(r.cfg.Dir, fmt.Sprint(r.made))}
	r.pairs = append(r.pairs, p)
	for i := range p.nodes {
		p.nodes[i] = Node{NetNS: fmt.Sprintf("%s-n%d", pre, i+1), Pod: fmt.Sprintf("%s-p%d", pre, i+1),
			DataDir: filepath.Join(p.dir, fmt.Sprintf("state%d", i+1))}
		if err := os.MkdirAll(p.nodes[i].DataDir, 0o700); err != nil {
			return nil, err
		}
	}
	if out, err := exec.Command("sh", "-ec", p.script()).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("making the pair %s: %v: %s", pre, err, strings.TrimSpace(string(out)))
	}
	return p, p.settled()
}

// script makes the pair with ip and sysctl, as test/netns's
// newBridgedNodes does: DAD off, a bridge that floods neighbour discovery
// as a plain switch does (no multicast snooping), forwarding on in the
// nodes (a route hold and proxy NDP need it).
func (p *pair) script() string {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format+"\n", args...) }
	for _, n := range p.names() {
		w("ip netns add %s", n)
	}
	for _, n := range []string{p.lan, p.nodes[0].NetNS, p.nodes[1].NetNS} {
		w("ip -n %s link set lo up", n)
		w("ip netns exec %s sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0", n)
	}
	w("ip -n %s link add br0 type bridge forward_delay 0 mcast_snooping 0", p.lan)
	for i, n := range p.nodes {
		w("ip -n %s link add uplink0 address %s type veth peer name node%d netns %s", n.NetNS, macs[i], i+1, p.lan)
		w("ip -n %s link set node%d master br0 up", p.lan, i+1)
		w("ip netns exec %s sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.uplink0.accept_dad=0 net.ipv6.conf.uplink0.forwarding=1", n.NetNS)
		w("ip -n %s addr add %s/24 dev uplink0", n.NetNS, nodeAddrs[i][0])
		w("ip -n %s addr add %s/64 dev uplink0 nodad", n.NetNS, nodeAddrs[i][1])
		w("ip -n %s link set uplink0 up", n.NetNS)
	}
	w("ip -n %s addr add %s/24 dev br0", p.lan, lanAddr4)
	w("ip -n %s addr add %s/64 dev br0 nodad", p.lan, lanAddr6)
	w("ip -n %s link set br0 up", p.lan)
	return sb.String()
}

func (p *pair) names() []string {
	return []string{p.lan, p.nodes[0].NetNS, p.nodes[1].NetNS, p.nodes[0].Pod, p.nodes[1].Pod}
}

// settled waits for the link-local addresses the neighbour discovery of
// the checks, the probes and the client is sent from.
func (p *pair) settled() error {
	for _, d := range [][2]string{{p.lan, "br0"}, {p.nodes[0].NetNS, "uplink0"}, {p.nodes[1].NetNS, "uplink0"}} {
		err := waitFor(10*time.Second, "a link-local address on "+d[1]+" in "+d[0], func() bool {
			out, err := exec.Command("ip", "-n", d[0], "-6", "-o", "addr", "show", "dev", d[1], "scope", "link").Output()
			return err == nil && len(out) > 0 && !bytes.Contains(out, []byte("tentative"))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// drop stops the pair's node processes and removes its namespaces and
// files; once.
func (p *pair) drop() {
	if p.dropped {
		return
	}
	p.dropped = true
	for _, c := range p.procs {
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	}
	for _, n := range p.names() {
		exec.Command("ip", "netns", "del", n).Run() // the fault may have deleted it
	}
	os.RemoveAll(p.dir)
}

// conf is the network config of node n's attachment k holding ips, as
// the bench's ADD rows make it (a standby network, the bench's traffic,
// one announcement round), with a container address of its own.
func (r *Rows) conf(n Node, k int, ips ...netip.Addr) map[string]any {
	c := keys(true, ips...)
	c["cniVersion"], c["name"], c["type"], c["dataDir"] = "1.0.0", "bench", "external-ip", n.DataDir
	c["announce"] = map[string]any{"count": 1}
	c["prevResult"] = map[string]any{"cniVersion": "1.0.0",
		"interfaces": []map[string]any{{"name": "eth0", "mac": "0a:58:0a:01:00:05", "sandbox": "/var/run/netns/" + n.Pod}},
		"ips":        []map[string]any{{"interface": 0, "address": fmt.Sprintf("10.65.0.%d/10", k)}, {"interface": 0, "address": fmt.Sprintf("fd00:65::%d/64", k)}}}
	if r.cfg.Traffic != "" {
		c["traffic"] = r.cfg.Traffic
	}
	return c
}

// plugin runs the plugin in node n as a runtime would, outside the
// figures: one container per node, named after its pod.
func (r *Rows) plugin(n Node, command string, conf map[string]any) error {
	stdin, err := json.Marshal(conf)
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", "netns", "exec", n.NetNS, r.cfg.Plugin)
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID=c-"+n.Pod, "CNI_NETNS=/var/run/netns/"+n.Pod,
		"CNI_IFNAME=eth0", "CNI_PATH="+filepath.Dir(r.cfg.Plugin))
	cmd.Stdin = bytes.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s in %s: %v: %s", command, n.NetNS, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// status is `external-ip status` of node n.
func (r *Rows) status(n Node) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", n.NetNS, r.cfg.Plugin, "status", "--data-dir", n.DataDir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("status in %s: %v: %s", n.NetNS, err, out)
	}
	return string(out), nil
}

// watch starts node i's process as the DaemonSet runs it (install
// --watch, on a conf dir of its own) with test/netns's flags, and waits
// until its standby watch reads each of ips.
func (r *Rows) watch(p *pair, i int, ips ...netip.Addr) error {
	n, dir := p.nodes[i], filepath.Join(p.dir, fmt.Sprintf("node%d", i+1))
	bin, confDir, entry := filepath.Join(dir, "bin"), filepath.Join(dir, "net.d"), filepath.Join(dir, "entry.json")
	for _, d := range []string{bin, confDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	e, _ := json.Marshal(map[string]any{"type": "external-ip", "dataDir": n.DataDir, "allowedRanges": []string{lan4, lan6}})
	primary := `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"}]}`
	if err := os.WriteFile(entry, e, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(primary), 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "node.log")
	if err := p.start(logPath, "ip", "netns", "exec", n.NetNS, r.cfg.Plugin, "install", "--watch", "--plugin-config", entry,
		"--bin-dir", bin, "--conf-dir", confDir, "--plugin-binary", r.cfg.Plugin, "--standby-every", every.String()); err != nil {
		return err
	}
	return waitFor(20*time.Second, fmt.Sprintf("node %d's standby watch reading %v (its log: %s)", i+1, ips, logPath), func() bool {
		b, _ := os.ReadFile(logPath)
		for _, ip := range ips {
			if !bytes.Contains(b, []byte(`"msg":"watching an IP of a network that stands by","ip":"`+ip.String())) {
				return false
			}
		}
		return true
	})
}

// start runs args in a process group of its own, output to logPath; drop
// stops it.
func (p *pair) start(logPath string, args ...string) error {
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", strings.Join(args, " "), err)
	}
	c := proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(c.done) }()
	p.procs = append(p.procs, c)
	return nil
}

func run(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitFor polls ok every 50 ms for up to limit.
func waitFor(limit time.Duration, what string, ok func() bool) error {
	for end := time.Now().Add(limit); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			return fmt.Errorf("timed out after %v waiting for %s", limit, what)
		}
	}
	return nil
}
