package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/linger"
	"github.com/external-ip/external-ip/pkg/localpool"
	"github.com/external-ip/external-ip/pkg/park"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// invocation is what every verb starts from: the config, the log and the
// assigner for the config's holder device.
type invocation struct {
	conf *config.Config
	log  *slog.Logger
	as   *assigner.Assigner
	att  assigner.Attachment
	// logTo is where log lines go, for the detached announcer too.
	logTo *announce.PlanLog
	done  func()
	// nat is the NAT table, whose sockets go to keep at the end.
	nat *steer.HostTable
	// keep keeps the sockets whose last close is slow open past our exit.
	keep *linger.Keeper
	// routing routes the IPs of uplinks other than the default route's.
	routing *uplinkroute.HostRouting
	// netns is the container's namespace, which the ADD's record keeps.
	netns *store.Netns
	// rules are the node-local pools' rules, which an ADD fills in
	// (localpool.go) and the assigner asks under its lock.
	rules *localpool.Rules
}

// newAssigner is the assigner for the config as it stands (a pool's hold
// may change it after start).
func (inv *invocation) newAssigner() *assigner.Assigner {
	c := inv.conf
	return assigner.New(assigner.Options{
		Device: c.Device, DataDir: c.DataDir, Uplink: c.Uplink,
		LockTimeout: c.LockTimeout, Log: inv.log,
		NAT: inv.nat, Traffic: c.Traffic, Container: c.ContainerAddrs(), Excluded: c.EgressExcluded,
		Routing:       inv.routing,
		RouteProtocol: routeProtocol(c),
		Probe:         c.Probe,
		Owner:         inv.rules,
		Standby:       c.Standby,
		Netns:         inv.netns,
		Goodbye:       goodbye(inv.keep, inv.log),
	})
}

// startAs is how a verb starts: ADD changes the host and refuses what
// is wrong; a DEL releases what its record says, whatever the keys it does
// not use and the log; GC, CHECK and STATUS must not fail for the log.
type startAs struct {
	load func([]byte) (*config.Config, []error, error)
	log  func(*announce.PlanLog) (*slog.Logger, func(), error)
	// netns: look at the container's namespace, which only an ADD's
	// record keeps.
	netns bool
}

var (
	forAdd    = startAs{load: loadAll, log: openLog, netns: true}
	forDel    = startAs{load: config.LoadForDel, log: logOrDiscard}
	forOthers = startAs{load: loadAll, log: logOrDiscard}
)

func loadAll(stdin []byte) (*config.Config, []error, error) {
	c, err := config.Load(stdin)
	return c, nil, err
}

func start(args *skel.CmdArgs, as startAs) (*invocation, error) {
	conf, ignored, err := as.load(args.StdinData)
	if err != nil {
		return nil, cniError(err, nil)
	}
	logTo := logTarget(conf, args)
	log, done, err := as.log(logTo)
	if err != nil {
		return nil, cniError(err, nil)
	}
	for _, err := range ignored {
		log.Warn("config key passed over: a DEL does not use it", "error", err)
	}
	nat := steer.HostNAT()
	ur := conf.UplinkRouting
	routing := uplinkroute.NewHostRouting(nat, ur.Route, ur.Gateways, ur.Off)
	att := assigner.Attachment{Network: conf.Name, ContainerID: args.ContainerID, IfName: args.IfName}
	inv := &invocation{conf: conf, log: log, att: att, logTo: logTo, nat: nat, routing: routing, rules: &localpool.Rules{},
		keep: linger.New(linger.Options{Sink: sinkIn(conf.DataDir, log, true), Park: park.Files, Hold: announce.HoldPastExit, Log: log})}
	if as.netns {
		inv.netns = containerNetns(args.Netns)
	}
	inv.as = inv.newAssigner()
	inv.done = func() {
		routing.Close()
		inv.lingerNAT()
		if err := inv.keep.Done(); err != nil {
			log.Warn("sockets closed in the plugin", "error", err)
		}
		done()
	}
	return inv, nil
}

// lingerNAT gives the keeper the netfilter sockets, slow to close while
// anyone's destroying commit (the DEL before this ADD) is being cleaned
// up, and closes ours; ADD calls it before its session finishes, so that
// they go with the announcing child.
func (inv *invocation) lingerNAT() {
	if err := inv.nat.Linger(inv.keep); err != nil {
		inv.log.Warn("netfilter socket closed in the plugin", "error", err)
	}
}

// goodbye is how a release of a record that stands by tells a standby
// node to take over at once (announce.Goodbye). It is there whatever the
// config says: the assigner sends it as the released record says, which
// the ADD wrote (a DEL's standby key may be wrong and taken as false).
// A goodbye that cannot be sent is logged: the standby takes over anyway
// once its checks go unanswered.
func goodbye(keep *linger.Keeper, log *slog.Logger) func(announce.Target) {
	return func(t announce.Target) {
		if err := announce.Goodbye(t, keep); err != nil {
			log.Warn("goodbye not sent; a standby takes over when its checks go unanswered", "error", err)
		}
	}
}

// containerNetns is path's namespace as it is now, which the ADD's record
// keeps: the node process gives up a standby network's IP once its
// containers are gone, and uninstall releases the IPs of containers gone
// without their DEL. nil when it cannot be looked at: the container is
// then never taken for gone.
func containerNetns(path string) *store.Netns {
	var st, dir unix.Stat_t
	if path == "" || unix.Stat(path, &st) != nil || unix.Stat(filepath.Dir(path), &dir) != nil {
		return nil
	}
	return &store.Netns{Path: path, Dev: st.Dev, Ino: st.Ino, DirDev: dir.Dev, DirIno: dir.Ino}
}

// routeProtocol is the protocol number of the config's routes when it
// holds its IPs as routes, 0 when it holds them as addresses.
func routeProtocol(c *config.Config) int {
	if c.Hold == config.HoldRoute {
		return c.RouteProtocol
	}
	return 0
}

func cmdAdd(args *skel.CmdArgs) error {
	if err := checkNetNS(args); err != nil {
		return err
	}
	inv, err := start(args, forAdd)
	if err != nil {
		return err
	}
	defer inv.done()
	if inv.conf.PrevResult == nil {
		return noPrevResult()
	}
	reqs, hold, ask, err := requests(inv, args)
	if err == nil {
		err = inv.ownerRules(args)
	}
	if err != nil {
		return cniError(err, nil)
	}
	inv.holdAs(hold)
	if len(reqs) == 0 && ask == nil {
		// The attachment holds none now: an earlier ADD's IPs are released.
		err := inv.as.Del(inv.att)
		startForget(inv)
		if err == nil {
			releaseClaims(inv)
		}
		if err != nil {
			inv.log.Error("add failed", "error", err)
			return cniError(err, nil)
		}
		return printResult(inv.conf)
	}
	if err := inv.refuseLocally(reqs); err != nil {
		return cniError(err, nil)
	}
	s := session(inv)
	reqs, err = inv.add(reqs, ask, s)
	startForget(inv)
	inv.lingerNAT()
	if herr := s.Finish(err == nil); herr != nil {
		inv.log.Warn("sockets or later rounds not handed over", "error", herr)
	}
	if err != nil {
		inv.log.Error("add failed", "error", err)
		return cniError(err, reqs)
	}
	return printResult(inv.conf)
}

// noPrevResult refuses an ADD or a CHECK without the main plugin's
// result, as other chained plugins (portmap) do: the CNI spec has the
// runtime send it to both, and has CHECK consult it.
func noPrevResult() error {
	return types.NewError(types.ErrInvalidNetworkConfig,
		"prevResult: missing; external-ip is a chained plugin and must follow a main plugin", "")
}

// refuseLocally refuses what no claim or pool could make right: an IP
// that is the container's own, and a family the container cannot be
// steered in.
func (inv *invocation) refuseLocally(reqs []config.IP) error {
	container := inv.conf.ContainerAddrs()
	if err := config.RefuseContainerAddrs(reqs, container); err != nil {
		return err
	}
	return inv.conf.CheckFamilies(reqs, container)
}

// checkNetNS refuses, before ADD or DEL changes anything, what skel refuses
// only after they have run (and ADD has printed its result): a CNI_NETNS that is
// the plugin's own namespace, the host's. Without this check the runtime got
// two JSON documents and the host kept what ADD had done.
//
// It compares the two namespace files' inodes, as ns.CheckNetNS does with
// two opened handles, in two stat calls: a CNI_NETNS that cannot be
// looked at is not the plugin's own here either, as for ns.CheckNetNS.
// Once it has passed, skel's own check after the verb cannot fail, and it
// would open both namespaces again, its read of the plugin's own locking
// an OS thread, for which the Go runtime starts another (a clone and a
// hand-over after the result is printed): args.NetnsOverride, which skel
// reads from these same args after the verb, then says it is done (A/B,
// end to end: +3.9 ms per ADD and +4.8 ms per DEL without it, each 95%
// interval above 1 ms, in a slow run; docs/performance.md, "Figures
// behind design choices"). The runtime's own override turns both off, as
// before.
func checkNetNS(args *skel.CmdArgs) error {
	if o := strings.ToUpper(args.NetnsOverride); o == "TRUE" || o == "1" {
		return nil
	}
	var theirs, own unix.Stat_t
	if unix.Stat(args.Netns, &theirs) == nil {
		if err := unix.Stat("/proc/thread-self/ns/net", &own); err != nil {
			return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("reading the plugin's own network namespace: %v", err), "")
		}
		if theirs.Dev == own.Dev && theirs.Ino == own.Ino {
			return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("CNI_NETNS: %q is the plugin's own network namespace, not a container's", args.Netns), "")
		}
	}
	args.NetnsOverride = "1"
	return nil
}

// cmdDel works from the stored record, not from DEL's config, which may lack
// runtimeConfig, prevResult and a netns.
func cmdDel(args *skel.CmdArgs) error {
	if err := checkNetNS(args); err != nil {
		return err
	}
	inv, err := start(args, forDel)
	if err != nil {
		return err
	}
	defer inv.done()
	err = inv.as.Del(inv.att)
	startForget(inv)
	if err != nil {
		inv.log.Error("del failed", "error", err)
		return cniError(err, nil)
	}
	// After the node let the IPs go: another node may take them then.
	releaseClaims(inv)
	return nil
}

// cmdCheck reads the requests as ADD read them. An attachment that asked
// a pool names none of the pool's IPs, so its record is checked all the
// same, and must hold one of them. The record's steering is held to
// prevResult's container addresses (the assigner's Container).
func cmdCheck(args *skel.CmdArgs) error {
	inv, err := start(args, forOthers)
	if err != nil {
		return err
	}
	defer inv.done()
	// Refused before the cheap return of an attachment that asked for
	// nothing, too: a runtime that sends no prevResult breaks every
	// chained plugin's CHECK (portmap's first), whatever this one asked,
	// and the test costs nothing, as Load has parsed it.
	if inv.conf.PrevResult == nil {
		return noPrevResult()
	}
	reqs, _, err := namedRequests(inv, args)
	var pool config.PoolRequest
	if err == nil {
		pool, err = inv.conf.PoolRequested(args.Args)
	}
	if err != nil {
		return cniError(err, nil)
	}
	if len(reqs) == 0 && pool.Name == "" {
		return nil // ADD held nothing for this attachment
	}
	held, err := inv.as.Check(inv.att)
	if err == nil {
		held, err = poolHeld(inv, pool, reqs, held)
	}
	if err == nil {
		err = sameIPs(addrs(reqs), held)
	}
	return cniError(err, reqs)
}

// sameIPs fails CHECK when the record no longer matches what the config asks.
func sameIPs(want, held []netip.Addr) error {
	a, b := slices.Clone(want), slices.Clone(held)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	if !slices.Equal(a, b) {
		return fmt.Errorf("%w: the record holds %v but the config asks for %v", assigner.ErrDrift, b, a)
	}
	return nil
}

func cmdGC(args *skel.CmdArgs) error {
	inv, err := start(args, forOthers)
	if err != nil {
		return err
	}
	defer inv.done()
	keep := make([]assigner.Attachment, 0, len(inv.conf.ValidAttachments))
	for _, v := range inv.conf.ValidAttachments {
		keep = append(keep, assigner.Attachment{Network: inv.conf.Name, ContainerID: v.ContainerID, IfName: v.IfName})
	}
	err = inv.as.GC(inv.conf.Name, keep)
	// Also after a partial GC: the claims of what it did collect go now.
	gcClaims(inv, keep)
	return cniError(err, nil)
}

func cmdStatus(args *skel.CmdArgs) error {
	inv, err := start(args, forOthers)
	if err != nil {
		return err
	}
	defer inv.done()
	if err := inv.as.Ready(inv.conf.Families()); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	if err := poolsReady(inv); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	return nil
}

func addrs(reqs []config.IP) []netip.Addr {
	out := make([]netip.Addr, len(reqs))
	for i, r := range reqs {
		out[i] = r.Addr
	}
	return out
}

// printResult prints the main plugin's result as ADD's own, which a chained
// plugin that changes nothing in it must: the bytes as they came when they
// are in the config's cniVersion, else converted by the CNI library.
// Encoding the decoded result again would build encoding/json's encoders
// for the result types in this fresh process (figure: docs/performance.md,
// "Figures behind design choices"), and would drop
// what the library does not know.
func printResult(c *config.Config) error {
	if c.PrevResultJSON == nil {
		return types.PrintResult(c.PrevResult, c.CNIVersion)
	}
	out := make([]byte, 0, len(c.PrevResultJSON)+1)
	_, err := os.Stdout.Write(append(append(out, c.PrevResultJSON...), '\n'))
	return err
}
