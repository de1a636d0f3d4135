package claims

import (
	"context"
	"slices"
	"sync"

	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/store"
)

// recent are the claims each attachment made or joined through this
// process, kept until its release: the cache may not show a claim made a
// moment ago, and a release must find it.
type recent struct {
	mu  sync.Mutex
	att map[string][]string
}

func (n *Node) remember(a store.Attachment, names []string) {
	n.recent.mu.Lock()
	defer n.recent.mu.Unlock()
	if n.recent.att == nil {
		n.recent.att = map[string][]string{}
	}
	k := attachmentKey(a)
	for _, name := range names {
		if !slices.Contains(n.recent.att[k], name) {
			n.recent.att[k] = append(n.recent.att[k], name)
		}
	}
}

// held are the claims the attachment holds, as far as this process knows:
// the cache's, and those it made or joined itself.
func (n *Node) held(a store.Attachment) []string {
	n.recent.mu.Lock()
	names := slices.Clone(n.recent.att[attachmentKey(a)])
	n.recent.mu.Unlock()
	for _, c := range n.byIndex(byAttachment, attachmentKey(a)) {
		if !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	return names
}

func (n *Node) forgetRecent(a store.Attachment) {
	n.recent.mu.Lock()
	defer n.recent.mu.Unlock()
	delete(n.recent.att, attachmentKey(a))
}

// Release takes the attachment off every claim it holds, deleting each
// claim nobody holds any more (but a StatefulSet's).
func (n *Node) Release(ctx context.Context, a store.Attachment) nodeapi.Response {
	if why := n.ready(); why != "" {
		return unavailable("%s", why)
	}
	defer n.locks.lock(attachmentKey(a))()
	for _, name := range n.held(a) {
		if err := n.removeHolder(ctx, name, a); err != nil {
			return unavailable("releasing claim %s: %v", name, err)
		}
	}
	n.forgetRecent(a)
	return nodeapi.Response{}
}
