package pools

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/pools/iprange"
)

// Reasons a pool gives no IP, its Ready condition's reason.
const (
	ReasonInvalid  = "Invalid"
	ReasonOverlaps = "Overlaps"
	ReasonReady    = "Ready"
)

// Pool is one pool as the node process uses it.
type Pool struct {
	Obj    *v1alpha1.ExternalIPPool
	Ranges Ranges
	// Reason and Refused say why the pool gives no IP; Reason is
	// ReasonReady when it gives them.
	Reason, Refused string

	namespaces labels.Selector // nil: no namespace by label
	nodes      labels.Selector
}

// Name is the pool's name.
func (p *Pool) Name() string { return p.Obj.Name }

// Ready says whether the pool gives IPs.
func (p *Pool) Ready() bool { return p.Reason == ReasonReady }

// Set is every pool, each read and decided.
type Set struct {
	byName map[string]*Pool
	// byAge are the pools whose ranges parse, oldest first: the order in
	// which overlaps are settled and IPs looked up.
	byAge []*Pool
}

// Resolve reads every pool and decides which give IPs. Of pools whose
// ranges overlap, the oldest gives them (created first, then by name) and
// the others give none: every node process, seeing the same objects,
// decides the same, and an IP never lies in two pools that give it. The
// admission policy refuses overlaps at the API; this holds without it.
func Resolve(objs []*v1alpha1.ExternalIPPool) *Set {
	s := &Set{byName: make(map[string]*Pool, len(objs))}
	for _, o := range objs {
		p := read(o)
		s.byName[o.Name] = p
		if p.Ranges != nil {
			s.byAge = append(s.byAge, p)
		}
	}
	slices.SortFunc(s.byAge, func(a, b *Pool) int {
		ta, tb := a.Obj.CreationTimestamp.Time, b.Obj.CreationTimestamp.Time
		return cmp.Or(ta.Compare(tb), strings.Compare(a.Name(), b.Name()))
	})
	var given []*Pool
	for _, p := range s.byAge {
		if !p.Ready() {
			continue
		}
		for _, q := range given {
			if mine, theirs, ok := Overlap(p.Ranges, q.Ranges); ok {
				p.Reason = ReasonOverlaps
				p.Refused = fmt.Sprintf("spec.ranges: %s overlaps %s of pool %s, which is older: change or delete one of them", mine, theirs, q.Name())
				break
			}
		}
		if p.Ready() {
			given = append(given, p)
		}
	}
	return s
}

// read parses one pool; a pool that does not parse is kept, refused.
func read(o *v1alpha1.ExternalIPPool) *Pool {
	p := &Pool{Obj: o, Reason: ReasonReady}
	texts := make([]string, len(o.Spec.Ranges))
	for i, r := range o.Spec.Ranges {
		texts[i] = string(r)
	}
	var err error
	if p.Ranges, err = ParseRanges(texts); err == nil {
		err = usable(p.Ranges)
	}
	if err == nil {
		p.namespaces, err = selector("spec.namespaceSelector", o.Spec.NamespaceSelector, labels.Nothing())
	}
	if err == nil {
		p.nodes, err = selector("spec.nodeSelector", o.Spec.NodeSelector, labels.Everything())
	}
	if err != nil {
		p.Reason, p.Refused = ReasonInvalid, err.Error()
	}
	return p
}

// usable refuses a range of addresses no external IP may be, as the
// plugin refuses a node-local pool of them: the CRD's schema and the
// admission policies check a range's form, not its class.
func usable(rs Ranges) error {
	for i, r := range rs {
		if what := iprange.Unusable(r); what != "" {
			return fmt.Errorf("spec.ranges[%d]: %q holds %s", i, r.Text, what)
		}
	}
	return nil
}

func selector(field string, s *metav1.LabelSelector, unset labels.Selector) (labels.Selector, error) {
	if s == nil {
		return unset, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", field, err)
	}
	return sel, nil
}

// Get is the pool of that name, nil when there is none.
func (s *Set) Get(name string) *Pool { return s.byName[name] }

// Len is how many pools there are.
func (s *Set) Len() int { return len(s.byName) }

// All are the pools, by name.
func (s *Set) All() []*Pool {
	out := make([]*Pool, 0, len(s.byName))
	for _, p := range s.byName {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Pool) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// Covering is the pool an IP lies in: the oldest that gives it, else the
// oldest that covers it though it gives nothing (so that a refusal names
// it); nil when no pool covers it.
func (s *Set) Covering(ip netip.Addr) *Pool {
	var refused *Pool
	for _, p := range s.byAge {
		if !p.Ranges.Covers(ip) {
			continue
		}
		if p.Ready() {
			return p
		}
		if refused == nil {
			refused = p
		}
	}
	return refused
}

// AdmitsNamespace says whether pods of the namespace may draw from the
// pool: named in spec.namespaces, or matched by spec.namespaceSelector.
func (p *Pool) AdmitsNamespace(name string, nsLabels map[string]string) bool {
	if slices.Contains(p.Obj.Spec.Namespaces, v1alpha1.NamespaceName(name)) {
		return true
	}
	return p.namespaces != nil && p.namespaces.Matches(labels.Set(nsLabels))
}

// AdmitsNode says whether a node with these labels may hold the pool's IPs.
func (p *Pool) AdmitsNode(nodeLabels map[string]string) bool {
	return p.nodes != nil && p.nodes.Matches(labels.Set(nodeLabels))
}
