package slots

import "testing"

func TestSlotsMarksAndTablesFollowTheMask(t *testing.T) {
	c := Config{Mask: 0x0f000000, Table: 4240, Priority: 4240}
	if c.Slots() != 15 || c.Mark(1) != 0x01000000 || c.Mark(15) != 0x0f000000 || c.TableOf(2) != 4242 {
		t.Errorf("mask %#x: %d slots, marks %#x %#x, table of 2 %d", c.Mask, c.Slots(), c.Mark(1), c.Mark(15), c.TableOf(2))
	}
	for s := 1; s <= c.Slots(); s++ {
		if got := c.SlotOf(c.Mark(s) | 0x4000); got != s {
			t.Errorf("the slot of mark %#x with another program's bit is %d, want %d", c.Mark(s)|0x4000, got, s)
		}
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}

func TestValidateRefusesMasksTablesAndPrioritiesThatCannotWork(t *testing.T) {
	for _, c := range []Config{
		{Mask: 0, Table: 4240, Priority: 4240},
		{Mask: 0x05000000, Table: 4240, Priority: 4240}, // not contiguous
		{Mask: 0x0f000000, Table: 240, Priority: 4240},  // reaches 253 to 255
		{Mask: 0x0f000000, Table: 0, Priority: 4240},
		{Mask: 0x0f000000, Table: 4240, Priority: 32765},
		{Mask: 0x0f000000, Table: 4240, Priority: 0},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

// Each refusal of the table says its own reason.
func TestValidateSaysWhyATableCannotWork(t *testing.T) {
	for _, tc := range []struct {
		table int
		says  string
	}{
		{0, "table: 0: must be at least 1"},
		{240, "table: 240: tables 241 to 255 must avoid 0 and 253 to 255 (default, main, local)"},
		{4000000000, "table: 4000000000: its uplinks' tables 4000000001 to 4000000015 pass the kernel's last, 2147483647"},
	} {
		err := Config{Mask: 0x0f000000, Table: tc.table, Priority: 4240}.Validate()
		if err == nil || err.Error() != tc.says {
			t.Errorf("table %d: %v, want %q", tc.table, err, tc.says)
		}
	}
}
