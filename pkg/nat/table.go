package nat

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/external-ip/external-ip/pkg/nat/nftconn"
	"github.com/google/nftables"
)

// TableName is our table's name, in the inet family.
const TableName = "external-ip"

// Names of our base chains and maps, as `nft list table inet external-ip` shows them.
const (
	chainPrerouting  = "prerouting"
	chainOutput      = "output"
	chainPostrouting = "postrouting"
	ingressPrefix    = "to-"
	spreadPrefix     = "sp-"
)

// Priorities: ten before the standard NAT chains, so our binding is the
// flow's first (nf_nat_inet_fn skips later NAT chains of a bound flow).
const (
	priorityDstNAT = -110 // NF_IP_PRI_NAT_DST (-100) - 10
	priorityOutput = -110
	prioritySrcNAT = 90 // NF_IP_PRI_NAT_SRC (100) - 10
)

// Table is our nftables table over one netlink connection.
type Table struct {
	c     *nftconn.Conn // stages and commits every change, and reads
	table *nftables.Table
	// seenSets is whether the table has seen4 and seen6, once known.
	seenSets *bool
	// named is sets(), made by the first set() (see set).
	named []*nftables.Set
	// UplinkMask is the mark bits the uplink marking's base rules keep
	// (uplinks.go); 0 is DefaultUplinkMask.
	UplinkMask uint32
	// remade says that Ensure found the table or one of its sets missing
	// on this connection and made it empty (lostElements): every other
	// attachment's elements, and the record of their flows, are gone.
	remade bool
	marking
}

func (t *Table) mask() uint32 {
	if t.UplinkMask == 0 {
		return DefaultUplinkMask
	}
	return t.UplinkMask
}

// Open connects to nf_tables in the current network namespace. It changes
// nothing: the table is made by the first change that needs it.
func Open() (*Table, error) {
	c, err := nftconn.Open(TableName)
	if err != nil {
		return nil, err
	}
	return newTable(c), nil
}

func newTable(c *nftconn.Conn) *Table {
	t := &Table{c: c, table: &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}}
	t.marking = marking{tab: t}
	return t
}

// File is a duplicate of the table's netlink socket. The kernel's release
// of a netfilter netlink socket waits while the namespace's nf_tables
// destroy worker has work pending (about an RCU grace period after any
// commit that deleted something, whoever made it: the DEL before this
// ADD), and holds the namespace's commit lock meanwhile; so does the
// exit of the process that holds its last reference. A caller on a
// latency budget hands this copy to a process that outlives it (figure:
// docs/performance.md, "Figures behind design choices").
func (t *Table) File() (*os.File, error) { return t.c.File() }

// Close releases the netlink connection.
func (t *Table) Close() error { return t.c.Close() }

// Delete removes our whole table; nothing of it being there is no error.
func (t *Table) Delete() error {
	t.c.DelTable(t.table)
	if err := t.c.Flush(); err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting table inet %s: %w", TableName, err)
	}
	return nil
}

// probeTable is the table Probe makes and deletes in one transaction, so
// that it never outlives the probe's batch: a table of that name that
// exists is another program's, never ours to keep or delete.
const probeTable = "external-ip-probe"

// Probe tells whether nf_tables with NAT chains can be used here. It makes
// a NAT base chain in a table of its own and deletes that table in the
// same transaction, so the kernel checks everything and nothing is
// committed that outlives it. It never touches our table: STATUS probes
// without the state lock (a lock would not do, two state directories
// share the table), and an ADD may be making the table meanwhile.
func (t *Table) Probe() error {
	t.stageProbe()
	err := t.c.Flush()
	if isExists(err) {
		return fmt.Errorf("nf_tables nat chains cannot be probed: table inet %s exists, and is not ours", probeTable)
	}
	if err != nil {
		return fmt.Errorf("nf_tables nat chains cannot be used: %w", err)
	}
	return nil
}

// stageProbe stages Probe's transaction. The table is made exclusively,
// so that the batch fails, deleting nothing, where one of that name exists.
func (t *Table) stageProbe() {
	tab := t.c.CreateTable(&nftables.Table{Name: probeTable, Family: nftables.TableFamilyINet})
	t.c.AddChain(&nftables.Chain{
		Name: "probe", Table: tab, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityRef(nftables.ChainPriority(prioritySrcNAT)),
	})
	t.c.DelTable(tab)
}

// ingressChain names the chain of one external IP. IPv6 colons become
// dashes: nft's parser takes [a-zA-Z0-9/\-_.] in a bare chain name, and no
// IPv6 text has a dash, so the name still says the address exactly.
func ingressChain(ip netip.Addr) string {
	return ingressPrefix + chainSuffix(ip)
}

func chainSuffix(ip netip.Addr) string { return strings.ReplaceAll(ip.String(), ":", "-") }

// ingressChainIP is the inverse of ingressChain; ok is false for a chain
// that is not an external IP's.
func ingressChainIP(name string) (netip.Addr, bool) {
	rest, ok := strings.CutPrefix(name, ingressPrefix)
	if !ok {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(rest)
	if err != nil {
		ip, err = netip.ParseAddr(strings.ReplaceAll(rest, "-", ":"))
	}
	if err != nil || ingressChain(ip) != name {
		return netip.Addr{}, false
	}
	return ip, true
}

func isNotFound(err error) bool { return errors.Is(err, syscall.ENOENT) }
func isExists(err error) bool   { return errors.Is(err, syscall.EEXIST) }
