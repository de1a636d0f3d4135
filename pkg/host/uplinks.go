package host

import (
	"errors"
	"net/netip"
	"strings"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/store"
)

// Uplinks resolves each uplink once per call, and chooses an IP's.
type Uplinks struct {
	k Kernel
	// configured names every IP's uplink; "" chooses each IP's from its
	// route.
	configured string
	// DownOK takes an uplink that is down as it is: the node process's
	// move of a held IP to standby must work while its uplink is down
	// (that is when the health gate yields), and sends nothing on it.
	DownOK bool
	byIdx  map[int]Uplink
	byName map[string]Uplink
}

// NewUplinks begins a call's uplink lookups, knowing none; configured is
// the network's "uplink", "" for none.
func NewUplinks(k Kernel, configured string) *Uplinks {
	return &Uplinks{k: k, configured: configured}
}

// ByName looks the uplink up once per call.
func (c *Uplinks) ByName(name string) (Uplink, error) {
	up, ok := c.byName[name]
	if !ok {
		var err error
		if up, err = c.k.UplinkByName(name); err != nil {
			return up, err
		}
		c.remember(up)
	}
	return c.usable(up)
}

// ByIndex looks the uplink up once per call.
func (c *Uplinks) ByIndex(index int) (Uplink, error) {
	up, ok := c.byIdx[index]
	if !ok {
		var err error
		if up, err = c.k.UplinkByIndex(index); err != nil {
			return up, err
		}
		c.remember(up)
	}
	return c.usable(up)
}

// usable refuses an uplink that is down, unless DownOK.
func (c *Uplinks) usable(up Uplink) (Uplink, error) {
	if up.Down && !c.DownOK {
		return Uplink{}, errorf(ErrRefused, "uplink %s: is down", up.Name)
	}
	return up, nil
}

func (c *Uplinks) remember(up Uplink) {
	if c.byIdx == nil {
		c.byIdx, c.byName = map[int]Uplink{}, map[string]Uplink{}
	}
	c.byIdx[up.Index], c.byName[up.Name] = up, up
}

// Index is the uplink's interface index as this call found it, so that
// making its routes need not ask again; 0 when it is not known.
func (c *Uplinks) Index(name string) int {
	up, err := c.ByName(name)
	if err != nil {
		return 0
	}
	return up.Index
}

// Gone says whether the interface named name no longer exists; any other
// answer (down, a lookup error) leaves an IP where it is.
func (c *Uplinks) Gone(name string) bool {
	_, err := c.ByName(name)
	return errors.Is(err, ErrNoLink)
}

// For is the configured uplink, else the interface of the route to ip
// (r, looked up before ip was ours).
func (c *Uplinks) For(ip netip.Addr, r Route) (Uplink, error) {
	if c.configured != "" {
		return c.ByName(c.configured)
	}
	if on := r.On(ip); on != 0 {
		// Already on the holder with no index entry (put there by hand, or
		// the index lost): the FIB hides the route, so look in the main
		// table, past the holder's own route.
		var err error
		if r, err = c.k.MainRoute(ip, on); err != nil {
			return Uplink{}, err
		}
	}
	if r.Dev == 0 {
		return Uplink{}, errorf(ErrRefused, "%s: no route to it to choose an uplink; set \"uplink\"", ip)
	}
	// Chosen from ip's route, so a fault of it (down, gone) is about ip.
	up, err := c.ByIndex(r.Dev)
	return up, AboutIP(ip, err)
}

// Recover finds an uplink for an IP whose index entry was lost; an empty
// answer only costs the IPv6 proxy entry until the next ADD.
func (c *Uplinks) Recover(ip netip.Addr) string {
	r, err := c.k.Lookup(ip)
	if err != nil {
		return ""
	}
	up, err := c.For(ip, r)
	if err != nil {
		return ""
	}
	return up.Name
}

// Ready says whether the LAN could reach external IPs of the families
// asked, held the way how says: through the configured uplink, or the
// default route's.
func (c *Uplinks) Ready(how store.HeldAs, v4, v6 bool) error {
	var errs []error
	if v4 {
		errs = append(errs, c.readyFamily(netip.IPv4Unspecified(), how))
	}
	if v6 {
		errs = append(errs, c.readyFamily(netip.IPv6Unspecified(), how))
	}
	return errors.Join(errs...)
}

// readyFamily checks the configured uplink, or the default route's.
func (c *Uplinks) readyFamily(any netip.Addr, how store.HeldAs) error {
	if c.configured != "" {
		up, err := c.ByName(c.configured)
		if err != nil {
			return err
		}
		return c.k.Reachable(up, any.Is6(), how)
	}
	r, err := c.k.MainRoute(any, 0)
	if err != nil || r.Dev == 0 {
		// No default route: uplinks come from connected routes per IP, and
		// ADD checks each; only the node-wide ARP setting can be judged here.
		if any.Is6() {
			return nil
		}
		return c.k.Reachable(Uplink{Name: "all"}, false, how)
	}
	up, err := c.ByIndex(r.Dev)
	if err != nil {
		return err
	}
	return c.k.Reachable(up, any.Is6(), how)
}

// AboutIP prefixes err's message with the IP it concerns, keeping its
// kind, so that the plugin can say which request the IP came from.
func AboutIP(ip netip.Addr, err error) error {
	// An error already about ip (an uplink chosen for it) keeps one prefix.
	if err == nil || strings.HasPrefix(err.Error(), ip.String()+": ") {
		return err
	}
	return errkind.Prefix(ip.String(), err)
}
