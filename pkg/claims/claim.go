package claims

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/pools"
)

// Handle answers one request of the plugin, having told the pod how a
// claim went (its annotation and event queued).
func (n *Node) Handle(ctx context.Context, req nodeapi.Request) nodeapi.Response {
	resp, after := answer(ctx, n, req)
	if after != nil {
		after()
	}
	return resp
}

// Answering is Handle for the socket (nodeapi.Serve): a claim's
// annotation and event wait until the plugin's ADD is over. Sent at once,
// their API server writes and their echo through the watches competed
// with the plugin's holding of the IPs for the CPU (the hold took 2.3 ms
// more p50 than an explicit IP's, at an exec floor of 10.7 ms with the API
// server on the node, and none more without them).
func Answering(n *Node) nodeapi.Handler {
	return func(ctx context.Context, req nodeapi.Request) (nodeapi.Response, func()) { return answer(ctx, n, req) }
}

// answer answers req; after tells the pod and the metrics how it went.
func answer(ctx context.Context, n *Node, req nodeapi.Request) (resp nodeapi.Response, after func()) {
	switch req.Op {
	case nodeapi.OpClaim:
		resp, fill := n.claim(ctx, req)
		return resp, func() {
			fill()
			n.report(req, resp)
			if resp.Reason == "" && resp.Unavailable == "" {
				n.notes.later(req.Pod, resp.Addresses)
			}
		}
	case nodeapi.OpRelease:
		return n.Release(ctx, req.Attachment), nil
	}
	return nodeapi.Response{Reason: "BadRequest", Message: fmt.Sprintf("op: %q is neither claim nor release", req.Op)}, nil
}

// grant is one claim request under way: what it has taken so far, to be
// given back whole if a later part is refused.
type grant struct {
	n       *Node
	ctx     context.Context
	req     nodeapi.Request
	who     *requester
	holder  v1alpha1.ClaimHolder
	addrs   []netip.Addr
	hold    string
	touched []string // claims this request made or joined
	// pending are the claims made early for the pod whose pending holder
	// this attachment takes, once the plugin's ADD is over.
	pending []*v1alpha1.ExternalIPClaim
}

// claim gives the attachment its pool's IPs and claims the IPs it names,
// all or none: a refusal gives back what the request had taken. fill,
// which the caller runs once the plugin's ADD is over, writes the
// attachment into the holders that a pod's early claims left pending;
// until it has, it keeps the attachment's lock, so that a release of the
// attachment finds them filled.
func (n *Node) claim(ctx context.Context, req nodeapi.Request) (resp nodeapi.Response, fill func()) {
	if why := n.ready(); why != "" {
		return unavailable("%s", why), func() {}
	}
	p := req.Pod
	if p.Namespace == "" || p.Name == "" || p.UID == "" {
		return refuse(nodeapi.ReasonNoPodIdentity, "CNI_ARGS: K8S_POD_NAMESPACE, K8S_POD_NAME and K8S_POD_UID are needed to claim an IP, and the runtime passed %q, %q, %q", p.Namespace, p.Name, p.UID), func() {}
	}
	unlock := n.locks.lock(attachmentKey(req.Attachment))
	g := &grant{n: n, ctx: ctx, req: req, holder: v1alpha1.ClaimHolder{Node: n.cfg.NodeName, Pod: p.Name, PodUID: p.UID,
		Network: req.Attachment.Network, ContainerID: req.Attachment.ContainerID, IfName: req.Attachment.IfName}}
	resp = g.grant()
	if len(g.pending) == 0 {
		unlock()
		return resp, func() {}
	}
	return resp, func() {
		defer unlock()
		n.early.fill(g.pending, g.holder)
	}
}

// grant is claim under the attachment's lock.
func (g *grant) grant() nodeapi.Response {
	n := g.n
	if resp := n.settleDeferred(g.ctx, g.req.Attachment); resp != nil {
		return *resp
	}
	who, resp := n.requester(g.ctx, g.req.Pod)
	if resp != nil {
		return *resp
	}
	g.who = who
	if resp := g.take(); resp != nil {
		g.giveBack()
		// A pending holder this refused ADD found stays the pod's, for
		// its next ADD: filled with this attachment, whose intent the
		// plugin now forgets, it would be dropped with its claim.
		g.pending = nil
		return *resp
	}
	n.remember(g.req.Attachment, g.touched)
	return nodeapi.Response{Addresses: g.addrs, Hold: g.hold}
}

// take takes the pool's IPs, then the named ones.
func (g *grant) take() *nodeapi.Response {
	if g.req.Pool != "" {
		if resp := g.fromPool(); resp != nil {
			return resp
		}
	}
	for _, ip := range g.req.Addresses {
		if slices.Contains(g.addrs, ip) {
			continue
		}
		if resp := g.named(ip); resp != nil {
			return resp
		}
	}
	return nil
}

// giveBack releases what a refused request took, best effort: what is
// left the node's reconciliation releases (the plugin forgets the intent).
func (g *grant) giveBack() {
	for _, name := range g.touched {
		if err := g.n.removeHolder(g.ctx, name, g.req.Attachment); err != nil {
			g.n.log.Warn("claims: giving back a refused request's claim", "claim", name, "error", err)
		}
	}
}

// fromPool takes one IP of each family the pool has: the one the owner
// already has (a re-ADD, a StatefulSet's ordinal on its next pod), else a
// free one. The families are taken at once, each by a grant of its own:
// each is a round trip to the API server (a create, or a holder joined),
// and a dual-stack pool's ADD would otherwise wait for two in a row. They
// share nothing but the caches and the clients, which are safe for it;
// what each took is gathered before any refusal, so giveBack has it all.
func (g *grant) fromPool() *nodeapi.Response {
	p := g.n.set.Load().Get(g.req.Pool)
	if resp := g.admitted(p, "external-ip/pool: pool "+g.req.Pool); resp != nil {
		return resp
	}
	owner := g.who.poolOwner()
	fams := p.Ranges.Families()
	parts := make([]grant, len(fams))
	ips := make([]netip.Addr, len(fams))
	resps := make([]*nodeapi.Response, len(fams))
	var wg sync.WaitGroup
	for i, f := range fams {
		parts[i] = grant{n: g.n, ctx: g.ctx, req: g.req, who: g.who, holder: g.holder}
		wg.Go(func() { ips[i], resps[i] = parts[i].poolIP(p, f, owner) })
	}
	wg.Wait()
	for i := range parts {
		g.touched = append(g.touched, parts[i].touched...)
		g.pending = append(g.pending, parts[i].pending...)
	}
	for _, resp := range resps {
		if resp != nil {
			return resp
		}
	}
	g.addrs = append(g.addrs, ips...)
	g.hold = p.Obj.Spec.Hold
	return nil
}

// admitted refuses a pool that is missing, gives nothing, or does not
// admit the pod's namespace or node; what names what was asked.
func (g *grant) admitted(p *pools.Pool, what string) *nodeapi.Response {
	switch {
	case p == nil:
		r := refuse(nodeapi.ReasonUnknownPool, "external-ip/pool: no pool named %q (kubectl get externalippools)", g.req.Pool)
		return &r
	case !p.Ready():
		r := refuse(nodeapi.ReasonPoolNotReady, "%s gives no IP: %s", what, p.Refused)
		return &r
	case !p.AdmitsNamespace(g.who.pod.Namespace, g.who.nsLabels):
		r := refuse(nodeapi.ReasonNamespaceNotAdmitted, "%s does not admit namespace %s", what, g.who.pod.Namespace)
		return &r
	case !p.AdmitsNode(g.n.nodeLabels(g.ctx)):
		r := refuse(nodeapi.ReasonNodeNotAdmitted, "%s does not admit node %s (its spec.nodeSelector): schedule the pod on a node it selects", what, g.n.cfg.NodeName)
		return &r
	}
	return nil
}

func (g *grant) poolIP(p *pools.Pool, f pools.Family, owner v1alpha1.ClaimOwner) (netip.Addr, *nodeapi.Response) {
	k := earlyKey{ownerKey(owner), p.Name(), f}
	// A request of the attachment again before the cache has seen the
	// claim this process made for it (a retry within the informer's lag)
	// finds it here, not a second IP.
	for _, name := range g.n.held(g.req.Attachment) {
		ip, err := v1alpha1.ParseClaimName(name)
		if err != nil || !p.Ranges.Covers(ip) || pools.FamilyOf(ip) != f {
			continue
		}
		if resp := g.join(ip, ownedBy(k.owner)); !elsewhere(resp) {
			return ip, resp
		}
	}
	// Under the owner's lock, which an early claim for the pod takes too:
	// the ADD waits for one under way rather than make a second.
	defer g.n.locks.lock(k.lockKey())()
	c, err := g.n.early.find(g.ctx, k)
	if err != nil {
		r := unavailable("reading claim of an earlier create: %v", err)
		return netip.Addr{}, &r
	}
	if c != nil {
		ip, _ := netip.ParseAddr(c.Spec.Address) // it parses: ownersClaim matched its family
		if g.adopt(c) {
			return ip, nil
		}
		if resp := g.join(ip, ownedBy(k.owner)); !elsewhere(resp) {
			return ip, resp
		}
		g.n.early.made.drop(k) // released, or made again for another owner, since: a free IP, then
	}
	return g.allocate(p, f, owner)
}

// notOwners is a join's answer when the claim is not the owner's: the
// cache's copy was, but the claim was deleted and made again for another
// owner since (another pod, another node), and the server's copy says so.
var notOwners = &nodeapi.Response{}

// ownedBy is the check of a join to a pool's claim of the owner.
func ownedBy(owner string) func(*v1alpha1.ExternalIPClaim) *nodeapi.Response {
	return func(c *v1alpha1.ExternalIPClaim) *nodeapi.Response {
		if ownerKey(c.Spec.Owner) != owner {
			return notOwners
		}
		return nil
	}
}

// elsewhere says that a join found no claim of the owner to join: the IP
// is to be looked for elsewhere.
func elsewhere(resp *nodeapi.Response) bool { return resp == retryJoin || resp == notOwners }

// allocate takes a free IP of family f: at random places in the pool (as
// Kubernetes' Service allocator does, so that two nodes seldom try the
// same IP first), then in order, an IP that no cached claim has
// (pools.FreeIndexes), made with create-if-absent. Losing a race
// (AlreadyExists) moves on to the next IP. Having tried every IP, or the
// cache holding a claim of each, it asks the server (allocateListed)
// before it answers that the pool is exhausted.
func (g *grant) allocate(p *pools.Pool, f pools.Family, owner v1alpha1.ClaimOwner) (netip.Addr, *nodeapi.Response) {
	size := p.Ranges.Size(f)
	// Only a pool that looks full is counted claim by claim.
	if uint64(g.n.given(p.Name(), f)) < size || uint64(g.n.used(p, f)) < size {
		taken := func(i uint64) bool { return g.n.cached(p.Ranges.At(f, i)) != nil }
		if ip, resp := g.createFree(p, f, owner, taken); ip.IsValid() || resp != nil {
			return ip, resp
		}
	}
	return g.allocateListed(p, f, owner)
}

// allocateListed is allocate once the cache finds no free IP: the cache
// may not have seen the deletes of claims yet (a rollout in a small pool:
// the old pod's claim deleted, the new pod's ADD the next moment). One
// LIST of the pool's claims, by its label, says which IPs are free on the
// server (with no resourceVersion, a consistent read: every delete
// committed is in it). Its cost is bounded by the path: only a request
// that would be refused as exhausted lists, once a family, and the list
// returns the pool's claims alone, about as many as the cache holds of it
// already (a claim of each IP of the family, or every create tried found
// its IP taken): a pool that fills is small enough for a node to cache
// whole; a large one's free IPs the cache finds, and it never lists.
func (g *grant) allocateListed(p *pools.Pool, f pools.Family, owner v1alpha1.ClaimOwner) (netip.Addr, *nodeapi.Response) {
	sel := labels.Set{v1alpha1.LabelPool: p.Name()}.String()
	l, err := g.n.cfg.Clients.Claims.List(g.ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		r := unavailable("listing the claims of pool %s: %v", p.Name(), err)
		return netip.Addr{}, &r
	}
	claimed := map[netip.Addr]bool{}
	for _, c := range l.Items {
		if ip, err := netip.ParseAddr(c.Spec.Address); err == nil && pools.FamilyOf(ip) == f && p.Ranges.Covers(ip) {
			claimed[ip] = true
		}
	}
	taken := func(i uint64) bool { return claimed[p.Ranges.At(f, i)] }
	if ip, resp := g.createFree(p, f, owner, taken); ip.IsValid() || resp != nil {
		return ip, resp
	}
	return netip.Addr{}, g.exhausted(p, f, len(claimed))
}

// createFree makes, for owner, the claim of the first IP of family f that
// taken does not have, in FreeIndexes' order; none made (each IP taken, or
// made meanwhile by another node) is the zero Addr and no answer.
// The claim made is kept among those made here until the cache shows it,
// so that the owner's next look (its ADD, or an early claim) finds it.
func (g *grant) createFree(p *pools.Pool, f pools.Family, owner v1alpha1.ClaimOwner, taken func(uint64) bool) (netip.Addr, *nodeapi.Response) {
	k := earlyKey{ownerKey(owner), p.Name(), f}
	for i := range pools.FreeIndexes(p.Ranges.Size(f), g.n.randN, taken) {
		ip := p.Ranges.At(f, i)
		c, err := g.n.create(g.ctx, newClaim(ip, p.Name(), owner, g.holder))
		if err == nil {
			g.touched = append(g.touched, c.Name)
			g.n.early.keep(k, c)
			return ip, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			// The server may have made it all the same (a timeout, an
			// answer lost): the owner's next try asks before it takes
			// another IP.
			g.n.early.made.tries.Store(k, v1alpha1.ClaimName(ip))
			r := unavailable("creating claim %s: %v", v1alpha1.ClaimName(ip), err)
			return netip.Addr{}, &r
		}
	}
	return netip.Addr{}, nil
}

func (g *grant) exhausted(p *pools.Pool, f pools.Family, claimed int) *nodeapi.Response {
	r := refuse(nodeapi.ReasonPoolExhausted, "external-ip/pool: pool %s has no free %s address (%d of %d claimed; kubectl get externalipclaims -l %s=%s)",
		p.Name(), f, claimed, p.Ranges.Size(f), v1alpha1.LabelPool, p.Name())
	return &r
}

// named claims an IP the pod named, for its namespace: made if absent,
// joined if the namespace owns it already, refused if another does or a
// pool gave it to another pod (mayName).
func (g *grant) named(ip netip.Addr) *nodeapi.Response {
	p := g.n.set.Load().Covering(ip)
	if p == nil {
		r := refuse(nodeapi.ReasonNotInAnyPool, "%s: lies in no pool (kubectl get externalippools): with pools defined, every external IP a pod names must lie in one that admits its namespace", ip)
		return &r
	}
	if resp := g.admitted(p, fmt.Sprintf("%s: pool %s", ip, p.Name())); resp != nil {
		return resp
	}
	ns := g.who.pod.Namespace
	create := g.n.cached(ip) == nil
	for range 5 { // a claim deleted between our look and our join: again
		if create {
			_, err := g.n.create(g.ctx, newClaim(ip, p.Name(), v1alpha1.ClaimOwner{Namespace: ns}, g.holder))
			if err == nil {
				g.touched = append(g.touched, v1alpha1.ClaimName(ip))
				g.addrs = append(g.addrs, ip)
				return nil
			}
			if !apierrors.IsAlreadyExists(err) {
				r := unavailable("creating claim %s: %v", v1alpha1.ClaimName(ip), err)
				return &r
			}
		}
		resp := g.join(ip, g.mayName)
		if create = resp == retryJoin; create {
			continue
		}
		if resp == nil {
			g.addrs = append(g.addrs, ip)
		}
		return resp
	}
	r := unavailable("claim %s: changed under every try", v1alpha1.ClaimName(ip))
	return &r
}

// mayName refuses the pod a claim of another namespace, naming only that
// namespace (never another tenant's pods), and one drawn from a pool for
// another owner of its own: a pool's IP is its pod's, or its StatefulSet
// ordinal's, alone; a pod naming it would take a share of its flows.
func (g *grant) mayName(c *v1alpha1.ExternalIPClaim) *nodeapi.Response {
	o, ns := c.Spec.Owner, g.who.pod.Namespace
	var r nodeapi.Response
	switch k := ownerKey(o); {
	case o.Namespace != ns:
		r = refuse(nodeapi.ReasonOwnedElsewhere, "%s: is owned by namespace %s; a pod of namespace %s may not hold it", c.Spec.Address, o.Namespace, ns)
	case k != "" && k != ownerKey(g.who.poolOwner()):
		r = refuse(nodeapi.ReasonOwnedByAnotherPod, "%s: was drawn from pool %s for %s; no other pod may hold it", c.Spec.Address, c.Spec.Pool, ownerName(o))
	default:
		return nil
	}
	return &r
}

// ownerName names a pool claim's owner, to a pod of its namespace.
func ownerName(o v1alpha1.ClaimOwner) string {
	if o.StatefulSet != nil {
		return fmt.Sprintf("StatefulSet %s/%s's ordinal %d", o.Namespace, o.StatefulSet.Name, o.StatefulSet.Ordinal)
	}
	return "pod " + o.Namespace + "/" + o.Pod.Name
}

// retryJoin is join's answer when the claim went away under it.
var retryJoin = &nodeapi.Response{}

// join adds the attachment as a holder of ip's claim, once check passes.
func (g *grant) join(ip netip.Addr, check func(*v1alpha1.ExternalIPClaim) *nodeapi.Response) *nodeapi.Response {
	name := v1alpha1.ClaimName(ip)
	var refused *nodeapi.Response
	added := false
	err := g.n.update(g.ctx, name, func(c *v1alpha1.ExternalIPClaim) bool {
		if refused = check(c); refused != nil || holderIndex(c, g.holder) >= 0 {
			return false
		}
		if len(c.Spec.Holders) == 0 {
			c.Spec.ActiveNode = g.holder.Node // as for a new claim
		}
		c.Spec.Holders = append(c.Spec.Holders, g.holder)
		added = true
		return true
	})
	switch {
	case apierrors.IsNotFound(err):
		return retryJoin
	case err != nil:
		r := unavailable("adding a holder to claim %s: %v", name, err)
		return &r
	case refused != nil:
		return refused
	}
	if added {
		g.touched = append(g.touched, name)
	}
	return nil
}

func holderIndex(c *v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder) int {
	return slices.IndexFunc(c.Spec.Holders, func(x v1alpha1.ClaimHolder) bool {
		return x.Network == h.Network && x.ContainerID == h.ContainerID && x.IfName == h.IfName
	})
}

// newClaim is ip's claim with its first holder, whose node it names
// active: no other node holds the IP, so with standby no other answers.
func newClaim(ip netip.Addr, pool string, owner v1alpha1.ClaimOwner, h v1alpha1.ClaimHolder) *v1alpha1.ExternalIPClaim {
	return &v1alpha1.ExternalIPClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClaimName(ip),
			Labels: map[string]string{v1alpha1.LabelPool: pool, v1alpha1.LabelNamespace: owner.Namespace}},
		Spec: v1alpha1.ExternalIPClaimSpec{Address: ip.String(), Pool: pool, Owner: owner, Holders: []v1alpha1.ClaimHolder{h}, ActiveNode: h.Node},
	}
}

func refuse(reason, format string, args ...any) nodeapi.Response {
	return nodeapi.Response{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func unavailable(format string, args ...any) nodeapi.Response {
	return nodeapi.Response{Unavailable: fmt.Sprintf(format, args...)}
}

// randN is a random number below n.
func (n *Node) randN(size uint64) uint64 {
	n.rndMu.Lock()
	defer n.rndMu.Unlock()
	return n.rnd.Uint64N(size)
}
