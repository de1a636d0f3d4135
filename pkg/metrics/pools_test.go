package metrics

import "testing"

func TestPoolAddressesAreReadAtEachScrapeByState(t *testing.T) {
	m := New("v", "r", t.TempDir())
	expect(t, m, "", "external_ip_pool_addresses")
	used := int64(3)
	m.ReadPools(func() []PoolAddresses { return []PoolAddresses{{Pool: "web", Used: used, Free: 13 - used}} })
	expect(t, m, `
# HELP external_ip_pool_addresses IPs of each ExternalIPPool by state: used (claimed) or free (left to give). Every node process serves the same numbers: aggregate with max by (pool).
# TYPE external_ip_pool_addresses gauge
external_ip_pool_addresses{pool="web",state="free"} 10
external_ip_pool_addresses{pool="web",state="used"} 3
`, "external_ip_pool_addresses")
	used = 13
	expect(t, m, `
# HELP external_ip_pool_addresses IPs of each ExternalIPPool by state: used (claimed) or free (left to give). Every node process serves the same numbers: aggregate with max by (pool).
# TYPE external_ip_pool_addresses gauge
external_ip_pool_addresses{pool="web",state="free"} 0
external_ip_pool_addresses{pool="web",state="used"} 13
`, "external_ip_pool_addresses")
}

func TestAllocationFailuresCountByReason(t *testing.T) {
	m := New("v", "r", t.TempDir())
	m.Refused("PoolExhausted")
	m.Refused("PoolExhausted")
	m.Refused("Unavailable")
	expect(t, m, `
# HELP external_ip_allocation_failures_total Claims this node process refused or could not decide, by reason: PoolExhausted, UnknownPool, NamespaceNotAdmitted, NodeNotAdmitted, OwnedByAnotherNamespace, OwnedByAnotherPod, NotInAnyPool, PoolNotReady, NoPodIdentity, Unavailable.
# TYPE external_ip_allocation_failures_total counter
external_ip_allocation_failures_total{reason="PoolExhausted"} 2
external_ip_allocation_failures_total{reason="Unavailable"} 1
`, "external_ip_allocation_failures_total")
}
