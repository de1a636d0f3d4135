package upkeep

import (
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/sys/unix"
)

// defendInterval is RFC 5227's DEFEND_INTERVAL: after defending an IP once,
// a host must not defend it again within this time (section 2.4 (b)), or
// two hosts defending the same IP flood the LAN.
const defendInterval = 10 * time.Second

// episodeQuiet ends an episode: a claimant not heard for this long has
// likely given the IP up. A host using an IP re-resolves its neighbours
// within a minute or two, with requests that carry its sender IP.
const episodeQuiet = 5 * time.Minute

// namedPerEpisode bounds the claimant MACs an episode names in the log. A
// host claiming an IP from rotating MACs must not grow the node's memory,
// its log or Prometheus' series with each: an episode is one IP's, as
// MetalLB keys its layer-2 series by IP alone, and its series keeps the
// MAC that began it.
const namedPerEpisode = 8

// conflicts decides, from the frames the uplinks receive, when another
// host claims an IP we hold: an ARP packet (request, reply, gratuitous)
// whose sender IP is ours, or a neighbour advertisement whose target is
// ours, from a MAC that is not one of the node's. It has no socket: the
// listener feeds it frames, so that it is tested without root. What it
// keeps is bounded by the IPs the node holds, whatever the LAN sends: one
// episode per held IP, with at most namedPerEpisode MACs.
type conflicts struct {
	held     map[netip.Addr]HeldIP
	uplinks  map[string]net.HardwareAddr // each uplink's own MAC, for the log
	ours     map[string]bool             // every MAC of the node
	episodes map[netip.Addr]*episode
	defended map[netip.Addr]time.Time
	log      *slog.Logger
	rec      Recorder
	defend   func(h HeldIP)
}

// episode is a time in which other hosts claim one held IP.
type episode struct {
	first net.HardwareAddr // began it: its series' MAC
	last  time.Time        // a claim was last heard
	named map[string]bool  // the MACs logged, at most namedPerEpisode
	more  bool             // a MAC past those was heard, and logged once
}

func newConflicts(log *slog.Logger, rec Recorder, defend func(HeldIP)) *conflicts {
	return &conflicts{held: map[netip.Addr]HeldIP{}, uplinks: map[string]net.HardwareAddr{}, ours: map[string]bool{},
		episodes: map[netip.Addr]*episode{}, defended: map[netip.Addr]time.Time{}, log: log, rec: rec, defend: defend}
}

// setHeld replaces what the node holds and the MACs that are the node's;
// episodes of IPs no longer held, or quiet too long, end.
func (c *conflicts) setHeld(held []HeldIP, uplinks map[string]net.HardwareAddr, ours []net.HardwareAddr, now time.Time) {
	c.held = map[netip.Addr]HeldIP{}
	for _, h := range held {
		c.held[h.IP] = h
	}
	c.uplinks = uplinks
	c.ours = map[string]bool{}
	for _, m := range ours {
		c.ours[m.String()] = true
	}
	for ip, e := range c.episodes {
		if _, ok := c.held[ip]; !ok || now.Sub(e.last) >= episodeQuiet {
			c.end(ip, e)
		}
	}
	for ip := range c.defended {
		if _, ok := c.held[ip]; !ok {
			delete(c.defended, ip)
		}
	}
}

func (c *conflicts) end(ip netip.Addr, e *episode) {
	delete(c.episodes, ip)
	c.rec.ConflictEnded(ip, e.first)
	c.log.Info("conflict over", "ip", ip, "theirs", e.first.String(), "macs", len(e.named))
}

// seen takes one frame received on uplink.
func (c *conflicts) seen(uplink string, frame []byte, now time.Time) {
	ip, mac, ok := claimIn(frame)
	if !ok || c.ours[mac.String()] {
		return
	}
	h, held := c.held[ip]
	if !held || h.Uplink != uplink {
		return // a claim on another LAN than the one we announce it on
	}
	c.claimed(ip, mac, uplink, now)
	if last, ok := c.defended[ip]; !ok || now.Sub(last) >= defendInterval {
		c.defended[ip] = now
		c.defend(h)
	}
}

// claimed begins ip's episode, or names a new claimant in it while it
// names fewer than namedPerEpisode, and says once when more claim it.
func (c *conflicts) claimed(ip netip.Addr, mac net.HardwareAddr, uplink string, now time.Time) {
	e := c.episodes[ip]
	theirs := mac.String()
	switch {
	case e == nil:
		e = &episode{first: mac, named: map[string]bool{theirs: true}}
		c.episodes[ip] = e
		c.rec.ConflictBegan(ip, mac)
		c.log.Warn("conflict: another host claims a held IP", "ip", ip, "uplink", uplink,
			"theirs", theirs, "ours", c.uplinks[uplink].String())
	case e.named[theirs]:
	case len(e.named) < namedPerEpisode:
		e.named[theirs] = true
		c.log.Warn("conflict: one more host claims a held IP", "ip", ip, "uplink", uplink, "theirs", theirs, "macs", len(e.named))
	case !e.more:
		e.more = true
		c.log.Warn("conflict: more hosts claim a held IP; the next are not logged until the episode ends",
			"ip", ip, "uplink", uplink, "theirs", theirs, "logged", namedPerEpisode)
	}
	e.last = now
}

// claimIn returns the IP and MAC an Ethernet frame claims: the sender of an
// ARP packet (a probe, whose sender IP is 0.0.0.0, claims nothing), or the
// target of a neighbour advertisement with its target link-layer address
// (else the frame's source). Routed NAs (hop limit not 255) are ignored,
// as RFC 4861 section 7.1.2 requires.
func claimIn(frame []byte) (netip.Addr, net.HardwareAddr, bool) {
	var f ethernet.Frame
	if f.UnmarshalBinary(frame) != nil {
		return netip.Addr{}, nil, false
	}
	switch f.EtherType {
	case ethernet.EtherTypeARP:
		var p arp.Packet
		if p.UnmarshalBinary(f.Payload) != nil || !p.SenderIP.Is4() || p.SenderIP.IsUnspecified() {
			return netip.Addr{}, nil, false
		}
		return p.SenderIP, p.SenderHardwareAddr, true
	case ethernet.EtherTypeIPv6:
		return naClaim(f.Source, f.Payload)
	}
	return netip.Addr{}, nil, false
}

// ipv6HeaderLen is the fixed IPv6 header; neighbour discovery uses no
// extension headers.
const ipv6HeaderLen = 40

func naClaim(src net.HardwareAddr, p []byte) (netip.Addr, net.HardwareAddr, bool) {
	if len(p) < ipv6HeaderLen || p[0]>>4 != 6 || p[6] != unix.IPPROTO_ICMPV6 || p[7] != 255 {
		return netip.Addr{}, nil, false
	}
	end := ipv6HeaderLen + int(binary.BigEndian.Uint16(p[4:6]))
	if end > len(p) {
		return netip.Addr{}, nil, false
	}
	m, err := ndp.ParseMessage(p[ipv6HeaderLen:end])
	na, ok := m.(*ndp.NeighborAdvertisement)
	if err != nil || !ok {
		return netip.Addr{}, nil, false
	}
	mac := src
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
			mac = lla.Addr
		}
	}
	return na.TargetAddress, mac, true
}
