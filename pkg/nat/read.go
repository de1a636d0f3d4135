package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/external-ip/external-ip/pkg/nat/nftconn"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// State is what our table steers, as read back from the kernel.
type State struct {
	// Present is false when the table does not exist.
	Present bool
	// Broken names what is missing or wrong of the table's fixed part (its
	// maps, base chains and their rules); Ensure mends it.
	Broken []string
	// Ingress maps each external IP to its targets in spread order.
	Ingress map[netip.Addr][]netip.Addr
	// Stray lists the external IPs whose ingress chain no element points at.
	Stray  []netip.Addr
	Egress map[EgressKey]netip.Addr
	// Hairpin lists the container subnets of the hairpin sets.
	Hairpin []netip.Prefix
	// Excluded lists the elements of the sets of flows no SNAT of ours
	// applies to.
	Excluded []intervals.Pair
}

// reading is one reading of the table back: its maps listed by name,
// its base chains' rules and each external IP's chain parsed.
type reading struct{ tab *Table }

// Read lists our table. It is for CHECK, GC, repair and status: it costs a
// dump per map and per external IP's chain.
func (t *Table) Read() (*State, error) {
	r := reading{tab: t}
	st := &State{Ingress: map[netip.Addr][]netip.Addr{}, Egress: map[EgressKey]netip.Addr{}}
	if !t.c.Exists() {
		return st, nil
	}
	st.Present = true
	chains, err := t.c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("listing chains of table inet %s: %w", TableName, err)
	}
	ours := map[string]*nftables.Chain{}
	for _, c := range chains {
		if c.Table.Name == TableName {
			ours[c.Name] = c
		}
	}
	if err := r.readBase(st, ours); err != nil {
		return nil, err
	}
	pointed, err := r.readIngress(st, ours)
	if err != nil {
		return nil, err
	}
	for name := range ours {
		if ip, ok := ingressChainIP(name); ok && !pointed[name] {
			st.Stray = append(st.Stray, ip)
		}
	}
	slices.SortFunc(st.Stray, netip.Addr.Compare)
	if err := r.readEgress(st); err != nil {
		return nil, err
	}
	if err := r.readHairpins(st); err != nil {
		return nil, err
	}
	return st, r.readExclusions(st)
}

// readBase checks that each base chain holds the rules Ensure puts there.
func (r reading) readBase(st *State, ours map[string]*nftables.Chain) error {
	for _, b := range baseChains(r.tab.mask()) {
		c, ok := ours[b.name]
		if !ok || c.Hooknum == nil || *c.Hooknum != *b.hook || c.Priority == nil || int32(*c.Priority) != b.priority {
			st.Broken = append(st.Broken, "chain "+b.name+" missing or not hooked at its priority")
			continue
		}
		rules, err := r.tab.c.DumpRules(b.name)
		if err != nil {
			return fmt.Errorf("listing rules of chain %s: %w", b.name, err)
		}
		got := make([]string, len(rules))
		for i, r := range rules {
			got[i] = nftconn.RuleSignature(r)
		}
		if want := b.signatures(); !slices.Equal(got, want) {
			st.Broken = append(st.Broken, fmt.Sprintf("chain %s holds rules %q, not %q", b.name, got, want))
		}
	}
	return nil
}

// elements lists a map's elements; ok is false when the map is missing.
// The library formats its listing errors with %v, so a missing map is
// found by listing the table's sets, not by the listing's ENOENT.
func (r reading) elements(name string) ([]nftables.SetElement, bool, error) {
	names, err := r.tab.c.SetNames()
	if err != nil || !names[name] {
		return nil, false, err
	}
	els, err := r.tab.c.GetSetElements(r.tab.set(name))
	if err != nil {
		return nil, false, fmt.Errorf("listing map %s: %w", name, err)
	}
	return els, true, nil
}

// readIngress reads each in4/in6 element and the chain it points at.
func (r reading) readIngress(st *State, ours map[string]*nftables.Chain) (map[string]bool, error) {
	pointed := map[string]bool{}
	for _, f := range []family{ipv4, ipv6} {
		els, ok, err := r.elements(f.in)
		if err != nil {
			return nil, err
		}
		if !ok {
			st.Broken = append(st.Broken, "map "+f.in+" missing")
		}
		ext, err := r.extIPs(f)
		if err != nil {
			return nil, err
		}
		if ext == nil { // a table made before the set was (Ensure adds it)
			st.Broken = append(st.Broken, "set "+f.ext+" missing")
		}
		if _, ok, err := r.elements(f.seen); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			st.Broken = append(st.Broken, "set "+f.seen+" missing")
		}
		if err := r.readDirect(st, f, ext); err != nil {
			return nil, err
		}
		for _, el := range els {
			ip, ok := netip.AddrFromSlice(el.Key)
			chain := nftconn.GotoChain(el.Val)
			if !ok || ours[chain] == nil {
				continue
			}
			pointed[chain] = true
			targets, err := r.readTargets(ours[chain])
			if err != nil {
				return nil, err
			}
			if chain != ingressChain(ip) || !ext[ip] {
				// Pointing at another IP's chain, or left out of the hairpin
				// rule's set: not steering as we would.
				targets = nil
			}
			if _, both := st.Ingress[ip]; both {
				// Also in dnat4, which in4's rule shadows: stray until mended.
				st.Stray = append(st.Stray, ip)
			}
			st.Ingress[ip] = targets
		}
	}
	return pointed, nil
}

// readDirect reads the dnat4/dnat6 elements: IPs with one target each.
func (r reading) readDirect(st *State, f family, ext map[netip.Addr]bool) error {
	els, ok, err := r.elements(f.direct)
	if err != nil {
		return err
	}
	if !ok {
		st.Broken = append(st.Broken, "map "+f.direct+" missing")
	}
	for _, el := range els {
		ip, okIP := netip.AddrFromSlice(el.Key)
		target, okT := netip.AddrFromSlice(el.Val)
		if !okIP || !okT {
			continue
		}
		st.Ingress[ip] = nil // left out of ext4: not steering as we would
		if ext[ip] {
			st.Ingress[ip] = []netip.Addr{target}
		}
	}
	return nil
}

// extIPs reads the hairpin rule's set of external IPs.
func (r reading) extIPs(f family) (map[netip.Addr]bool, error) {
	els, ok, err := r.elements(f.ext)
	if err != nil || !ok {
		return nil, err // nil: the set is missing
	}
	out := map[netip.Addr]bool{}
	for _, el := range els {
		if ip, ok := netip.AddrFromSlice(el.Key); ok {
			out[ip] = true
		}
	}
	return out, nil
}

// readTargets parses a spreading chain's one rule: dnat to numgen inc mod
// N over a map of exactly N targets. Anything else reads as no target: a
// rule that does not DNAT, or whose modulus leaves targets out or draws
// slots the map lacks, does not steer as we would.
func (r reading) readTargets(c *nftables.Chain) ([]netip.Addr, error) {
	rules, err := r.tab.c.GetRules(r.tab.table, c)
	if err != nil {
		return nil, fmt.Errorf("listing rules of chain %s: %w", c.Name, err)
	}
	if len(rules) != 1 {
		return nil, nil
	}
	var mod uint32
	var set string
	dnat := false
	for _, e := range rules[0].Exprs {
		switch e := e.(type) {
		case *expr.Numgen:
			mod = e.Modulus
		case *expr.Lookup:
			set = e.SetName
		case *expr.NAT:
			dnat = e.Type == expr.NATTypeDestNAT
		}
	}
	if !dnat || set == "" {
		return nil, nil
	}
	targets, err := r.readSpread(set)
	if err != nil || int(mod) != len(targets) {
		return nil, err
	}
	return targets, nil
}

func (r reading) readSpread(name string) ([]netip.Addr, error) {
	s, err := r.tab.c.GetSetByName(r.tab.table, name)
	if err != nil {
		return nil, fmt.Errorf("reading map %s: %w", name, err)
	}
	els, err := r.tab.c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("listing map %s: %w", name, err)
	}
	out := make([]netip.Addr, len(els))
	for _, el := range els {
		i := int(binary.NativeEndian.Uint32(el.Key))
		a, ok := netip.AddrFromSlice(el.Val)
		if len(el.Key) != 4 || i >= len(out) || !ok {
			return nil, nil
		}
		out[i] = a
	}
	return out, nil
}

func (r reading) readEgress(st *State) error {
	for _, f := range []family{ipv4, ipv6} {
		els, ok, err := r.elements(f.snat)
		if err != nil {
			return err
		}
		if !ok {
			st.Broken = append(st.Broken, "map "+f.snat+" missing")
		}
		for _, el := range els {
			src, okS := netip.AddrFromSlice(el.Key[:min(len(el.Key), int(f.addrLen))])
			ip, okI := netip.AddrFromSlice(el.Val)
			if okS && okI && len(el.Key) > int(f.addrLen) {
				st.Egress[EgressKey{Source: src, Uplink: nftconn.CString(el.Key[f.addrLen:])}] = ip
			}
		}
	}
	return nil
}

func (r reading) readHairpins(st *State) error {
	return r.readIntervals(st, func(f family) string { return f.hp }, func(el nftables.SetElement, n int) {
		if p, ok := intervals.ParseSame(el, n); ok {
			st.Hairpin = append(st.Hairpin, p)
		}
	})
}

func (r reading) readExclusions(st *State) error {
	return r.readIntervals(st, func(f family) string { return f.nosnat }, func(el nftables.SetElement, n int) {
		if p, ok := intervals.Parse(el, n); ok {
			st.Excluded = append(st.Excluded, p)
		}
	})
}

// readIntervals hands each element of both families' interval set that
// name gives to take, with the length of the family's addresses.
func (r reading) readIntervals(st *State, name func(family) string, take func(el nftables.SetElement, n int)) error {
	for _, f := range []family{ipv4, ipv6} {
		els, ok, err := r.elements(name(f))
		if err != nil {
			return err
		}
		if !ok {
			st.Broken = append(st.Broken, "set "+name(f)+" missing")
		}
		for _, el := range els {
			take(el, int(f.addrLen))
		}
	}
	return nil
}
