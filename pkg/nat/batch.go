package nat

import "github.com/google/nftables"

// batch is the nftables connection as our changes stage and commit them,
// counting the transactions the kernel took: a dump of the chains read
// before a commit is stale after it (Table.takeUses), and a test can
// tell a change made at once from one made step by step.
type batch struct {
	*nftables.Conn
	commits int
}

// Flush commits what was staged, in one transaction.
func (b *batch) Flush() error {
	err := b.Conn.Flush()
	if err == nil {
		b.commits++
	}
	return err
}

// reader is what Table reads over the same connection; these run at once
// and stage nothing.
type reader interface {
	GetRules(*nftables.Table, *nftables.Chain) ([]*nftables.Rule, error)
	GetSetByName(*nftables.Table, string) (*nftables.Set, error)
	GetSetElements(*nftables.Set) ([]nftables.SetElement, error)
	GetSets(*nftables.Table) ([]*nftables.Set, error)
	ListChainsOfTableFamily(nftables.TableFamily) ([]*nftables.Chain, error)
	ListTableOfFamily(string, nftables.TableFamily) (*nftables.Table, error)
}
