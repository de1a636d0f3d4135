package nat

import "github.com/google/nftables"

// batch is the nftables connection as our changes stage them: every
// staged message goes through one of its methods, and it alone knows
// which of them make the commit destroy something. Such a commit leaves
// the deleted objects to a kernel worker that frees them after an RCU
// grace period, and the release of any netfilter socket waits for that
// worker (see Table.File): the socket is then slow to close, and is kept
// past the plugin's exit. Additions are freed in the commit itself.
//
// The library keeps its messages to itself, so the verdict is taken per
// method, here and nowhere else;
// TestEveryStagingMethodSaysWhetherItsMessagesDestroy sends each through
// a fake kernel and compares it with the message types it carried, so a
// deleting method that forgets to say so fails there.
type batch struct {
	c *nftables.Conn
	// destroys: a deletion was staged since the connection opened. Kept
	// once set: a failed flush may still have committed nothing, and
	// keeping a socket that closes fast costs little.
	destroys bool
	// commits counts the transactions the kernel took, so that a test
	// can tell a change made at once from one made step by step.
	commits int
}

func (b *batch) AddTable(t *nftables.Table) *nftables.Table { return b.c.AddTable(t) }
func (b *batch) AddChain(c *nftables.Chain) *nftables.Chain { return b.c.AddChain(c) }

// AddRule with a handle replaces that rule: the old one is destroyed.
func (b *batch) AddRule(r *nftables.Rule) *nftables.Rule {
	if r.Handle != 0 {
		b.destroys = true
	}
	return b.c.AddRule(r)
}

func (b *batch) AddSet(s *nftables.Set, vals []nftables.SetElement) error { return b.c.AddSet(s, vals) }

func (b *batch) SetAddElements(s *nftables.Set, vals []nftables.SetElement) error {
	return b.c.SetAddElements(s, vals)
}

func (b *batch) DelTable(t *nftables.Table) { b.destroys = true; b.c.DelTable(t) }
func (b *batch) DelChain(c *nftables.Chain) { b.destroys = true; b.c.DelChain(c) }
func (b *batch) DelSet(s *nftables.Set)     { b.destroys = true; b.c.DelSet(s) }

// FlushChain and FlushSet delete the chain's rules and the set's elements.
func (b *batch) FlushChain(c *nftables.Chain) { b.destroys = true; b.c.FlushChain(c) }
func (b *batch) FlushSet(s *nftables.Set)     { b.destroys = true; b.c.FlushSet(s) }

func (b *batch) SetDeleteElements(s *nftables.Set, vals []nftables.SetElement) error {
	b.destroys = true
	return b.c.SetDeleteElements(s, vals)
}

// Flush commits what was staged, in one transaction.
func (b *batch) Flush() error {
	err := b.c.Flush()
	if err == nil {
		b.commits++
	}
	return err
}

// reader is what Table reads over the same connection; these run at once
// and stage nothing, so Table can stage only through its batch.
type reader interface {
	GetRules(*nftables.Table, *nftables.Chain) ([]*nftables.Rule, error)
	GetSetByName(*nftables.Table, string) (*nftables.Set, error)
	GetSetElements(*nftables.Set) ([]nftables.SetElement, error)
	GetSets(*nftables.Table) ([]*nftables.Set, error)
	ListChainsOfTableFamily(nftables.TableFamily) ([]*nftables.Chain, error)
	ListTableOfFamily(string, nftables.TableFamily) (*nftables.Table, error)
}
