package netns

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
)

// External IPs of the traffic tests, on the test LAN.
const (
	extV4  = "192.0.2.10"
	extV6  = "2001:db8:1::10"
	svPort = "8080" // the containers' servers
	lanSv  = "9090" // the LAN host's server
)

// world is a node with real containers: the reference bridge plugin
// (ipMasq and hairpinMode on) and host-local give each container a veth
// and an address per family, and external-ip follows in the chain, all
// through libcni as a runtime calls them.
type world struct {
	t       *testing.T
	h       *host
	cni     *libcni.CNIConfig
	list    *libcni.NetworkConfigList
	traffic string
}

type container struct {
	id, netns string
	v4, v6    netip.Addr
	rt        *libcni.RuntimeConf
}

func newWorld(t *testing.T, traffic string) *world {
	t.Helper()
	return newWorldWith(t, traffic, nil)
}

// newWorldWith is newWorld with extra keys in external-ip's entry.
func newWorldWith(t *testing.T, traffic string, extra map[string]any) *world {
	t.Helper()
	h := newHost(t)
	eip := map[string]any{
		"type": "external-ip", "dataDir": h.dataDir, "traffic": traffic,
		"allowedRanges": []string{subnet4, subnet6}, "conflictProbe": "0s",
		"announce":     map[string]any{"count": 1},
		"capabilities": map[string]any{"externalIPs": true},
	}
	for k, v := range extra {
		eip[k] = v
	}
	w := &world{t: t, h: h, traffic: traffic, cni: libcni.NewCNIConfigWithCacheDir([]string{exampleTools(t), pluginDir()}, t.TempDir(), nil)}
	w.list = bridgeList(t, "1.0.0", "steer", "cni-steer", eip)
	return w
}

// bridgeList is a conflist of the reference bridge with host-local (one
// IPv4 and one IPv6 range, default routes) and eip as the chained entry.
func bridgeList(t *testing.T, version, name, bridge string, eip map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	return bridgeListOn(t, version, name, bridge, podNet{"10.88.0.0/24", "fd00:88::/64", true}, eip)
}

// podNet is a bridge network's subnets, and whether the bridge
// masquerades what leaves them (ipMasq: a routed pod network does not).
type podNet struct {
	v4, v6 string
	masq   bool
}

// bridgeListOn is bridgeList on the subnets of n.
func bridgeListOn(t *testing.T, version, name, bridge string, n podNet, eip map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	conf := map[string]any{
		"cniVersion": version,
		"name":       name,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": n.masq, "hairpinMode": true,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": t.TempDir(),
					"ranges": []any{
						[]any{map[string]any{"subnet": n.v4}},
						[]any{map[string]any{"subnet": n.v6}},
					},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
				},
			},
			eip,
		},
	}
	b, _ := json.Marshal(conf)
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func pluginDir() string { return filepath.Dir(pluginBin) }

// inNode runs f with the calling thread in the node namespace.
func (w *world) inNode(what string, f func() error) {
	w.t.Helper()
	if err := exampleInNode(w.h, f); err != nil {
		w.t.Fatalf("%s: %v", what, err)
	}
}

// add makes a container namespace and ADDs it asking for ips.
func (w *world) add(name string, ips ...string) *container {
	w.t.Helper()
	c := w.container(name, ips...)
	w.inNode("ADD "+name, func() error { return w.tryAdd(c) })
	if !c.v4.IsValid() || !c.v6.IsValid() {
		w.t.Fatalf("container %s got addresses %v and %v, want one per family", name, c.v4, c.v6)
	}
	return c
}

// container makes a container namespace that will ask for ips.
func (w *world) container(name string, ips ...string) *container {
	w.t.Helper()
	c := &container{id: "eipt-" + name + "-" + randomID(3)}
	c.netns = "/var/run/netns/" + c.id
	w.h.sh("ip netns add %s", c.id)
	w.t.Cleanup(func() { exec.Command("ip", "netns", "del", c.id).Run() })
	w.h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0", c.id)
	w.h.sh("ip -n %s link set lo up", c.id)
	c.rt = &libcni.RuntimeConf{ContainerID: c.id, NetNS: c.netns, IfName: "eth0",
		CapabilityArgs: map[string]any{"externalIPs": ips}}
	return c
}

// tryAdd ADDs c, from a thread in the node namespace, and keeps the
// addresses the chain gave it.
func (w *world) tryAdd(c *container) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := w.cni.AddNetworkList(ctx, w.list, c.rt)
	if err != nil {
		return err
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return err
	}
	for _, ipc := range r.IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		if a = a.Unmap(); a.Is4() {
			c.v4 = a
		} else {
			c.v6 = a
		}
	}
	return nil
}

// gc runs the conflist's GC with the containers given as the valid ones
// (the plugin's GC when the list's cniVersion is 1.1.0).
func (w *world) gc(valid ...*container) {
	w.t.Helper()
	args := &libcni.GCArgs{}
	for _, c := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: c.id, IfName: c.rt.IfName})
	}
	w.inNode("GC", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return w.cni.GCNetworkList(ctx, w.list, args)
	})
}

func (w *world) del(c *container) {
	w.t.Helper()
	w.inNode("DEL "+c.id, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return w.cni.DelNetworkList(ctx, w.list, c.rt)
	})
}

func (w *world) check(c *container) error {
	var err error
	w.inNode("CHECK", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = w.cni.CheckNetworkList(ctx, w.list, c.rt)
		return nil
	})
	return err
}

// inNS runs f with the calling thread in the namespace at path: the
// sockets it opens stay there.
func inNS(t *testing.T, path string, f func() error) error {
	t.Helper()
	n, err := ns.GetNS(path)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Do(func(ns.NetNS) error { return f() })
}

func nsPath(name string) string { return "/var/run/netns/" + name }

// serve starts TCP and UDP servers on port in the namespace at path that
// answer every connection or datagram with "name client-address".
func serve(t *testing.T, path, name, port string) {
	t.Helper()
	var tl net.Listener
	var ul net.PacketConn
	err := inNS(t, path, func() error {
		var err error
		if tl, err = net.Listen("tcp", ":"+port); err != nil {
			return err
		}
		ul, err = net.ListenPacket("udp", ":"+port)
		return err
	})
	if err != nil {
		t.Fatalf("starting the servers of %s: %v", name, err)
	}
	t.Cleanup(func() { tl.Close(); ul.Close() })
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", name, hostOf(c.RemoteAddr().String()))
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := ul.ReadFrom(buf)
			if err != nil {
				return
			}
			ul.WriteTo([]byte(name+" "+hostOf(from.String())+"\n"), from)
		}
	}()
}

func hostOf(hostport string) string {
	h, _, _ := net.SplitHostPort(hostport)
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return h
}

// ask connects from the namespace at path to ip:port over network ("tcp"
// or "udp") and returns the server's answer: its name and the client
// address it saw.
func ask(t *testing.T, path, network, ip, port string) (name, client string, err error) {
	t.Helper()
	var line string
	err = inNS(t, path, func() error {
		c, err := net.DialTimeout(network, net.JoinHostPort(ip, port), 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if network == "udp" {
			if _, err := c.Write([]byte("hello")); err != nil {
				return err
			}
		}
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	if err != nil {
		return "", "", err
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		return "", "", fmt.Errorf("answer %q is not 'name address'", line)
	}
	return f[0], f[1], nil
}

// mustAsk is ask that fails the test unless the server named want answers
// and saw the client as from.
func mustAsk(t *testing.T, what, path, network, ip, port, want, from string) {
	t.Helper()
	name, client, err := ask(t, path, network, ip, port)
	if err != nil {
		t.Fatalf("%s: %s %s port %s: %v", what, network, ip, port, err)
	}
	if name != want || (from != "" && client != from) {
		t.Fatalf("%s: %s %s port %s was answered by %s seeing the client as %s, want %s seeing %s", what, network, ip, port, name, client, want, from)
	}
}

// nftTable is `nft -j list table inet external-ip` in the node; "" only
// when nft says the table does not exist, any other failure fails the test.
func (w *world) nftTable() string {
	w.t.Helper()
	out, err := w.h.try("ip netns exec %s nft -j list table inet external-ip", w.h.name)
	switch {
	case err == nil:
		return out
	case strings.Contains(out, "No such file or directory"):
		return ""
	}
	w.t.Fatalf("listing table inet external-ip: %v\n%s", err, out)
	return ""
}
