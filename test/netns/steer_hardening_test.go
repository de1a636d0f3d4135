package netns

import (
	"testing"
)

// An ADD that steers relies on the base chains of table inet external-ip
// and their rules: after someone flushes the table or one base chain, the
// next ADD must put them back, or its IP is answered by the node itself
// until GC or repair runs.
func TestAddAfterTheTableOrABaseChainWasFlushedRestoresItAndSteers(t *testing.T) {
	for _, c := range []struct{ what, cmd string }{
		{"table flushed", "flush table inet external-ip"},
		{"prerouting flushed", "flush chain inet external-ip prerouting"},
		{"postrouting flushed", "flush chain inet external-ip postrouting"},
	} {
		t.Run(c.what, func(t *testing.T) {
			w := newWorld(t, "both")
			w.add("a", extV4)
			w.h.nft("%s", c.cmd)
			b := w.add("b", "192.0.2.11")
			serve(t, b.netns, "b", svPort)
			serve(t, nsPath(w.h.lan), "lan", lanSv)
			mustAsk(t, "LAN to b's external IP, ADDed after the "+c.what, nsPath(w.h.lan), "tcp", "192.0.2.11", svPort, "b", lanV4)
			mustAsk(t, "b to the LAN, ADDed after the "+c.what, b.netns, "tcp", lanV4, lanSv, "lan", "192.0.2.11")
			if err := w.check(b); err != nil {
				t.Errorf("CHECK of b, ADDed after the %s: %v", c.what, err)
			}
		})
	}
}
