package metrics

import (
	"net/netip"
	"testing"

	"github.com/external-ip/external-ip/pkg/standby"
)

func TestTheStandbySeriesFollowTheStandbyIPsAndTakeoversCountByReason(t *testing.T) {
	m := New("v", "r", t.TempDir())
	a, b := netip.MustParseAddr("192.0.2.5"), netip.MustParseAddr("2001:db8::5")
	m.Standby([]netip.Addr{a, b})
	m.Standby([]netip.Addr{b})
	m.TookOver(standby.ReasonGoodbye)
	m.Yielded(standby.ReasonUplinkDown)
	expect(t, m, `
# HELP external_ip_standby 1 while the IP is held on this node in standby only: another node answers for it (one series per IP).
# TYPE external_ip_standby gauge
external_ip_standby{ip="2001:db8::5"} 1
# HELP external_ip_takeovers_total IPs this node took over from standby, by reason: unanswered (the active missed its checks) or goodbye (the active released it).
# TYPE external_ip_takeovers_total counter
external_ip_takeovers_total{reason="goodbye"} 1
external_ip_takeovers_total{reason="unanswered"} 0
# HELP external_ip_yields_total IPs this node gave up to standby, by reason: conflict (another node holds it too, with a higher MAC) or uplink-down.
# TYPE external_ip_yields_total counter
external_ip_yields_total{reason="conflict"} 0
external_ip_yields_total{reason="uplink-down"} 1
`, "external_ip_standby", "external_ip_takeovers_total", "external_ip_yields_total")
}
