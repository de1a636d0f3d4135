package nftconn

import (
	"errors"
	"strings"
	"syscall"

	"github.com/google/nftables"
)

// Marker is the rest of the name of the table's empty chain named with
// prefix: a record kept in the table itself, so that it lives and dies
// with the table (a reboot, another network namespace); "" for none. Its
// dump of the chains is left to the next Take (Keep).
func (c *Conn) Marker(prefix string) (string, error) {
	uses, err := c.ChainUses()
	if errors.Is(err, syscall.ENOENT) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	c.Keep(uses)
	for name := range uses {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			return rest, nil
		}
	}
	return "", nil
}

// SetMarker puts the empty chain prefix+name in place of prefix+was (""
// for none) in one transaction: a crash leaves one record or the other.
func (c *Conn) SetMarker(t *nftables.Table, prefix, was, name string) error {
	c.AddTable(t)
	if was != "" && was != name {
		c.DelChain(c.AddChain(&nftables.Chain{Name: prefix + was, Table: t}))
	}
	c.AddChain(&nftables.Chain{Name: prefix + name, Table: t})
	return c.Flush()
}
