package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// PoolAddresses is one pool's numbers as the node process's cache has them.
type PoolAddresses struct {
	Pool       string
	Used, Free int64
}

var poolDesc = prometheus.NewDesc("external_ip_pool_addresses",
	"IPs of each ExternalIPPool by state: used (claimed) or free (left to give). Every node process serves the same numbers: aggregate with max by (pool).",
	[]string{"pool", "state"}, nil)

// poolCollector reads the pools at each scrape.
type poolCollector struct {
	mu   sync.Mutex
	read func() []PoolAddresses
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolDesc }

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	read := c.read
	c.mu.Unlock()
	if read == nil {
		return
	}
	for _, p := range read() {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(p.Used), p.Pool, "used")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(p.Free), p.Pool, "free")
	}
}

// ReadPools makes the pools' series come from read, from the next scrape on.
func (m *Metrics) ReadPools(read func() []PoolAddresses) {
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	m.pools.read = read
}

// Refused counts a claim the node process refused or could not decide, by
// reason (the reason of the event on the pod, or Unavailable).
func (m *Metrics) Refused(reason string) { m.allocFailures.WithLabelValues(reason).Inc() }
