package metrics

import (
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/external-ip/external-ip/pkg/standby"
	"github.com/external-ip/external-ip/pkg/tally"
	"github.com/external-ip/external-ip/pkg/upkeep"
)

// Metrics is the node's registry and an upkeep.Recorder.
type Metrics struct {
	reg           *prometheus.Registry
	held          *heldCollector
	announcements *prometheus.CounterVec
	repairs       *prometheus.CounterVec
	conflict      *prometheus.GaugeVec
	conflicts     prometheus.Counter
	cni           *cniCollector
	pools         *poolCollector
	allocFailures *prometheus.CounterVec
	standby       *prometheus.GaugeVec
	takeovers     *prometheus.CounterVec
	yields        *prometheus.CounterVec
}

var (
	_ upkeep.Recorder  = (*Metrics)(nil)
	_ standby.Recorder = (*Metrics)(nil)
)

// New registers every series. The plugin's tally is folded at each scrape
// from dataDir, the node's plugin entry's, made if missing so that the
// first call on a fresh node counts, and from others, only if they exist.
func New(version, revision, dataDir string, others ...string) *Metrics {
	m := &Metrics{
		reg:  prometheus.NewRegistry(),
		held: &heldCollector{},
		announcements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "external_ip_announcements_total",
			Help: "Announcement rounds the upkeep sent, by reason: periodic (--reannounce-every) or defend (a conflict).",
		}, []string{"reason"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "external_ip_repairs_total",
			Help: "Drift the upkeep repaired, by kind: address, proxy, nat, index, journal, uplink, routing, other.",
		}, []string{"kind"}),
		conflict: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "external_ip_conflict",
			Help: "1 while another host claims one of the node's held IPs; mac is the MAC that began the episode (one series per IP).",
		}, []string{"ip", "mac"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "external_ip_conflicts_total",
			Help: "Conflict episodes: another MAC began to claim a held IP.",
		}),
		standby: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "external_ip_standby",
			Help: "1 while the IP is held on this node in standby only: another node answers for it (one series per IP).",
		}, []string{"ip"}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "external_ip_takeovers_total",
			Help: "IPs this node took over from standby, by reason: unanswered (the active missed its checks) or goodbye (the active released it).",
		}, []string{"reason"}),
		yields: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "external_ip_yields_total",
			Help: "IPs this node gave up to standby, by reason: conflict (another node holds it too, with a higher MAC) or uplink-down.",
		}, []string{"reason"}),
	}
	for _, r := range []string{standby.ReasonUnanswered, standby.ReasonGoodbye} {
		m.takeovers.WithLabelValues(r)
	}
	for _, r := range []string{standby.ReasonConflict, standby.ReasonUplinkDown} {
		m.yields.WithLabelValues(r)
	}
	m.pools = &poolCollector{}
	m.allocFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "external_ip_allocation_failures_total",
		Help: "Claims this node process refused or could not decide, by reason: PoolExhausted, UnknownPool, NamespaceNotAdmitted, NodeNotAdmitted, OwnedByAnotherNamespace, OwnedByAnotherPod, NotInAnyPool, PoolNotReady, NoPodIdentity, Unavailable.",
	}, []string{"reason"})
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "external_ip_build_info",
		Help: "1, labelled with the version and revision of the node process.",
	}, []string{"version", "revision"})
	info.WithLabelValues(version, revision).Set(1)
	for _, r := range []string{upkeep.ReasonPeriodic, upkeep.ReasonDefend} {
		m.announcements.WithLabelValues(r) // 0 from the start: rate() needs a first sample
	}
	m.cni = newCNICollector(dataDir, others)
	m.reg.MustRegister(info, m.held, m.announcements, m.repairs, m.conflict, m.conflicts, m.cni, m.standby, m.takeovers, m.yields,
		m.pools, m.allocFailures)
	return m
}

// Registry is where the series are, for the handler and for tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) Held(ips []upkeep.HeldIP)   { m.held.set(ips) }
func (m *Metrics) Announced(_, reason string) { m.announcements.WithLabelValues(reason).Inc() }
func (m *Metrics) Repaired(kind string)       { m.repairs.WithLabelValues(kind).Inc() }
func (m *Metrics) ConflictBegan(ip netip.Addr, mac net.HardwareAddr) {
	m.conflicts.Inc()
	m.conflict.WithLabelValues(ip.String(), mac.String()).Set(1)
}
func (m *Metrics) ConflictEnded(ip netip.Addr, mac net.HardwareAddr) {
	m.conflict.DeleteLabelValues(ip.String(), mac.String())
}

// Standby replaces the IPs held here in standby only.
func (m *Metrics) Standby(ips []netip.Addr) {
	m.standby.Reset()
	for _, ip := range ips {
		m.standby.WithLabelValues(ip.String()).Set(1)
	}
}

func (m *Metrics) TookOver(reason string) { m.takeovers.WithLabelValues(reason).Inc() }
func (m *Metrics) Yielded(reason string)  { m.yields.WithLabelValues(reason).Inc() }

// heldCollector serves the last snapshot of the held IPs whole: a scrape
// never sees half of an update, and a released IP's series is gone.
type heldCollector struct {
	mu  sync.Mutex
	ips []upkeep.HeldIP
}

var heldDesc = prometheus.NewDesc("external_ip_held",
	"Attachments holding the IP on this node; the series exists only while the IP is held.", []string{"ip", "uplink"}, nil)

func (h *heldCollector) set(ips []upkeep.HeldIP) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ips = ips
}

func (h *heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- heldDesc }

func (h *heldCollector) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ip := range h.ips {
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(ip.Holders), ip.IP.String(), ip.Uplink)
	}
}

// FoldFrom folds the plugin's tally from dataDir too, from now on: the
// node's plugin entry was reloaded with it. The folders of before stay,
// so that no counter goes down; one already folded is not added twice.
func (m *Metrics) FoldFrom(dataDir string) { m.cni.add(dataDir) }

// cniCollector folds the plugin's tally at each scrape.
type cniCollector struct {
	mu      sync.Mutex
	dirs    []string
	folders []*tally.Folder
}

func (c *cniCollector) add(dataDir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Contains(c.dirs, dataDir) {
		return
	}
	f := tally.NewFolder(dataDir)
	f.MakeDir = true // the entry's: its first call must count
	f.Fold()         // makes the file: the plugin counts from now on
	c.dirs, c.folders = append(c.dirs, dataDir), append(c.folders, f)
}

var cniDesc = prometheus.NewDesc("external_ip_cni_requests_total",
	"The plugin's invocations on this node since the node process started folding them, by verb and CNI result code (0: success).",
	[]string{"verb", "code"}, nil)

func newCNICollector(dataDir string, others []string) *cniCollector {
	c := &cniCollector{}
	for i, d := range append([]string{dataDir}, others...) {
		f := tally.NewFolder(d)
		f.MakeDir = i == 0
		c.dirs, c.folders = append(c.dirs, d), append(c.folders, f)
	}
	c.fold() // creates the files: the plugin counts from now on
	return c
}

func (c *cniCollector) fold() map[tally.Key]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := map[tally.Key]uint64{}
	for _, f := range c.folders {
		counts, _ := f.Fold() // a fold that fails keeps the totals it had
		for k, n := range counts {
			sum[k] += n
		}
	}
	return sum
}

func (c *cniCollector) Describe(ch chan<- *prometheus.Desc) { ch <- cniDesc }

func (c *cniCollector) Collect(ch chan<- prometheus.Metric) {
	for k, n := range c.fold() {
		ch <- prometheus.MustNewConstMetric(cniDesc, prometheus.CounterValue, float64(n), k.Verb, strconv.FormatUint(uint64(k.Code), 10))
	}
}
