package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"

	"github.com/external-ip/external-ip/pkg/pools/iprange"
)

// PoolArgsKey is the CNI_ARGS key that asks for a free IP of a pool
// (podman, cnitool); runtimeConfig's is externalIPPool.
const PoolArgsKey = "EXTERNAL_IP_POOL"

// LocalPool is one pool of the config's `pools`: IPs this node gives out
// itself, one owner at a time, with no cluster behind it.
type LocalPool struct {
	Name   string
	Ranges iprange.Ranges
}

// PoolRequest is the pool an ADD asks for and where it was asked, for
// messages; an empty Name asks for none.
type PoolRequest struct{ Name, Source string }

// Pool sources, as messages name them.
const (
	poolFromAnnotation = "pod annotation " + PoolAnnotation
	poolFromRuntime    = "runtimeConfig.externalIPPool"
	poolFromArgs       = "CNI_ARGS " + PoolArgsKey
)

// FromAnnotation says whether the pod's annotation asked: the cluster's
// request, which the node process serves when the config has no such pool.
func (r PoolRequest) FromAnnotation() bool { return r.Source == poolFromAnnotation }

// setPools reads `pools` (name -> ranges) and runtimeConfig's pool
// request. A pool's ranges must lie in allowedRanges, which stays the
// admin's one statement of what this network may hold; pools may not
// overlap, so that an IP is given by one pool; and no IP of the static
// list may lie in a pool, since every attachment holds those.
func (c *Config) setPools(raw *netConf) error {
	c.Pools = nil
	if err := c.setPoolRequest(raw); err != nil {
		return err
	}
	if len(raw.Pools) == 0 || string(raw.Pools) == "null" {
		return nil
	}
	var byName map[string][]string
	if err := json.Unmarshal(raw.Pools, &byName); err != nil {
		return decodef("pools: want an object of pool name to a list of ranges, got %s", truncate(raw.Pools, 64))
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p, err := c.readPool(n, byName[n])
		if err != nil {
			return err
		}
		c.Pools = append(c.Pools, p)
	}
	return c.staticOutsidePools()
}

func (c *Config) setPoolRequest(raw *netConf) error {
	c.poolRuntime = ""
	if len(raw.RuntimeConfig.ExternalIPPool) == 0 || string(raw.RuntimeConfig.ExternalIPPool) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw.RuntimeConfig.ExternalIPPool, &c.poolRuntime); err != nil {
		c.requestedErr = decodef("%s: want a pool name string, got %s", poolFromRuntime, truncate(raw.RuntimeConfig.ExternalIPPool, 64))
	}
	c.poolRuntime = strings.TrimSpace(c.poolRuntime)
	return nil
}

// readPool checks one pool: its name, its ranges, and their place among
// allowedRanges and the pools read before it.
func (c *Config) readPool(name string, texts []string) (LocalPool, error) {
	if reason := badPoolName(name); reason != "" {
		return LocalPool{}, invalidf("pools: %q %s", name, reason)
	}
	field := "pools." + name
	rs, err := iprange.Parse(field, texts)
	if err != nil {
		return LocalPool{}, invalidf("%v", err)
	}
	allowed := c.allowedSet()
	for i, r := range rs {
		where := fmt.Sprintf("%s[%d]: %q", field, i, r.Text)
		if what := iprange.Unusable(r); what != "" {
			return LocalPool{}, invalidf("%s holds %s", where, what)
		}
		if len(c.AllowedRanges) == 0 {
			return LocalPool{}, invalidf("%s refused: allowedRanges is empty, and a pool's ranges must lie in it", where)
		}
		if !allowed.ContainsRange(r.Cover) {
			return LocalPool{}, invalidf("%s is not inside allowedRanges %s", where, c.rangesText())
		}
		for _, o := range c.Pools {
			if _, theirs, ok := iprange.Overlap(iprange.Ranges{r}, o.Ranges); ok {
				return LocalPool{}, invalidf("%s overlaps %q of pool %s: an IP is given by one pool", where, theirs, o.Name)
			}
		}
	}
	return LocalPool{Name: name, Ranges: rs}, nil
}

// badPoolName says why a pool name is refused, "" when it is not: the
// characters of a Kubernetes object's name and label values, upper case
// too, so that it reads the same in CNI_ARGS, a log line and a message.
func badPoolName(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > 63:
		return "is longer than 63 bytes"
	case strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_')
	}):
		return "may hold only letters, digits, '-', '.' and '_'"
	}
	return ""
}

func (c *Config) allowedSet() *netipx.IPSet {
	var b netipx.IPSetBuilder
	for _, p := range c.AllowedRanges {
		b.AddPrefix(p)
	}
	s, _ := b.IPSet() // prefixes parsed by setRanges build a set
	return s
}

// staticOutsidePools refuses a static IP in a pool: the static list is
// held by every attachment of the network, a pool's IP by one owner.
func (c *Config) staticOutsidePools() error {
	for _, ip := range c.static {
		if p := c.PoolCovering(ip.Addr); p != nil {
			return invalidf("%s: %q lies in pool %s, whose IPs belong to one owner at a time; every attachment holds the static list", ip.Source, ip.Addr, p.Name)
		}
	}
	return nil
}

// LocalPool is the config's pool of that name, nil when it has none.
func (c *Config) LocalPool(name string) *LocalPool {
	for i := range c.Pools {
		if c.Pools[i].Name == name {
			return &c.Pools[i]
		}
	}
	return nil
}

// PoolCovering is the config's pool whose ranges cover ip, nil when none
// does (pools do not overlap).
func (c *Config) PoolCovering(ip netip.Addr) *LocalPool {
	for i := range c.Pools {
		if c.Pools[i].Ranges.Covers(ip) {
			return &c.Pools[i]
		}
	}
	return nil
}

// PoolNames are the config's pools' names, for messages.
func (c *Config) PoolNames() []string {
	out := make([]string, len(c.Pools))
	for i, p := range c.Pools {
		out[i] = p.Name
	}
	return out
}

// PoolRequested is the pool the ADD asks for: named by the pod annotation
// external-ip/pool, runtimeConfig.externalIPPool or CNI_ARGS
// EXTERNAL_IP_POOL. An attachment draws from one pool: two sources that
// name different pools are refused.
func (c *Config) PoolRequested(cniArgs string) (PoolRequest, error) {
	if c.requestedErr != nil {
		return PoolRequest{}, c.requestedErr
	}
	var fromArgs string
	err := eachArg(cniArgs, func(k, v string) {
		if k == PoolArgsKey {
			fromArgs = strings.TrimSpace(v)
		}
	})
	if err != nil {
		return PoolRequest{}, err
	}
	var got PoolRequest
	for _, r := range []PoolRequest{{c.Pool, poolFromAnnotation}, {c.poolRuntime, poolFromRuntime}, {fromArgs, poolFromArgs}} {
		switch {
		case r.Name == "":
		case got.Name == "":
			got = r
		case got.Name != r.Name:
			return PoolRequest{}, invalidf("%s: %q differs from %s %q: an attachment draws from one pool", r.Source, r.Name, got.Source, got.Name)
		}
	}
	return got, nil
}
