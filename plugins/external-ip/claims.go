package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/store"
)

// The cluster's pools and claims, from the plugin's side: the node process
// (external-ip-node, with the Kubernetes client) decides who may hold an
// IP; the plugin asks it through nodeapi's socket, and only when it must:
// for a pool (annotation external-ip/pool), or for the IPs a pod names
// while the cluster has pools (the node process publishes that in a small
// file). Without pools an ADD reads that one missing file and goes on as
// before: it neither waits for nor needs the node process.

// claimedRequests is the ADD's requests with the cluster's pools applied:
// the IPs the node process granted from the pool, and the named IPs it
// claimed; hold is the pool's own, "" when it has none. Without a pool
// request, and while the cluster has no pool, they are Requests as ever.
func claimedRequests(inv *invocation, args *skel.CmdArgs) (reqs []config.IP, hold string, err error) {
	reqs, named, err := namedRequests(inv, args)
	if err != nil || (inv.conf.Pool == "" && len(named) == 0) {
		return reqs, "", err
	}
	// What ADD refuses of the IPs named, it refuses before any claim.
	if err := inv.refuseLocally(reqs); err != nil {
		return nil, "", err
	}
	resp, had, err := askClaims(inv, args, named)
	if err != nil {
		return nil, "", err
	}
	all := withPoolIPs(reqs, resp, inv.conf.Pool)
	if err := inv.refuseLocally(all); err != nil {
		// The pool gave what the container cannot take: given back now,
		// not at the runtime's DEL. A re-ADD keeps the earlier ADD's claim.
		if !had {
			giveBack(inv)
		}
		return nil, "", err
	}
	return all, resp.Hold, nil
}

// giveBack releases the claim this ADD just made, having first closed its
// connection: the node process keeps the attachment's lock until then
// (the claim's fill), and the release waits for it.
func giveBack(inv *invocation) {
	if heldOpen != nil {
		heldOpen.Close()
		heldOpen = nil
	}
	releaseClaims(inv)
}

// namedRequests are the IPs the attachment names, read as ADD reads them
// (CHECK too, so that it compares with what ADD held): while the cluster
// has pools they are not held to allowedRanges, and named are those the
// node process must claim.
func namedRequests(inv *invocation, args *skel.CmdArgs) (reqs, named []config.IP, err error) {
	_, pooled, err := nodeapi.Published(inv.conf.DataDir)
	if err != nil {
		return nil, nil, err
	}
	if !pooled {
		reqs, err = inv.conf.Requests(args.Args)
		return reqs, nil, err
	}
	return inv.conf.RequestsInPools(args.Args)
}

// heldOpen is the claim's connection to the node process, never closed:
// the exit closes it, which tells the node process that the ADD is over,
// and only then does it write the pod's annotation and event, whose API
// server work would otherwise compete with this ADD for the CPU. Held
// here, it is not closed early by its finalizer.
var heldOpen io.Closer

// askClaims asks the node process to claim the IPs for the attachment,
// having first recorded that it asked: a DEL then knows to release them,
// whatever becomes of the answer. had says that the attachment had asked
// before (a re-ADD).
func askClaims(inv *invocation, args *skel.CmdArgs, named []config.IP) (resp *nodeapi.Response, had bool, err error) {
	pod, err := config.PodFromArgs(args.Args)
	if err != nil {
		return nil, false, err
	}
	req := nodeapi.Request{Op: nodeapi.OpClaim, Attachment: inv.att, Pool: inv.conf.Pool,
		Pod: nodeapi.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
	for _, ip := range named {
		req.Addresses = append(req.Addresses, ip.Addr)
	}
	if err := store.CheckDataDir(inv.conf.DataDir); err != nil {
		return nil, false, err
	}
	had, err = nodeapi.HasIntent(inv.conf.DataDir, req.Attachment)
	if err != nil {
		return nil, false, err
	}
	if err := nodeapi.MarkIntent(inv.conf.DataDir, nodeapi.Marker{Attachment: req.Attachment, Pod: req.Pod}); err != nil {
		return nil, false, err
	}
	resp, conn, err := nodeapi.Client{Socket: nodeapi.SocketPath(inv.conf.DataDir)}.DoThenHold(req)
	if err == nil {
		heldOpen, err = conn, resp.Err()
	}
	if err != nil {
		inv.log.Info("claims refused or not had", "pool", inv.conf.Pool, "error", err)
		if !had {
			undoIntent(inv, err)
		}
		return nil, had, withSource(err, named)
	}
	inv.log.Info("claimed", "pool", inv.conf.Pool, "addresses", fmt.Sprint(resp.Addresses))
	return resp, had, nil
}

// undoIntent takes back the intent of an attachment's first ADD that got
// no claim: a refusal took nothing (the node process gave back what it
// had taken), so the intent goes; without an answer the node process may
// have claimed something, so its release is deferred to it. A re-ADD keeps
// the intent: what the earlier ADD claimed stays until the DEL.
func undoIntent(inv *invocation, why error) {
	var err error
	if errors.Is(why, nodeapi.ErrUnavailable) {
		err = nodeapi.Defer(inv.conf.DataDir, inv.att)
	} else {
		err = nodeapi.Forget(inv.conf.DataDir, inv.att)
	}
	if err != nil {
		inv.log.Warn("claims: taking back the intent of a refused ADD", "error", err)
	}
}

// withSource prefixes a refusal of one IP with where the IP was asked for
// ("pod annotation external-ip/addresses[0]: 192.0.2.9: is owned by ..."),
// as every other refusal of a requested IP reads; a refusal of the pool
// names the annotation itself.
func withSource(err error, named []config.IP) error {
	for _, r := range named {
		if strings.HasPrefix(err.Error(), r.Addr.String()+":") {
			return errkind.Prefix(r.Source, err)
		}
	}
	return err
}

// withPoolIPs puts the pool's IPs first, each with its source; the named
// ones are in reqs already.
func withPoolIPs(reqs []config.IP, resp *nodeapi.Response, pool string) []config.IP {
	var out []config.IP
	for _, a := range resp.Addresses {
		if !containsAddr(reqs, a) {
			out = append(out, config.IP{Addr: a, Source: "pool " + pool})
		}
	}
	return append(out, reqs...)
}

func containsAddr(reqs []config.IP, a netip.Addr) bool {
	for _, r := range reqs {
		if r.Addr == a {
			return true
		}
	}
	return false
}

// releaseClaims gives back what the attachment claimed, when it asked at
// all (its intent is there): at once through the node process, else by
// deferring it to the node process's return. A DEL never fails for it.
func releaseClaims(inv *invocation) {
	a := inv.att
	has, err := nodeapi.HasIntent(inv.conf.DataDir, a)
	if err != nil || !has {
		if err != nil {
			inv.log.Warn("claims: reading the attachment's intent", "error", err)
		}
		return
	}
	resp, err := nodeapi.Client{Socket: nodeapi.SocketPath(inv.conf.DataDir)}.Do(nodeapi.Request{Op: nodeapi.OpRelease, Attachment: a})
	if err == nil {
		err = resp.Err()
	}
	if err == nil {
		err = nodeapi.Forget(inv.conf.DataDir, a)
	} else if derr := nodeapi.Defer(inv.conf.DataDir, a); derr != nil {
		err = fmt.Errorf("%v; deferring it: %w", err, derr)
	} else {
		inv.log.Info("claims: release deferred to the node process", "why", err.Error())
		return
	}
	if err != nil {
		inv.log.Warn("claims: releasing", "error", err)
	}
}

// poolsReady is STATUS for the cluster's pools whose spec.hold is not the
// config's hold, as the node process publishes them: an ADD of theirs
// holds its IPs that other way, which needs other sysctls (forwarding
// for routes, arp_ignore 0 for addresses), so the LAN's reach is checked
// once more, for their families. The plugin does not ask the API: the
// file is the one an ADD reads, one open and nothing more without pools.
// The node process publishes only the pools whose nodeSelector admits
// this node (package claims, publish).
func poolsReady(inv *invocation) error {
	pub, _, err := nodeapi.Published(inv.conf.DataDir)
	if err != nil {
		return err
	}
	var names []string
	var hold string
	var v4, v6 bool
	for _, p := range pub.Held {
		if config.Hold(p.Hold) != inv.conf.Hold {
			names, hold = append(names, p.Name), p.Hold
			v4, v6 = v4 || p.IPv4, v6 || p.IPv6
		}
	}
	if len(names) == 0 {
		return nil
	}
	inv.holdAs(hold)
	if err := inv.as.Ready(v4, v6); err != nil {
		return fmt.Errorf("pool %s (hold %s): %w", strings.Join(names, ", "), hold, err)
	}
	return nil
}

// holdAs holds the ADD's IPs as the pool says, when it says.
func (inv *invocation) holdAs(hold string) {
	if hold == "" || config.Hold(hold) == inv.conf.Hold {
		return
	}
	inv.conf.Hold = config.Hold(hold)
	inv.as = inv.newAssigner()
}

// gcClaims gives back the claims of this network's attachments that GC
// does not keep, as their DEL would have, once no record holds anything
// for them: a GC that could not release some stale records (it goes on
// past them) gives back the claims of those it collected at once, and the
// others keep theirs until a GC releases them. A record that cannot be
// read counts as holding.
func gcClaims(inv *invocation, keep []store.Attachment) {
	intents, err := nodeapi.Intents(inv.conf.DataDir)
	if err != nil {
		inv.log.Warn("claims: reading intents for GC", "error", err)
		return
	}
	var stale []store.Attachment
	for _, m := range intents {
		if m.Attachment.Network == inv.conf.Name && !slices.Contains(keep, m.Attachment) {
			stale = append(stale, m.Attachment)
		}
	}
	gone, err := unrecorded(inv, stale)
	if err != nil {
		inv.log.Warn("claims: reading the records for GC", "error", err)
		return
	}
	for _, a := range gone {
		g := *inv
		g.att = a
		releaseClaims(&g)
	}
}

// unrecorded is those of atts that have no record, read under the lock.
func unrecorded(inv *invocation, atts []store.Attachment) ([]store.Attachment, error) {
	if len(atts) == 0 {
		return nil, nil
	}
	var out []store.Attachment
	err := inv.as.ReadState(func(st assigner.StateReader) error {
		out = out[:0]
		for _, a := range atts {
			if rec, err := st.ReadRecord(a.Key()); rec == nil && err == nil {
				out = append(out, a)
			}
		}
		return nil
	})
	return out, err
}
