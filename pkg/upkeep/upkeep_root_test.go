package upkeep

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/report"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/traffic"
	"github.com/external-ip/external-ip/test/logbuf"
)

// upkeepNode is a node namespace holding one external IP on eip0, its
// uplink up0 wired to lan0 in a LAN namespace.
type upkeepNode struct {
	node, lan ns.NetNS
	nodeName  string
	dataDir   string
	ip        netip.Addr
	upMAC     net.HardwareAddr
}

func newUpkeepNode(t *testing.T) *upkeepNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and raw sockets")
	}
	u := &upkeepNode{dataDir: t.TempDir(), ip: netip.MustParseAddr("192.0.2.50")}
	names := [2]string{}
	for i, role := range []string{"node", "lan"} {
		names[i] = fmt.Sprintf("eip-upkeep-%s-%d-%d", role, os.Getpid(), time.Now().UnixNano()%1e6)
		run(t, "ip", "netns", "add", names[i])
		name := names[i]
		t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	}
	u.nodeName = names[0]
	run(t, "ip", "-n", names[0], "link", "add", "up0", "type", "veth", "peer", "name", "lan0", "netns", names[1])
	run(t, "ip", "-n", names[0], "addr", "add", "192.0.2.1/24", "dev", "up0")
	run(t, "ip", "-n", names[0], "link", "set", "up0", "up")
	run(t, "ip", "-n", names[1], "link", "set", "lan0", "up")
	var err error
	if u.node, err = ns.GetNS("/var/run/netns/" + names[0]); err != nil {
		t.Fatal(err)
	}
	if u.lan, err = ns.GetNS("/var/run/netns/" + names[1]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.node.Close(); u.lan.Close() })
	u.do(t, func() error {
		ifi, err := net.InterfaceByName("up0")
		if err == nil {
			u.upMAC = ifi.HardwareAddr
			_, err = assigner.New(assigner.Options{Device: "eip0", DataDir: u.dataDir, LockTimeout: 5 * time.Second}).
				Add(assigner.Attachment{Network: "pods", ContainerID: "c1", IfName: "eth0"}, []netip.Addr{u.ip}, nil)
		}
		return err
	})
	return u
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

func (u *upkeepNode) do(t *testing.T, f func() error) {
	t.Helper()
	if err := u.node.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}

func (u *upkeepNode) upkeep(logs *logbuf.Buffer) *Upkeep {
	return &Upkeep{DataDir: u.dataDir, LockTimeout: 5 * time.Second, Log: logs.Logger()}
}

// arpCapture opens a capture on lan0 and returns a function counting the ARP
// frames that announce ip from mac, read within wait.
func (u *upkeepNode) arpCapture(t *testing.T) func(wait time.Duration) int {
	t.Helper()
	var c *packet.Conn
	err := u.lan.Do(func(ns.NetNS) error {
		ifi, err := net.InterfaceByName("lan0")
		if err == nil {
			c, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		}
		return err
	})
	if err != nil {
		t.Fatalf("capturing on lan0: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return func(wait time.Duration) int {
		n, buf := 0, make([]byte, 1500)
		c.SetReadDeadline(time.Now().Add(wait))
		for {
			m, _, err := c.ReadFrom(buf)
			if err != nil {
				return n
			}
			// Ethernet (14) + ARP: sender MAC at 22, sender IP at 28.
			f := buf[:m]
			if m >= 42 && net.HardwareAddr(f[22:28]).String() == u.upMAC.String() && netip.AddrFrom4([4]byte(f[28:32])) == u.ip {
				n++
			}
		}
	}
}

func TestReannounceSendsARoundForEveryHeldIPOnItsUplink(t *testing.T) {
	u := newUpkeepNode(t)
	count := u.arpCapture(t)
	logs := &logbuf.Buffer{}
	u.do(t, u.upkeep(logs).Reannounce)
	if n := count(2 * time.Second); n != 2 {
		t.Errorf("the LAN saw %d announcements of %s; want one round, a request and a reply", n, u.ip)
	}
	if !strings.Contains(logs.String(), `"re-announced"`) || !strings.Contains(logs.String(), u.ip.String()) {
		t.Errorf("no log line naming the re-announced IP:\n%s", logs)
	}
}

func TestRepairPutsBackAnAddressRemovedByHandAndLogsWhatItFixed(t *testing.T) {
	u := newUpkeepNode(t)
	logs := &logbuf.Buffer{}
	up := u.upkeep(logs)
	u.do(t, up.Repair)
	if strings.Contains(logs.String(), "repaired drift") {
		t.Fatalf("repair with no drift logged a repair:\n%s", logs)
	}
	run(t, "ip", "-n", u.nodeName, "addr", "del", u.ip.String()+"/32", "dev", "eip0")
	u.do(t, up.Repair)
	if !u.holderCarries(t) {
		t.Errorf("%s is not back on eip0 after the repair", u.ip)
	}
	if line := logs.String(); !strings.Contains(line, "repaired drift") || !strings.Contains(line, u.ip.String()+": held but not on eip0") {
		t.Errorf("the repair log does not say what it fixed:\n%s", line)
	}
}

func TestUpkeepOnANodeWithNoStateDoesNothing(t *testing.T) {
	logs := &logbuf.Buffer{}
	up := &Upkeep{DataDir: filepath.Join(t.TempDir(), "none"), Log: logs.Logger()}
	if err := up.Reannounce(); err != nil {
		t.Errorf("reannounce without state: %v", err)
	}
	if err := up.Repair(); err != nil {
		t.Errorf("repair without state: %v", err)
	}
	if logs.String() != "" {
		t.Errorf("logged with nothing to do:\n%s", logs)
	}
}

// A DEL between the upkeep's reading of the state and its round must not
// be followed by an announcement of what it released: another node may be
// taking the IP.
func TestReannounceSendsNothingForAnIPReleasedAfterTheStateWasRead(t *testing.T) {
	u := newUpkeepNode(t)
	count := u.arpCapture(t)
	logs := &logbuf.Buffer{}
	up := u.upkeep(logs)
	up.beforeRound = func(string) {
		att := assigner.Attachment{Network: "pods", ContainerID: "c1", IfName: "eth0"}
		if err := assigner.New(assigner.Options{Device: "eip0", DataDir: u.dataDir, LockTimeout: 5 * time.Second}).Del(att); err != nil {
			t.Errorf("the DEL between report and round: %v", err)
		}
	}
	u.do(t, up.Reannounce)
	if n := count(time.Second); n != 0 {
		t.Errorf("the LAN saw %d announcements of %s after its DEL had returned; want none", n, u.ip)
	}
	if strings.Contains(logs.String(), `"re-announced"`) {
		t.Errorf("the upkeep says it re-announced a released IP:\n%s", logs)
	}
}

// An IP is re-announced while any attachment holds it: its first holder
// leaving between the upkeep's reading of the state and its round must not
// cost the IP its round while another still holds it.
func TestReannounceKeepsTheRoundOfAnIPWhoseFirstHolderLeftWhileAnotherHoldsIt(t *testing.T) {
	u := newUpkeepNode(t)
	as := assigner.New(assigner.Options{Device: "eip0", DataDir: u.dataDir, LockTimeout: 5 * time.Second})
	t.Cleanup(as.Close)
	var first assigner.Attachment
	u.do(t, func() error {
		_, err := as.Add(assigner.Attachment{Network: "pods", ContainerID: "c2", IfName: "eth0"}, []netip.Addr{u.ip}, nil)
		if err != nil {
			return err
		}
		rep, err := as.Report()
		if err == nil && (len(rep.IPs) != 1 || len(rep.IPs[0].Holders) != 2) {
			err = fmt.Errorf("the report before the round shows %+v, want %s with 2 holders", rep.IPs, u.ip)
		}
		if err == nil {
			first = rep.IPs[0].Holders[0]
		}
		return err
	})
	count := u.arpCapture(t)
	logs := &logbuf.Buffer{}
	up := u.upkeep(logs)
	up.beforeRound = func(string) {
		if err := as.Del(first); err != nil {
			t.Errorf("the DEL of the first holder between report and round: %v", err)
		}
	}
	u.do(t, up.Reannounce)
	if n := count(2 * time.Second); n != 2 {
		t.Errorf("the LAN saw %d announcements of %s, still held by its second holder; want one round, a request and a reply\n%s", n, u.ip, logs)
	}
}

// holderCarries says whether eip0 in the node carries ip, failing the test
// when eip0 is missing or cannot be listed.
func (u *upkeepNode) holderCarries(t *testing.T) bool {
	t.Helper()
	var on bool
	u.do(t, func() error {
		l, err := netlink.LinkByName("eip0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, a := range addrs {
			on = on || a.IP.String() == u.ip.String()
		}
		return err
	})
	return on
}

// With the state directory lost, nobody holds the holder's addresses:
// `external-ip repair` releases them, and so must the upkeep.
func TestRepairReleasesTheAddressesOfAHolderWhoseStateDirectoryWasLost(t *testing.T) {
	u := newUpkeepNode(t)
	if err := os.RemoveAll(filepath.Join(u.dataDir, "eip0")); err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	u.do(t, u.upkeep(logs).Repair)
	if u.holderCarries(t) {
		t.Errorf("%s is still on eip0 after the upkeep's repair, though its state directory was lost:\n%s", u.ip, logs)
	}
}

// Drift in the nftables table is drift `external-ip repair` fixes; the
// upkeep's repair must see it and fix it too.
func TestRepairPutsBackTheNATTableRemovedByHand(t *testing.T) {
	u := newUpkeepNode(t)
	att := assigner.Attachment{Network: "pods", ContainerID: "c2", IfName: "eth0"}
	ip := netip.MustParseAddr("192.0.2.51")
	u.do(t, func() error {
		_, err := assigner.New(assigner.Options{Device: "eip0", DataDir: u.dataDir, LockTimeout: 5 * time.Second,
			NAT: steer.HostNAT(), Traffic: traffic.Both, Container: []netip.Prefix{netip.MustParsePrefix("10.88.0.2/32")}}).
			Add(att, []netip.Addr{ip}, nil)
		return err
	})
	run(t, "ip", "netns", "exec", u.nodeName, "nft", "delete", "table", "inet", "external-ip")
	logs := &logbuf.Buffer{}
	up, rec := u.upkeep(logs), newFakeRecorder()
	up.Recorder = rec
	u.do(t, up.Repair)
	out, err := exec.Command("ip", "netns", "exec", u.nodeName, "nft", "list", "table", "inet", "external-ip").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10.88.0.2") {
		t.Errorf("table inet external-ip after the upkeep's repair: %v\n%s\nlog:\n%s", err, out, logs)
	}
	// The steer package's own line for the table, not a copy of it.
	if rec.repaired[report.KindNAT] == 0 || rec.repaired[report.KindOther] != 0 {
		t.Errorf("repairs counted %v; want the table counted as %q, nothing as %q", rec.repaired, report.KindNAT, report.KindOther)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// The upkeep runs for the life of the node: a round must not keep a
// socket (netlink, nftables) open, or the process runs out of descriptors.
func TestUpkeepRoundsLeaveNoDescriptorOpen(t *testing.T) {
	u := newUpkeepNode(t)
	up := u.upkeep(&logbuf.Buffer{})
	round := func() error { return errors.Join(up.Reannounce(), up.Repair()) }
	u.do(t, round) // the first round may open what the runtime keeps
	before := openFDs(t)
	for range 10 {
		u.do(t, round)
	}
	if after := openFDs(t); after > before+2 {
		t.Errorf("10 upkeep rounds left %d more descriptors open (%d, then %d)", after-before, before, after)
	}
}

// A receive buffer overrun ends the link subscription (the watch then
// subscribes again): its socket must go with it, or each overrun on a
// node busy with links leaves one more socket open, filling for good.
func TestALinkSubscriptionEndedByAnOverrunLeavesNoSocket(t *testing.T) {
	u := newUpkeepNode(t)
	var events <-chan LinkEvent
	before := openFDs(t)
	u.do(t, func() error {
		var err error
		events, err = subscribeLinksWith(context.Background(), netlink.LinkSubscribeOptions{ReceiveBufferSize: 1024, ReceiveBufferForceSize: true})
		return err
	})
	for i := range 40 { // unread: the 64 + 64 queued fill, then the socket's buffer overruns
		name := fmt.Sprintf("ov%d", i)
		run(t, "ip", "-n", u.nodeName, "link", "add", name, "type", "veth", "peer", "name", name+"p")
		run(t, "ip", "-n", u.nodeName, "link", "del", name)
	}
	deadline := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-events:
		case <-deadline:
			t.Fatal("the subscription did not end after an overrun")
		}
	}
	time.Sleep(100 * time.Millisecond) // the library's closing goroutine runs
	if after := openFDs(t); after > before {
		t.Errorf("an ended link subscription left %d descriptors open (%d, then %d)", after-before, before, after)
	}
}

// One holder device whose state cannot be read (a corrupt record) holds up
// none of the others: their IPs still reach the series and the watch, and
// its own stay as last read (an unreadable state is no release).
func TestADeviceUnreadableKeepsItsLastHeldAndTheOthersGoOn(t *testing.T) {
	u := newUpkeepNode(t)
	add := func(dev, id, ip string) {
		u.do(t, func() error {
			_, err := assigner.New(assigner.Options{Device: dev, DataDir: u.dataDir, LockTimeout: 5 * time.Second}).
				Add(assigner.Attachment{Network: "pods", ContainerID: id, IfName: "eth0"}, []netip.Addr{netip.MustParseAddr(ip)}, nil)
			return err
		})
	}
	add("eip1", "c2", "192.0.2.51")
	rec := newFakeRecorder()
	up := u.upkeep(&logbuf.Buffer{})
	up.Recorder = rec
	w := up.newWatch(context.Background())
	t.Cleanup(w.close)
	u.do(t, w.refresh)
	recs, _ := filepath.Glob(filepath.Join(u.dataDir, "eip1", "att", "*.json"))
	if len(recs) == 0 {
		t.Fatal("no record of eip1 to corrupt")
	}
	for _, r := range recs {
		if err := os.WriteFile(r, []byte("{not json"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	add("eip0", "c3", "192.0.2.52")
	var err error
	u.do(t, func() error { err = w.refresh(); return nil })
	if err == nil {
		t.Fatal("a corrupt record of eip1: refresh said nothing")
	}
	var got []string
	for _, h := range rec.held {
		got = append(got, h.Device+" "+h.IP.String())
	}
	slices.Sort(got)
	if want := []string{"eip0 192.0.2.50", "eip0 192.0.2.52", "eip1 192.0.2.51"}; !slices.Equal(got, want) {
		t.Errorf("held after eip1's state went unreadable: %v, want %v", got, want)
	}
}

// The repairs metric counts what the repair fixed, by the kind of the
// assigner's own drift line.
func TestRepairCountsTheDriftItFixedByKind(t *testing.T) {
	u := newUpkeepNode(t)
	rec := newFakeRecorder()
	up := u.upkeep(&logbuf.Buffer{})
	up.Recorder = rec
	run(t, "ip", "-n", u.nodeName, "addr", "del", u.ip.String()+"/32", "dev", "eip0")
	u.do(t, up.Repair)
	if want := map[string]int{report.KindAddress: 1}; !maps.Equal(rec.repaired, want) {
		t.Errorf("repairs counted %v; want %v", rec.repaired, want)
	}
}

// A drift fixed by someone else (an ADD, a DEL, `external-ip repair`)
// between the upkeep's report and its repair was not fixed by the upkeep:
// it is not counted, nor logged as repaired.
func TestRepairDoesNotCountDriftFixedBeforeItsLock(t *testing.T) {
	u := newUpkeepNode(t)
	rec := newFakeRecorder()
	logs := &logbuf.Buffer{}
	up := u.upkeep(logs)
	up.Recorder = rec
	up.beforeRepair = func(dev string) {
		as := assigner.New(assigner.Options{Device: dev, DataDir: u.dataDir, LockTimeout: 5 * time.Second})
		if _, err := as.Repair(); err != nil {
			t.Errorf("the other repair: %v", err)
		}
	}
	run(t, "ip", "-n", u.nodeName, "addr", "del", u.ip.String()+"/32", "dev", "eip0")
	u.do(t, up.Repair)
	if len(rec.repaired) != 0 || strings.Contains(logs.String(), "repaired drift") {
		t.Errorf("the upkeep counted %v and logged a repair of drift fixed before its lock:\n%s", rec.repaired, logs)
	}
	if !u.holderCarries(t) {
		t.Errorf("%s is not back on eip0", u.ip)
	}
}

// A holder whose state directory was lost carries IPs nobody holds: the
// repair that releases them counts them.
func TestRepairCountsWhatItReleasesFromAHolderWhoseStateWasLost(t *testing.T) {
	u := newUpkeepNode(t)
	rec := newFakeRecorder()
	up := u.upkeep(&logbuf.Buffer{})
	up.Recorder = rec
	if err := os.RemoveAll(filepath.Join(u.dataDir, "eip0")); err != nil {
		t.Fatal(err)
	}
	u.do(t, up.Repair)
	if u.holderCarries(t) {
		t.Errorf("%s is still on eip0, whose state was lost", u.ip)
	}
	if rec.repaired[report.KindAddress] != 1 {
		t.Errorf("repairs counted %v; want the released address counted once as %q", rec.repaired, report.KindAddress)
	}
}
