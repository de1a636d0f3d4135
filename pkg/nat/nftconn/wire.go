package nftconn

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// RuleSignature names a rule's expressions in order, each lookup with the
// set it reads ("meta cmp payload lookup:in4"): a rule edited by hand,
// one with a guard of its own or reading another map, reads as
// another. It parses marshalled expressions, ours or the kernel's dump.
func RuleSignature(exprs [][]byte) string {
	var parts []string
	for _, e := range exprs {
		ad, err := netlink.NewAttributeDecoder(e)
		if err != nil {
			return "?"
		}
		var name, set string
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_EXPR_NAME:
				name = ad.String()
			case unix.NFTA_EXPR_DATA:
				ad.Nested(func(nd *netlink.AttributeDecoder) error {
					for nd.Next() {
						if name == "lookup" && nd.Type() == unix.NFTA_LOOKUP_SET || name == "dynset" && nd.Type() == unix.NFTA_DYNSET_SET_NAME {
							set = ":" + nd.String()
						}
					}
					return nil
				})
			}
		}
		parts = append(parts, name+set)
	}
	return strings.Join(parts, " ")
}

// DumpRules lists chain's rules, each as its marshalled expressions, with
// a dump of our own: the library (v0.3.0) cannot decode the hairpin rule's
// ct direction, which the kernel sends as one byte where it expects four.
func (c *Conn) DumpRules(chain string) ([][][]byte, error) {
	msgs, err := c.ruleDump(chain)
	if err != nil {
		return nil, err
	}
	out := make([][][]byte, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, ruleExprs(m.Data))
	}
	return out, nil
}

// ruleDump asks the kernel for the rules of our table, of one chain
// unless chain is empty, in one dump.
func (c *Conn) ruleDump(chain string) ([]netlink.Message, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_RULE_TABLE, c.table)
	if chain != "" {
		ae.String(unix.NFTA_RULE_CHAIN, chain)
	}
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return c.nl.Execute(nftMessage(unix.NFT_MSG_GETRULE, netlink.Request|netlink.Dump, attrs))
}

// RuleCount is how many rules a chain holds, and how many of them carry
// a given tag as their user data.
type RuleCount struct{ All, Tagged int }

// CountRules counts the rules of each chain of the table, and those of
// them whose user data is tag, from one dump whose messages it
// reads only for the chain's name and the rule's user data.
func (c *Conn) CountRules(tag []byte) (map[string]RuleCount, error) {
	msgs, err := c.ruleDump("")
	if err != nil {
		return nil, err
	}
	out := map[string]RuleCount{}
	for _, m := range msgs {
		chain, tagged, ok := ruleChainAndTag(m.Data, tag)
		if !ok {
			continue
		}
		n := out[chain]
		n.All++
		if tagged {
			n.Tagged++
		}
		out[chain] = n
	}
	return out, nil
}

// ruleChainAndTag reads a NEWRULE message (after nfgenmsg) for its chain
// and whether its user data is tag; ok is false when it names no chain.
func ruleChainAndTag(data, tag []byte) (chain string, tagged, ok bool) {
	if len(data) < 4 {
		return "", false, false
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return "", false, false
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_RULE_CHAIN:
			chain, ok = ad.String(), true
		case unix.NFTA_RULE_USERDATA:
			tagged = bytes.Equal(ad.Bytes(), tag)
		}
	}
	return chain, tagged, ok
}

// ChainUses is the use count of each chain of the table, from one dump of
// the inet family's chains read only for each chain's table, name and
// NFTA_CHAIN_USE. The kernel counts in a chain's use each rule it holds and
// each jump to it (nf_tables_newrule and nft_delrule keep it); a base chain
// cannot be jumped to, so its use is its number of rules. The kernel does
// not filter a chain dump by table (nf_tables_dump_chains), only by
// family: other inet tables' chains (firewalld's) come too and are skipped.
// A missing table is ENOENT, as the rule dump says it.
func (c *Conn) ChainUses() (map[string]uint32, error) {
	c.ChainDumps++
	msgs, err := c.nl.Execute(nftMessage(unix.NFT_MSG_GETCHAIN, netlink.Request|netlink.Dump, nil))
	if err != nil {
		return nil, err
	}
	out := map[string]uint32{}
	for _, m := range msgs {
		if ch, ok := chainUse(m.Data); ok && ch.table == c.table {
			out[ch.name] = ch.use
		}
	}
	if len(out) == 0 {
		return nil, syscall.ENOENT // no chain of ours: no table, or an empty one
	}
	return out, nil
}

type chainInfo struct {
	table, name string
	use         uint32
}

// chainUse reads a NEWCHAIN message (after nfgenmsg) for its table, name
// and use count; ok is false when it names no chain.
func chainUse(data []byte) (c chainInfo, ok bool) {
	if len(data) < 4 {
		return c, false
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return c, false
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_CHAIN_TABLE:
			c.table = ad.String()
		case unix.NFTA_CHAIN_NAME:
			c.name, ok = ad.String(), true
		case unix.NFTA_CHAIN_USE:
			c.use = ad.Uint32()
		}
	}
	return c, ok
}

// ruleExprs is the expressions of one NEWRULE message (after nfgenmsg).
func ruleExprs(data []byte) [][]byte {
	var exprs [][]byte
	if len(data) < 4 {
		return nil
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return nil
	}
	for ad.Next() {
		if ad.Type() != unix.NFTA_RULE_EXPRESSIONS {
			continue
		}
		ad.Nested(func(nd *netlink.AttributeDecoder) error {
			for nd.Next() {
				exprs = append(exprs, nd.Bytes())
			}
			return nil
		})
	}
	return exprs
}

// FillChain flushes chain and fills it with rules (each its marshalled
// expressions), each with udata as its user data, in one transaction sent
// over the connection's socket as the library would send it: a batch of
// messages, each acknowledged. It is for rules the library cannot encode.
func (c *Conn) FillChain(chain string, rules [][][]byte, udata []byte) error {
	batch := func(typ uint16) netlink.Message {
		return netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(typ), Flags: netlink.Request},
			Data: binary.BigEndian.AppendUint16([]byte{unix.AF_UNSPEC, unix.NFNETLINK_V0}, unix.NFNL_SUBSYS_NFTABLES)}
	}
	msgs := []netlink.Message{batch(unix.NFNL_MSG_BATCH_BEGIN), c.flushRules(chain)}
	for _, r := range rules {
		msgs = append(msgs, c.newRule(chain, r, udata))
	}
	msgs = append(msgs, batch(unix.NFNL_MSG_BATCH_END))
	if _, err := c.nl.SendMessages(msgs); err != nil {
		return err
	}
	for range msgs[1 : len(msgs)-1] {
		if _, err := c.nl.Receive(); err != nil {
			return err
		}
	}
	return nil
}

// newRule is NFT_MSG_NEWRULE appending exprs (each a marshalled
// expression) to chain, with udata (when not nil) as the rule's user data.
func (c *Conn) newRule(chain string, exprs [][]byte, udata []byte) netlink.Message {
	list := netlink.NewAttributeEncoder()
	for _, e := range exprs {
		list.Bytes(unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, e)
	}
	el, _ := list.Encode()
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_RULE_TABLE, c.table)
	ae.String(unix.NFTA_RULE_CHAIN, chain)
	ae.Bytes(unix.NLA_F_NESTED|unix.NFTA_RULE_EXPRESSIONS, el)
	if udata != nil {
		ae.Bytes(unix.NFTA_RULE_USERDATA, udata)
	}
	attrs, _ := ae.Encode()
	return nftMessage(unix.NFT_MSG_NEWRULE, netlink.Request|netlink.Acknowledge|netlink.Create|netlink.Append, attrs)
}

// flushRules is NFT_MSG_DELRULE with no handle: every rule of chain.
func (c *Conn) flushRules(chain string) netlink.Message {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_RULE_TABLE, c.table)
	ae.String(unix.NFTA_RULE_CHAIN, chain)
	attrs, _ := ae.Encode()
	return nftMessage(unix.NFT_MSG_DELRULE, netlink.Request|netlink.Acknowledge, attrs)
}

// GetElement reads one element of set by its key, without listing the
// set: the value (nil for a plain set) and whether it is there. A missing
// table or set reads as a missing element.
func (c *Conn) GetElement(set string, key []byte) ([]byte, bool, error) {
	msgs, err := c.nl.Execute(c.getElementMessage(set, key))
	if errors.Is(err, syscall.ENOENT) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading element %x of %s: %w", key, set, err)
	}
	for _, m := range msgs {
		if val, ok := elementValue(m.Data); ok {
			return val, true, nil
		}
	}
	return nil, false, nil
}

// getElementMessage is NFT_MSG_GETSETELEM without NLM_F_DUMP: the kernel
// answers with the one element named by key, or ENOENT.
func (c *Conn) getElementMessage(set string, key []byte) netlink.Message {
	keyAttr, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_DATA_VALUE, Data: key}})
	elem, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_KEY, Data: keyAttr}})
	list, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: elem}})
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, c.table)
	ae.String(unix.NFTA_SET_ELEM_LIST_SET, set)
	ae.Bytes(unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_LIST_ELEMENTS, list)
	attrs, _ := ae.Encode()
	return nftMessage(unix.NFT_MSG_GETSETELEM, netlink.Request, attrs)
}

// elementValue reads the data value of the first element of a NEWSETELEM
// message (after nfgenmsg); ok is false when it holds no element.
func elementValue(data []byte) (val []byte, ok bool) {
	if len(data) < 4 {
		return nil, false
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return nil, false
	}
	for ad.Next() {
		if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			continue
		}
		ad.Nested(func(list *netlink.AttributeDecoder) error {
			for list.Next() && !ok {
				list.Nested(func(el *netlink.AttributeDecoder) error {
					ok = true
					for el.Next() {
						if el.Type() == unix.NFTA_SET_ELEM_DATA {
							val = nestedValue(el.Bytes())
						}
					}
					return nil
				})
			}
			return nil
		})
	}
	return val, ok
}

// nestedValue is the NFTA_DATA_VALUE inside an NFTA_SET_ELEM_DATA.
func nestedValue(b []byte) []byte {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil
	}
	for ad.Next() {
		if ad.Type() == unix.NFTA_DATA_VALUE {
			return ad.Bytes()
		}
	}
	return nil
}

// nftMessage is an nf_tables request of type msg in the inet family.
func nftMessage(msg int, flags netlink.HeaderFlags, attrs []byte) netlink.Message {
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msg), Flags: flags},
		Data:   append([]byte{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0}, attrs...),
	}
}

// GotoChain parses a vmap element's data (NFTA_DATA_VERDICT, which the
// library does not decode): the chain of a goto verdict, or "".
func GotoChain(data []byte) string {
	ad, err := netlink.NewAttributeDecoder(data)
	if err != nil {
		return ""
	}
	ad.ByteOrder = binary.BigEndian
	var code int32
	var chain string
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_VERDICT_CODE:
			code = int32(ad.Uint32())
		case unix.NFTA_VERDICT_CHAIN:
			chain = ad.String()
		}
	}
	if ad.Err() != nil || code != unix.NFT_GOTO {
		return ""
	}
	return chain
}

// CString is b up to its first NUL, as the kernel sends an interface
// name or a string key.
func CString(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\x00")
	return s
}

// VerdictChain is the chain a verdict map element's data goes to: the
// library leaves the element's NFTA_DATA_VERDICT undecoded in Val.
func VerdictChain(val []byte) string {
	ad, err := netlink.NewAttributeDecoder(val)
	if err != nil {
		return ""
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		if ad.Type() == unix.NFTA_VERDICT_CHAIN {
			return ad.String()
		}
	}
	return ""
}
