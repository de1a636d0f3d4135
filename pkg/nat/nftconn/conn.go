package nftconn

import (
	"fmt"
	"os"

	"github.com/external-ip/external-ip/pkg/linger"
	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
)

// Conn is one netlink connection to nf_tables about one table of the inet
// family: the library's, which stages a transaction and reads at once,
// and its socket, for the requests the library cannot make (wire.go).
type Conn struct {
	*nftables.Conn
	nl    *netlink.Conn
	table string
	// Commits counts the transactions the kernel took: a dump of the
	// chains read before a commit is stale after it, and a test can tell
	// a change made at once from one made step by step.
	Commits int
	// ChainDumps counts ChainUses' dumps, for the tests that hold a
	// steered ADD to one; SetListings counts SetNames' listings.
	ChainDumps, SetListings int
	// kept is a dump of ChainUses that Keep left, at Commits keptAt.
	kept   map[string]uint32
	keptAt int
}

// Keep leaves uses, a dump of ChainUses, to the next Take: the routing
// record read under the node lock, the marking read then and the change's
// base check cost one dump.
func (c *Conn) Keep(uses map[string]uint32) { c.kept, c.keptAt = uses, c.Commits }

// Take is the dump Keep left, once, while no commit of ours came since,
// else a new one. Another process's commit meanwhile is not seen (nat's
// baseIntact says what that costs).
func (c *Conn) Take() (map[string]uint32, error) {
	uses, at := c.kept, c.keptAt
	c.kept = nil
	if uses != nil && at == c.Commits {
		return uses, nil
	}
	return c.ChainUses()
}

// Open connects to nf_tables in the current network namespace, for the
// inet table of that name. The connection is lasting: one socket for
// every request, closed by Close.
func Open(table string) (*Conn, error) {
	c := &Conn{table: table}
	keep := func(nl *netlink.Conn) error { c.nl = nl; return nil }
	nc, err := nftables.New(nftables.AsLasting(), nftables.WithSockOptions(keep))
	if err != nil {
		return nil, fmt.Errorf("connecting to nf_tables: %w", err)
	}
	c.Conn = nc
	return c, nil
}

// With is a Conn over the library's connection nc, made by the caller
// (a test's, with nftables.WithTestDial): it has no socket of its own,
// so the requests of wire.go and File are not for it.
func With(nc *nftables.Conn, table string) *Conn { return &Conn{Conn: nc, table: table} }

// Flush commits what was staged, in one transaction.
func (c *Conn) Flush() error {
	err := c.Conn.Flush()
	if err == nil {
		c.Commits++
	}
	return err
}

// File is a duplicate of the connection's socket, for a linger.Keeper.
func (c *Conn) File() (*os.File, error) { return linger.Dup(c.nl, "nf_tables") }

// Close releases the connection.
func (c *Conn) Close() error { return c.Conn.CloseLasting() }

// Exists tells whether the table is there.
func (c *Conn) Exists() bool {
	_, err := c.ListTableOfFamily(c.table, nftables.TableFamilyINet)
	return err == nil
}

// SetNames names the table's sets and maps, from one listing of them. The
// library formats a missing table's error with %v: it does not say ENOENT.
func (c *Conn) SetNames() (map[string]bool, error) {
	c.SetListings++
	sets, err := c.GetSets(&nftables.Table{Name: c.table, Family: nftables.TableFamilyINet})
	if err != nil {
		return nil, fmt.Errorf("listing sets of table inet %s: %w", c.table, err)
	}
	out := make(map[string]bool, len(sets))
	for _, s := range sets {
		out[s.Name] = true
	}
	return out, nil
}
