package standbyrows

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
)

// askEvery is how often the client asks for the IP while it waits for the
// standby's answer: the resolution of the takeover times.
const askEvery = 30 * time.Millisecond

// takeovers records each fault's row of each family: Config.Rounds
// rounds, each on a new pair.
func (r *Rows) takeovers() error {
	for _, f := range Faults {
		for _, v6 := range []bool{false, true} {
			row := f.Row(family(v6))
			var took []time.Duration
			fails := 0
			for i := range r.cfg.Rounds {
				d, err := r.round(f, held[v6])
				if err != nil {
					fails++
					r.b.Logf("FAIL %s, round %d: %v", row, i+1, err)
					continue
				}
				took = append(took, d)
			}
			r.b.Logf("%s: %v", row, took)
			r.b.Record(row, took, fails)
		}
	}
	return nil
}

// round is one takeover of ip: node 1 holds it, node 2 stands by, the
// node processes f names watch; then f's fault, and the time from its
// start to the client's first answer from node 2.
func (r *Rows) round(f Fault, ip netip.Addr) (time.Duration, error) {
	p, err := r.newPair()
	if p != nil {
		defer p.drop()
	}
	if err != nil {
		return 0, err
	}
	if err := r.hold(p, ip); err != nil {
		return 0, err
	}
	for _, i := range f.watch {
		if err := r.watch(p, i, ip); err != nil {
			return 0, err
		}
	}
	// Node 2's watch has heard node 1 answer its first checks, and knows
	// its MAC, as a standby has long before a fault.
	time.Sleep(3 * every)
	start := time.Now()
	if err := f.do(r, p, ip); err != nil {
		return 0, err
	}
	return FirstAnswer(p.lan, ip, macs[1], start, 10*time.Second)
}

// hold has node 1 hold ips actively and node 2 in standby, and checks
// that node 2 stands by and node 1 answers the client: else a row would
// time something else.
func (r *Rows) hold(p *pair, ips ...netip.Addr) error {
	for i, n := range p.nodes {
		if err := r.plugin(n, "ADD", r.conf(n, i+1, ips...)); err != nil {
			return err
		}
	}
	out, err := r.status(p.nodes[1])
	if err != nil {
		return err
	}
	if got := strings.Count(out, "STANDBY"); got != len(ips) {
		return fmt.Errorf("node 2's ADD of %v, which node 1 holds: %d of them in standby, want all:\n%s", ips, got, out)
	}
	for _, ip := range ips {
		if _, err := FirstAnswer(p.lan, ip, macs[0], time.Now(), time.Second); err != nil {
			return fmt.Errorf("node 1 holding %s: %w", ip, err)
		}
	}
	return nil
}

// FirstAnswer asks for ip from the LAN client (the namespace lan, on its
// bridge br0) every askEvery until mac answers, and returns the time
// since start; an error after bound. The root tests time takeovers with
// it too.
func FirstAnswer(lan string, ip netip.Addr, mac string, start time.Time, bound time.Duration) (time.Duration, error) {
	var took time.Duration
	err := ns.WithNetNSPath("/var/run/netns/"+lan, func(ns.NetNS) error {
		ifi, err := net.InterfaceByName("br0")
		if err != nil {
			return err
		}
		ask, done, err := asker(ifi, ip)
		if err != nil {
			return err
		}
		defer done()
		for time.Since(start) < bound {
			ok, err := ask(mac)
			if err != nil {
				return err
			}
			if ok {
				took = time.Since(start)
				return nil
			}
		}
		return fmt.Errorf("no answer from %s for %s within %v", mac, ip, bound)
	})
	return took, err
}

// asker is the client's question for ip on ifi: ask sends it and says
// whether mac answered within askEvery; done closes its socket.
func asker(ifi *net.Interface, ip netip.Addr) (ask func(mac string) (bool, error), done func() error, err error) {
	if ip.Is4() {
		c, err := arp.Dial(ifi)
		if err != nil {
			return nil, nil, err
		}
		return func(mac string) (bool, error) { return askARP(c, ip, mac) }, c.Close, nil
	}
	c, _, err := ndp.Listen(ifi, ndp.LinkLocal)
	if err != nil {
		return nil, nil, err
	}
	snm, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: ip, Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: ifi.HardwareAddr}}}
	return func(mac string) (bool, error) { return askNDP(c, ns, snm, mac) }, c.Close, nil
}

func askARP(c *arp.Client, ip netip.Addr, mac string) (bool, error) {
	if err := c.Request(ip); err != nil {
		return false, err
	}
	c.SetReadDeadline(time.Now().Add(askEvery))
	for {
		p, _, err := c.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if p.Operation == arp.OperationReply && p.SenderIP == ip && p.SenderHardwareAddr.String() == mac {
			return true, nil
		}
	}
}

func askNDP(c *ndp.Conn, ns *ndp.NeighborSolicitation, snm netip.Addr, mac string) (bool, error) {
	if err := c.WriteTo(ns, nil, snm); err != nil {
		return false, err
	}
	c.SetReadDeadline(time.Now().Add(askEvery))
	for {
		m, _, _, err := c.ReadFrom()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if na, ok := m.(*ndp.NeighborAdvertisement); ok && na.TargetAddress == ns.TargetAddress && targetMAC(na) == mac {
			return true, nil
		}
	}
}

// targetMAC is the link-layer address an advertisement gives, "" if none.
func targetMAC(na *ndp.NeighborAdvertisement) string {
	for _, o := range na.Options {
		if l, ok := o.(*ndp.LinkLayerAddress); ok && l.Direction == ndp.Target {
			return l.Addr.String()
		}
	}
	return ""
}
