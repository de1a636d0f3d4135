package slots

import (
	"fmt"
	"math/bits"
)

// Config names the mark bits, tables and rule priorities that are ours.
type Config struct {
	// Mask is the packet and conntrack mark bits of ours, one contiguous
	// run; slot s is the value s in them.
	Mask uint32
	// Table is the base: slot s routes by table Table+s.
	Table int
	// Priority is the suppress rule's; the slots' rules are at Priority+1.
	Priority int
}

// Defaults: bits 24 to 27 (15 uplinks), tables 4241 to 4255, rules at
// 4240 and 4241. They sit clear of the marks kube-proxy (0x4000, 0x8000),
// Istio (0x539), Cilium (0x0f00) and AWS VPC CNI (0x80) use by default.
const (
	DefaultMask     = 0x0f000000
	DefaultTable    = 4240
	DefaultPriority = 4240
)

// Default is the Config with every default.
func Default() Config {
	return Config{Mask: DefaultMask, Table: DefaultTable, Priority: DefaultPriority}
}

func (c Config) shift() int { return bits.TrailingZeros32(c.Mask) }

// Slots is how many uplinks the mask can tell apart.
func (c Config) Slots() int { return int(c.Mask >> c.shift()) }

// Mark is slot s's value in the mask.
func (c Config) Mark(s int) uint32 { return uint32(s) << c.shift() }

// SlotOf is the slot a mark carries, 0 for none.
func (c Config) SlotOf(mark uint32) int { return int((mark & c.Mask) >> c.shift()) }

// TableOf is slot s's routing table.
func (c Config) TableOf(s int) int { return c.Table + s }

// Validate names the first field that cannot work.
func (c Config) Validate() error {
	if c.Mask == 0 || bits.OnesCount32(c.Mask>>c.shift()) != bits.Len32(c.Mask>>c.shift()) {
		return fmt.Errorf("mark: %#x is not one contiguous run of bits", c.Mask)
	}
	last := int64(c.Table) + int64(c.Slots())
	switch {
	case c.Table < 1:
		return fmt.Errorf("table: %d: must be at least 1", c.Table)
	case last > 1<<31-1:
		return fmt.Errorf("table: %d: its uplinks' tables %d to %d pass the kernel's last, %d", c.Table, int64(c.Table)+1, last, 1<<31-1)
	case c.Table < 256 && last >= 253:
		return fmt.Errorf("table: %d: tables %d to %d must avoid 0 and 253 to 255 (default, main, local)", c.Table, c.Table+1, last)
	}
	if c.Priority < 1 || c.Priority+1 >= 32766 {
		return fmt.Errorf("priority: %d: must be between 1 and 32764, before the main table's rule", c.Priority)
	}
	return nil
}
