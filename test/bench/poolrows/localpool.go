package poolrows

// The node-local pool's row: a pool of the plugin's config (key pools),
// asked through runtimeConfig.externalIPPool, as podman or cnitool ask
// it. No cluster and no node process: the plugin picks a free IP from its
// state directory under the assigner's lock. It runs on the bench's empty
// node beside the explicit-IP row, whose ADD it is held against: both a
// new IP each iteration (this one the pool's first free IP, given back by
// the DEL), both IPv4 with the default traffic.

// RowLocalPool is the node-local pool's ADD row.
var RowLocalPool = Row("node-local pool (config pools)")

const (
	localPool, localPoolRange = "local", "198.19.200.0/24"
	// localSandbox is the row's container: one ADD and its DEL at a time.
	localSandbox = "sandbox-local-pool"
)

// LocalCall is the row's change to the bench's ADD: the config's pools,
// one IPv4 pool inside the bench's allowedRanges, and the request for it.
func LocalCall() Call {
	return Call{Conf: map[string]any{"pools": map[string][]string{localPool: {localPoolRange}}},
		RuntimeConfig: map[string]any{"externalIPPool": localPool}, ContainerID: localSandbox}
}

// RowNamedLocal is an explicit-IP ADD whose config has pools, the IP
// outside them: what configuring pools costs an attachment that names its
// own IP.
var RowNamedLocal = Row("explicit IP, the config with pools")

// namedLocalRange holds the named row's IPs, in allowedRanges, in no pool.
const namedLocalRange = "198.19.201.0/24"

// LocalRow adds the node-local pool's rows to b, as attachments k and k+1
// on n.
func LocalRow(b Bench, n Node, k int) {
	b.Pair(RowLocalPool, n, k, func(int) Call { return LocalCall() })
	b.Pair(RowNamedLocal, n, k+1, func(it int) Call {
		// A new IP each iteration, as the explicit-IP row's; each ADD's
		// DEL comes before the next ADD.
		return Call{Conf: map[string]any{"pools": map[string][]string{localPool: {localPoolRange}}},
			RuntimeConfig: map[string]any{"externalIPs": []string{nth(namedLocalRange, it%250+1)}}, ContainerID: "sandbox-local-named"}
	})
}
