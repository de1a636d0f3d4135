package metrics

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/external-ip/external-ip/pkg/report"
	"github.com/external-ip/external-ip/pkg/tally"
	"github.com/external-ip/external-ip/pkg/upkeep"
)

// expect compares the named series with the text exposition want.
func expect(t *testing.T, m *Metrics, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

func TestBuildInfoIsOneWithTheVersionAndRevision(t *testing.T) {
	m := New("v1.2.3", "abc123", t.TempDir())
	expect(t, m, `
# HELP external_ip_build_info 1, labelled with the version and revision of the node process.
# TYPE external_ip_build_info gauge
external_ip_build_info{revision="abc123",version="v1.2.3"} 1
`, "external_ip_build_info")
}

func TestAHeldSeriesExistsOnlyWhileTheIPIsHeld(t *testing.T) {
	m := New("v", "r", t.TempDir())
	a, b := netip.MustParseAddr("192.0.2.5"), netip.MustParseAddr("2001:db8::5")
	m.Held([]upkeep.HeldIP{{IP: a, Uplink: "up0", Holders: 2}, {IP: b, Uplink: "up1", Holders: 1}})
	const head = `
# HELP external_ip_held Attachments holding the IP on this node; the series exists only while the IP is held.
# TYPE external_ip_held gauge
`
	expect(t, m, head+`external_ip_held{ip="192.0.2.5",uplink="up0"} 2
external_ip_held{ip="2001:db8::5",uplink="up1"} 1
`, "external_ip_held")
	m.Held([]upkeep.HeldIP{{IP: b, Uplink: "up1", Holders: 1}})
	expect(t, m, head+`external_ip_held{ip="2001:db8::5",uplink="up1"} 1
`, "external_ip_held")
}

func TestAnnouncementsCountRoundsByReason(t *testing.T) {
	m := New("v", "r", t.TempDir())
	m.Announced("up0", upkeep.ReasonPeriodic)
	m.Announced("up1", upkeep.ReasonPeriodic)
	m.Announced("up0", upkeep.ReasonDefend)
	expect(t, m, `
# HELP external_ip_announcements_total Announcement rounds the upkeep sent, by reason: periodic (--reannounce-every) or defend (a conflict).
# TYPE external_ip_announcements_total counter
external_ip_announcements_total{reason="defend"} 1
external_ip_announcements_total{reason="periodic"} 2
`, "external_ip_announcements_total")
}

func TestRepairsCountByKind(t *testing.T) {
	m := New("v", "r", t.TempDir())
	m.Repaired(report.KindAddress)
	m.Repaired(report.KindNAT)
	m.Repaired(report.KindAddress)
	expect(t, m, `
# HELP external_ip_repairs_total Drift the upkeep repaired, by kind: address, proxy, nat, index, journal, uplink, routing, other.
# TYPE external_ip_repairs_total counter
external_ip_repairs_total{kind="address"} 2
external_ip_repairs_total{kind="nat"} 1
`, "external_ip_repairs_total")
}

func TestTheConflictGaugeLastsForTheEpisodeAndTheCounterCountsEpisodes(t *testing.T) {
	m := New("v", "r", t.TempDir())
	ip, mac := netip.MustParseAddr("192.0.2.5"), net.HardwareAddr{2, 0, 0, 0, 0, 0x66}
	m.ConflictBegan(ip, mac)
	expect(t, m, `
# HELP external_ip_conflict 1 while another host claims one of the node's held IPs; mac is the MAC that began the episode (one series per IP).
# TYPE external_ip_conflict gauge
external_ip_conflict{ip="192.0.2.5",mac="02:00:00:00:00:66"} 1
# HELP external_ip_conflicts_total Conflict episodes: another MAC began to claim a held IP.
# TYPE external_ip_conflicts_total counter
external_ip_conflicts_total 1
`, "external_ip_conflict", "external_ip_conflicts_total")
	m.ConflictEnded(ip, mac)
	m.ConflictBegan(ip, mac)
	m.ConflictEnded(ip, mac)
	if n := testutil.CollectAndCount(m.conflict); n != 0 {
		t.Errorf("%d conflict series after the episodes ended, want none", n)
	}
	if v := testutil.ToFloat64(m.conflicts); v != 2 {
		t.Errorf("external_ip_conflicts_total %v after two episodes, want 2", v)
	}
}

func TestCNIRequestsAreFoldedFromTheTallyAtEachScrape(t *testing.T) {
	dir, dir2 := t.TempDir(), t.TempDir()
	m := New("v", "r", dir, dir2)
	tally.Record(dir, "ADD", 0)
	tally.Record(dir, "ADD", 0)
	tally.Record(dir2, "ADD", 0)
	tally.Record(dir, "DEL", 11)
	const head = `
# HELP external_ip_cni_requests_total The plugin's invocations on this node since the node process started folding them, by verb and CNI result code (0: success).
# TYPE external_ip_cni_requests_total counter
`
	expect(t, m, head+`external_ip_cni_requests_total{code="0",verb="ADD"} 3
external_ip_cni_requests_total{code="11",verb="DEL"} 1
`, "external_ip_cni_requests_total")
	tally.Record(dir, "CHECK", 104)
	expect(t, m, head+`external_ip_cni_requests_total{code="0",verb="ADD"} 3
external_ip_cni_requests_total{code="104",verb="CHECK"} 1
external_ip_cni_requests_total{code="11",verb="DEL"} 1
`, "external_ip_cni_requests_total")
}

func TestServeAnswersOnMetricsUntilTheContextEnds(t *testing.T) {
	m := New("v9", "r9", t.TempDir())
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Serve(ctx, l, slog.New(slog.DiscardHandler)) }()
	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `external_ip_build_info{revision="r9",version="v9"} 1`) {
		t.Errorf("GET /metrics: %s\n%s", resp.Status, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after its context ended: %v", err)
	}
	if _, err := Listen(l.Addr().String()); err != nil {
		t.Errorf("the port is still taken after Serve returned: %v", err)
	}
}

func TestAPortInUseFailsAtTheStart(t *testing.T) {
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := Listen(l.Addr().String()); err == nil || !strings.Contains(err.Error(), "--metrics-address "+l.Addr().String()) {
		t.Errorf("a second listener on %s: %v, want an error naming --metrics-address", l.Addr(), err)
	}
}

// After the plugin entry is reloaded with another dataDir, the plugin
// counts its calls there: they are folded from then on, the counts of the
// first dataDir kept, and a dataDir given twice folded once.
func TestCNIRequestsAreFoldedFromTheNewDataDirOnceTheEntryChanges(t *testing.T) {
	dir, next := t.TempDir(), filepath.Join(t.TempDir(), "new")
	m := New("v", "r", dir)
	tally.Record(dir, "ADD", 0)
	m.FoldFrom(next)
	m.FoldFrom(next)
	m.FoldFrom(dir)
	if _, err := os.Stat(next); err != nil {
		t.Fatalf("the new dataDir was not made for the plugin's first call there: %v", err)
	}
	tally.Record(next, "ADD", 0)
	tally.Record(next, "DEL", 0)
	expect(t, m, `
# HELP external_ip_cni_requests_total The plugin's invocations on this node since the node process started folding them, by verb and CNI result code (0: success).
# TYPE external_ip_cni_requests_total counter
external_ip_cni_requests_total{code="0",verb="ADD"} 2
external_ip_cni_requests_total{code="0",verb="DEL"} 1
`, "external_ip_cni_requests_total")
}
