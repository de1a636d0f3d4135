package nat

import (
	"encoding/binary"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// count is how many rules Ensure puts in the chain.
func (b baseChain) count() int {
	n := len(b.rules(ipv4)) + len(b.rules(ipv6))
	if b.raw != nil {
		n += 2 // one per family
	}
	return n
}

// rawRules appends b's raw rule of each family to its chain in one
// transaction sent over the table's socket, as the library would send it:
// a batch of NEWRULE messages, each acknowledged.
func (t *Table) rawRules(b baseChain) error {
	if b.raw == nil {
		return nil
	}
	batch := func(typ uint16) netlink.Message {
		return netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(typ), Flags: netlink.Request},
			Data: binary.BigEndian.AppendUint16([]byte{unix.AF_UNSPEC, unix.NFNETLINK_V0}, unix.NFNL_SUBSYS_NFTABLES)}
	}
	msgs := []netlink.Message{batch(unix.NFNL_MSG_BATCH_BEGIN)}
	for _, f := range []family{ipv4, ipv6} {
		msgs = append(msgs, newRule(b.name, b.raw(f)))
	}
	msgs = append(msgs, batch(unix.NFNL_MSG_BATCH_END))
	if _, err := t.nl.SendMessages(msgs); err != nil {
		return err
	}
	for range msgs[1 : len(msgs)-1] {
		if _, err := t.nl.Receive(); err != nil {
			return err
		}
	}
	return nil
}

// newRule is NFT_MSG_NEWRULE appending exprs (each a marshalled
// expression) to chain.
func newRule(chain string, exprs [][]byte) netlink.Message {
	list := netlink.NewAttributeEncoder()
	for _, e := range exprs {
		list.Bytes(unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, e)
	}
	el, _ := list.Encode()
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_RULE_TABLE, TableName)
	ae.String(unix.NFTA_RULE_CHAIN, chain)
	ae.Bytes(unix.NLA_F_NESTED|unix.NFTA_RULE_EXPRESSIONS, el)
	attrs, _ := ae.Encode()
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE),
			Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Append},
		Data: append([]byte{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0}, attrs...),
	}
}
