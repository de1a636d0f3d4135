package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxIPs bounds the IPs one attachment may hold, so that a hostile
// annotation cannot make one ADD do unbounded work.
const MaxIPs = 256

// CNIArgsKey is the CNI_ARGS key that podman and cnitool users set.
const CNIArgsKey = "EXTERNAL_IPS"

// IP is one requested external IP and where it came from, for messages.
type IP struct {
	Addr   netip.Addr
	Source string
}

// Requests gathers the IPs an ADD asks for from every source, validated and
// with duplicates collapsed (the first source that named an IP is kept). The
// static list in the config is trusted; every other source must fall in
// allowedRanges.
func (c *Config) Requests(cniArgs string) ([]IP, error) {
	return c.requests(cniArgs, c.allowed)
}

// RequestsInPools is Requests for a cluster that has pools: the IPs that
// a request names are not held to allowedRanges, since the cluster's pools
// decide them (the node process claims each, or refuses it); named are
// those, the static list's are not among them.
func (c *Config) RequestsInPools(cniArgs string) (all, named []IP, err error) {
	all, err = c.requests(cniArgs, func(netip.Addr) bool { return true })
	if err != nil {
		return nil, nil, err
	}
	return all, all[len(c.static):], nil
}

func (c *Config) requests(cniArgs string, allowed func(netip.Addr) bool) ([]IP, error) {
	if c.requestedErr != nil {
		return nil, c.requestedErr
	}
	fromArgs, err := externalIPsFromArgs(cniArgs)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(c.static)
	seen := map[netip.Addr]bool{}
	for _, ip := range out {
		seen[ip.Addr] = true
	}
	for _, src := range append(c.requested, source{name: "CNI_ARGS " + CNIArgsKey, values: fromArgs}) {
		for i, v := range src.values {
			where := fmt.Sprintf("%s[%d]", src.name, i)
			addr, err := c.check(where, v, allowed)
			if err != nil {
				return nil, err
			}
			if !seen[addr] {
				seen[addr] = true
				out = append(out, IP{Addr: addr, Source: where})
			}
		}
	}
	if len(out) > MaxIPs {
		return nil, invalidf("external IPs: %d requested, at most %d per attachment", len(out), MaxIPs)
	}
	return out, nil
}

// source is one place requested IPs come from, in the order they are read.
type source struct {
	name   string
	values []string
}

// setSources checks the static list, which is config, and decodes the
// runtime's sources for Requests.
func (c *Config) setSources(raw *netConf) error {
	c.static, c.requested, c.requestedErr = nil, nil, nil
	static, err := decodeIPList("externalIPs", raw.ExternalIPs)
	if err != nil {
		return err
	}
	seen := map[netip.Addr]bool{}
	for i, v := range static {
		where := fmt.Sprintf("externalIPs[%d]", i)
		addr, err := c.check(where, v, func(netip.Addr) bool { return true })
		if err != nil {
			return err
		}
		if !seen[addr] {
			seen[addr] = true
			c.static = append(c.static, IP{Addr: addr, Source: where})
		}
	}
	c.requested = []source{{name: "runtimeConfig.externalIPs"}, {name: "args.cni.externalIPs"}}
	for i, rawList := range []json.RawMessage{raw.RuntimeConfig.ExternalIPs, raw.Args.CNI.ExternalIPs} {
		if c.requested[i].values, err = decodeIPList(c.requested[i].name, rawList); err != nil {
			c.requestedErr = err
			return nil
		}
	}
	c.requested = append(c.requested, source{
		name:   "pod annotation " + c.PodAnnotation,
		values: splitList(raw.RuntimeConfig.PodAnnotations[c.PodAnnotation]),
	})
	c.Pool = strings.TrimSpace(raw.RuntimeConfig.PodAnnotations[PoolAnnotation])
	return nil
}

// check refuses what can never be an external IP, whatever the host, and
// what allowed does not allow.
func (c *Config) check(where, v string, allowed func(netip.Addr) bool) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(v))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, invalidf("%s: %q is not an IP address", where, v)
	}
	if reason := unusable(a); reason != "" {
		return netip.Addr{}, invalidf("%s: %q is %s", where, v, reason)
	}
	if allowed(a) {
		return a, nil
	}
	if len(c.AllowedRanges) == 0 {
		return netip.Addr{}, invalidf("%s: %q refused: allowedRanges is empty, so only the static externalIPs list may be used", where, v)
	}
	return netip.Addr{}, invalidf("%s: %q is outside allowedRanges %s", where, v, c.rangesText())
}

// unusable says why a can never be an external IP, "" when it can be.
func unusable(a netip.Addr) string {
	switch {
	case a.Is4In6():
		return "an IPv4-mapped IPv6 address"
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsLoopback():
		return "a loopback address"
	case a.IsMulticast():
		return "a multicast address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	case a.Is4() && a.As4()[0] == 0:
		// RFC 1122 3.2.1.3: a host sends from it only while it learns
		// its own address; no LAN host would route replies to it.
		return `in 0.0.0.0/8 ("this network"), which no host may send from`
	case a.Is4() && a.As4()[0] >= 240:
		return "in 240.0.0.0/4, reserved" // RFC 6890: reserved for future use
	case a.Is6() && [12]byte(a.AsSlice()) == [12]byte{}:
		// :: and ::1 are refused above; the rest of ::/96 embeds an IPv4
		// address the way RFC 4291 2.5.5.1 deprecated.
		return "an IPv4-compatible IPv6 address (::/96, deprecated)"
	}
	return ""
}

func (c *Config) allowed(a netip.Addr) bool {
	for _, p := range c.AllowedRanges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (c *Config) rangesText() string {
	s := make([]string, len(c.AllowedRanges))
	for i, p := range c.AllowedRanges {
		s[i] = p.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

// externalIPsFromArgs reads EXTERNAL_IPS from CNI_ARGS ("K=V;K=V"). Other keys
// belong to the runtime (K8S_POD_NAME, IgnoreUnknown...) and are ignored.
func externalIPsFromArgs(cniArgs string) ([]string, error) {
	var out []string
	err := eachArg(cniArgs, func(k, v string) {
		if k == CNIArgsKey {
			out = append(out, splitList(v)...)
		}
	})
	return out, err
}

// eachArg calls f with each KEY=VALUE pair of CNI_ARGS.
func eachArg(cniArgs string, f func(k, v string)) error {
	for _, pair := range strings.Split(cniArgs, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return argsf("CNI_ARGS: %q is not a KEY=VALUE pair", pair)
		}
		f(k, v)
	}
	return nil
}

// Pod is the pod an ADD is for, as containerd and CRI-O name it in
// CNI_ARGS: K8S_POD_NAMESPACE, K8S_POD_NAME and K8S_POD_UID (containerd
// from 1.4, CRI-O from 1.18; empty when the runtime is not a kubelet's).
type Pod struct{ Namespace, Name, UID string }

// PodFromArgs reads the pod's identity from CNI_ARGS.
func PodFromArgs(cniArgs string) (Pod, error) {
	var p Pod
	err := eachArg(cniArgs, func(k, v string) {
		switch k {
		case "K8S_POD_NAMESPACE":
			p.Namespace = v
		case "K8S_POD_NAME":
			p.Name = v
		case "K8S_POD_UID":
			p.UID = v
		}
	})
	return p, err
}

// splitList splits a comma-separated list, dropping empty items so that a
// trailing comma or an empty annotation asks for nothing.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// decodeIPList accepts a JSON list of strings, or one comma-separated
// string, since both shapes reach us from runtimes and Multus cni-args.
func decodeIPList(field string, raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return splitList(one), nil
	}
	return nil, decodef("%s: want a list of IP address strings, got %s", field, truncate(raw, 64))
}

// truncate shows raw JSON in a one-line message: compacted, since a
// RawMessage keeps the newlines of a pretty-printed config, and cut at a rune
// boundary.
func truncate(b []byte, n int) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) == nil {
		b = buf.Bytes()
	}
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "..."
}

// Families says which address families this network may hold: those of the
// static list and of allowedRanges. STATUS checks reachability for them.
func (c *Config) Families() (v4, v6 bool) {
	for _, ip := range c.static {
		v4, v6 = v4 || ip.Addr.Is4(), v6 || ip.Addr.Is6()
	}
	for _, p := range c.AllowedRanges {
		v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
	}
	return v4, v6
}
