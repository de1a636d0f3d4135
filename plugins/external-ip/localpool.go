package main

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/localpool"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/pools/iprange"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// The node-local pools of the config (key pools), from the plugin's side:
// a request that names one of them is served here, from the state
// directory (package localpool decides, the assigner holds); a request
// that names another pool is the cluster's, served by the node process
// (claims.go) when one publishes pools. Either way the IPs a request
// names go as before.

// pickTries bounds how often an ADD chooses again when another ADD took
// the IPs it chose before its lock. Concurrent ADDs all choose the pool's
// first free IP, so in a burst of N only one wins each round and the last
// needs N tries; every lost try means another ADD held an IP meanwhile,
// so the loop ends in a hold or in "exhausted" within a burst's size. The
// bound is a runtime's largest burst on one node: 5 failed the tenth of
// ten concurrent ADDs for eight IPs now and then. Each try costs a probe
// of the LAN, paid only under contention.
const pickTries = 64

// poolAsk is an ADD's request for a free IP of a config's pool.
type poolAsk struct {
	config.PoolRequest
	pool *config.LocalPool
}

// requests is what the ADD asks for: the IPs it names (claimed by the
// node process while the cluster has pools) and, when it names a pool of
// the config, that pool; hold is the cluster pool's own, "" when none.
func requests(inv *invocation, args *skel.CmdArgs) (reqs []config.IP, hold string, ask *poolAsk, err error) {
	pr, err := inv.conf.PoolRequested(args.Args)
	if err != nil {
		return nil, "", nil, err
	}
	switch local := inv.conf.LocalPool(pr.Name); {
	case local != nil:
		ask = &poolAsk{PoolRequest: pr, pool: local}
		inv.conf.Pool = "" // not the node process's to serve
	case pr.Name != "" && !pr.FromAnnotation():
		if err := inv.clusterServes(pr); err != nil {
			return nil, "", nil, err
		}
		inv.conf.Pool = pr.Name
	}
	reqs, hold, err = claimedRequests(inv, args)
	return reqs, hold, ask, err
}

// clusterServes refuses a pool that neither the config has nor a node
// process publishes. The pod annotation's request goes to the node process
// regardless, which answers "try again later" while it starts.
func (inv *invocation) clusterServes(pr config.PoolRequest) error {
	_, pooled, err := nodeapi.Published(inv.conf.DataDir)
	if err != nil || pooled {
		return err
	}
	has := "it has none"
	if names := inv.conf.PoolNames(); len(names) > 0 {
		has = "its pools: " + strings.Join(names, ", ")
	}
	return errkind.Errorf(config.ErrInvalid, "%s: %q is not a pool of network %s (%s), and no node process serves the cluster's pools",
		pr.Source, pr.Name, inv.conf.Name, has)
}

// ownerRules are the pools' rules for this ADD, which the assigner asks
// under its lock; every ADD has them, so that an IP a pool gave is refused
// to another owner whichever network asks for it.
func (inv *invocation) ownerRules(args *skel.CmdArgs) error {
	pod, err := config.PodFromArgs(args.Args)
	if err != nil {
		return err
	}
	*inv.rules = localpool.Rules{
		Owner: localpool.OwnerOf(inv.conf.Name, pod.Namespace),
		InPool: func(ip netip.Addr) string {
			if p := inv.conf.PoolCovering(ip); p != nil {
				return p.Name
			}
			return ""
		},
	}
	return nil
}

// conflictTries bounds how many IPs of a pool an ADD passes over because
// other hosts on the LAN answered the conflict probe for them: each costs
// a probe window, and a pool with more such IPs is a LAN to fix, not one
// to search.
const conflictTries = 8

// add holds reqs and, when the ADD asks a pool of the config, a free IP of
// each family the pool gives: chosen from the state, then checked and held
// under the assigner's lock in one journaled change, and chosen again when
// another ADD took it meanwhile or another host on the LAN uses it. It
// returns everything the ADD asked to hold, for the messages.
func (inv *invocation) add(reqs []config.IP, ask *poolAsk, ann assigner.Announcer) ([]config.IP, error) {
	if ask == nil {
		_, err := inv.as.Add(inv.att, addrs(reqs), ann)
		return reqs, err
	}
	fams, err := ask.families(inv.conf)
	if err != nil {
		return reqs, err
	}
	lan := &lanUsed{Announcer: ann, rules: inv.rules, pool: ask.Name}
	for try := 1; ; try++ {
		all, err := ask.pick(inv, reqs, fams, lan.answered)
		if err == nil {
			_, err = inv.as.Add(inv.att, addrs(all), lan)
		}
		switch {
		case try == pickTries:
			return all, lan.explain(err)
		case errors.Is(err, localpool.ErrInUse) && lan.count() < conflictTries:
			inv.log.Warn("another host on the LAN uses a pool IP; passing over it", "pool", ask.Name, "error", err)
		case errors.Is(err, localpool.ErrTaken):
			inv.log.Info("pool IP taken meanwhile; choosing again", "pool", ask.Name, "error", err)
		default:
			return all, lan.explain(err)
		}
	}
}

// lanUsed is an ADD's Announcer while it draws from a pool: a probe
// answered for an IP the pool gave afresh refuses the ADD with
// localpool.ErrInUse, for add to pass over that IP, and never with the
// conflict that a network that stands by holds in standby: a pool gives an
// IP to one attachment, and a host answering for it holds it for no
// sibling of this one. The IPs passed over are remembered for this ADD's
// choices only: the next ADD probes them again, so an IP comes back as
// soon as the host that used it lets it go.
type lanUsed struct {
	assigner.Announcer
	rules *localpool.Rules
	pool  string
	// Probes run concurrently.
	mu  sync.Mutex
	ips []netip.Addr
	who []string
}

func (l *lanUsed) Probe(t announce.Target, wait time.Duration) error {
	err := l.Announcer.Probe(t, wait)
	var answered *announce.Answered
	if !slices.Contains(l.rules.Given, t.Addr) || !errors.As(err, &answered) {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ips = append(l.ips, t.Addr)
	l.who = append(l.who, fmt.Sprintf("%s (by %s)", t.Addr, answered.MAC))
	// Not wrapping err: its conflict would hold the IP in standby.
	return errkind.Errorf(localpool.ErrInUse, "%s: given from pool %s, but another host (%s) answered the conflict probe for it on %s",
		t.Addr, l.pool, answered.MAC, t.Uplink.Name)
}

// count is how many IPs this ADD passed over.
func (l *lanUsed) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ips)
}

// answered says whether another host answered for ip during this ADD.
func (l *lanUsed) answered(ip netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.ips, ip)
}

// explain is the ADD's last error, saying which IPs it passed over and
// why, when it passed over any: the user must free them or leave them out.
func (l *lanUsed) explain(err error) error {
	if err == nil || len(l.who) == 0 {
		return err
	}
	used := strings.Join(l.who, ", ")
	if errors.Is(err, localpool.ErrInUse) {
		return errkind.Errorf(localpool.ErrInUse, "pool %s: other hosts on the LAN answered the conflict probe for every IP tried: %s; free them on those hosts, or take them out of the pool",
			l.pool, used)
	}
	return fmt.Errorf("%w; passed over, as other hosts on the LAN use them: %s", err, used)
}

// families are those the pool gives; when the ADD steers, only those of
// which the container has an address, so that a dual-stack pool serves an
// IPv4-only container.
func (ask *poolAsk) families(c *config.Config) ([]iprange.Family, error) {
	fams := ask.pool.Ranges.Families()
	if c.Traffic == traffic.None {
		return fams, nil
	}
	container := c.ContainerAddrs()
	out := slices.DeleteFunc(slices.Clone(fams), func(f iprange.Family) bool {
		return !slices.ContainsFunc(container, func(p netip.Prefix) bool { return iprange.FamilyOf(p.Addr()) == f })
	})
	if len(out) == 0 {
		return nil, errkind.Errorf(config.ErrInvalid, "%s: pool %s gives %v addresses, and prevResult gives the container none of those families to steer them to",
			ask.Source, ask.Name, fams)
	}
	return out, nil
}

// pick chooses the pool's IPs for the ADD (localpool.Pick), passing over
// the container's own addresses, the IPs the request names and those
// other hosts answered for (answered), and tells the rules which IPs were
// given afresh, which no one else may hold.
func (ask *poolAsk) pick(inv *invocation, reqs []config.IP, fams []iprange.Family, answered func(netip.Addr) bool) ([]config.IP, error) {
	container := inv.conf.ContainerAddrs()
	skip := func(ip netip.Addr) bool {
		return slices.ContainsFunc(container, func(p netip.Prefix) bool { return p.Addr() == ip }) || containsAddr(reqs, ip) || answered(ip)
	}
	var picked localpool.Picked
	err := inv.as.ReadState(func(st assigner.StateReader) error {
		var err error
		picked, err = localpool.Pick(st, inv.att.Key(), localpool.Pool{Name: ask.Name, Ranges: ask.pool.Ranges}, fams, skip)
		return err
	})
	if err != nil {
		if errors.Is(err, localpool.ErrExhausted) {
			err = errkind.Prefix(ask.Source, err)
		}
		return reqs, err
	}
	inv.rules.Given = picked.Given
	out := make([]config.IP, 0, len(picked.IPs)+len(reqs))
	for _, ip := range picked.IPs {
		out = append(out, config.IP{Addr: ip, Source: "pool " + ask.Name})
	}
	return append(out, reqs...), nil
}

// poolHeld leaves out of a CHECK's held IPs those the ADD was given from
// the pool it asks, which the config cannot name: CHECK then compares the
// rest with the IPs it names, and fails when the pool gave none. A pool of
// the config gives IPs of its ranges; the cluster's pool, whose ranges the
// node process keeps, gave those the request does not name.
func poolHeld(inv *invocation, pr config.PoolRequest, reqs []config.IP, held []netip.Addr) ([]netip.Addr, error) {
	if pr.Name == "" {
		return held, nil
	}
	given := func(ip netip.Addr) bool { return !containsAddr(reqs, ip) }
	if local := inv.conf.LocalPool(pr.Name); local != nil {
		given = func(ip netip.Addr) bool { return local.Ranges.Covers(ip) && !containsAddr(reqs, ip) }
	}
	rest := slices.DeleteFunc(slices.Clone(held), given)
	if len(rest) == len(held) {
		return nil, errkind.Errorf(assigner.ErrDrift, "%s: the record holds no IP of pool %s", pr.Source, pr.Name)
	}
	return rest, nil
}
