package main

import (
	"net/netip"
	"os"
	"time"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
)

// session is ADD's announce.Session, which the assigner asks to probe
// before the lock and to send the first round under it, both for the IPs
// it placed.
func session(inv *invocation) *announce.Session {
	return announce.NewSession(announce.SessionOptions{
		Rounds: inv.conf.Announce.Count, Interval: inv.conf.Announce.Interval,
		Log: inv.logTo, Logger: inv.log, Keeper: inv.keep, HeldHere: heldHere(inv.conf), StandsBy: inv.conf.Standby,
		Owner: &announce.Owner{
			DataDir: inv.conf.DataDir, Device: inv.conf.Device,
			Network: inv.att.Network, ContainerID: inv.att.ContainerID, IfName: inv.att.IfName,
		},
	})
}

// refusalLockWait bounds how long a conflict's refusal waits for the
// state lock to say whether this node holds the address: the refusal
// stands either way, so it does not wait a whole lockTimeout.
const refusalLockWait = time.Second

// heldHere answers the session's question after a conflict from the state,
// with an Assigner of its own: the probes run concurrently, before ADD's
// Assigner takes the lock.
func heldHere(conf *config.Config) func(netip.Addr) (bool, bool) {
	return func(ip netip.Addr) (bool, bool) {
		as := assigner.New(assigner.Options{Device: conf.Device, DataDir: conf.DataDir, LockTimeout: min(conf.LockTimeout, refusalLockWait)})
		defer as.Close()
		held, err := as.Holds(ip)
		return held, err == nil
	}
}

// runAnnouncer is the detached process's whole life. It logs each round
// it sends, as the ADD that started it logged the first, and sends only
// the IPs its attachment still holds.
func runAnnouncer(env string) int {
	plan, err := announce.PlanFromEnv(env)
	if err != nil {
		return 1
	}
	log, done, _ := logOrDiscard(plan.Log)
	defer done()
	r := announce.Runner{Report: func(round int, err error) {
		attrs := []any{"uplink", plan.Uplink.Name, "ips", plan.IPs, "round", round, "pid", os.Getpid()}
		if err != nil {
			log.Warn("announcement round failed", append(attrs, "error", err)...)
			return
		}
		log.Info("announced", attrs...)
	}}
	if o := plan.Owner; o != nil {
		as := assigner.New(assigner.Options{Device: o.Device, DataDir: o.DataDir, LockTimeout: config.DefaultLockTimeout})
		att := assigner.Attachment{Network: o.Network, ContainerID: o.ContainerID, IfName: o.IfName}
		r.WhileHeld = func(ips []netip.Addr, send func([]netip.Addr) error) error { return as.WhileHeld(att, ips, send) }
	}
	if r.Run(plan) != nil {
		return 1
	}
	return 0
}
