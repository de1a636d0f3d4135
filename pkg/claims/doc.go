// Package claims is the node process's side of the cluster's pools and
// claims (API group external-ip.io): it answers the plugin's requests
// (package nodeapi) with client-go's informers and the API server's
// create-if-absent, so that every external IP has one owner in the whole
// cluster.
//
//   - A pool request takes, for each family the pool has, the IP its owner
//     already has (a re-ADD; a StatefulSet's ordinal, whichever pod has it
//     now), else a free one: from a random place in the pool, the next IP no
//     cached claim has, made with Create; AlreadyExists (another node won
//     the race) moves on to the next. Having tried every IP, the pool is
//     exhausted once one list of its claims on the server agrees (the
//     cache may lag behind deletes). Other lookups go through the
//     informer's indexes (by pool and family, by owner, by holder's
//     attachment and node).
//   - A pod scheduled to this node that asks a pool by its annotation is
//     claimed for at once, as its ADD would be, with a pending holder (this
//     node and the pod, no attachment yet): the create is done long before
//     the kubelet's sandbox asks. Its ADD finds that claim under the
//     owner's lock, answers without a write, and writes its attachment
//     into the holder once it is over; a pending holder whose pod goes
//     before its ADD goes with its claim.
//   - An IP a pod names is claimed for its namespace: made if absent,
//     joined (optimistic concurrency) if the namespace owns it, refused
//     naming the owning namespace (never its pods) if another does; an IP
//     a pool drew for a pod or an ordinal is refused to any other.
//   - A release takes the attachment off its claims and deletes a claim
//     nobody holds, with its UID and resourceVersion as preconditions;
//     a StatefulSet's claim stays with its ordinal.
//   - The node reconciles its own holders with the plugin's intents and
//     carries out the releases DELs deferred. The node process that holds
//     the Lease reconciles the cluster: package leader, which this package
//     runs and hands the node as leader.Node (its caches, its pools and
//     their counts, its writes of claims).
//   - For the standby watch (Standby), a claim names the IP's active node:
//     its first holder's, then the node that took the IP over; the watch
//     asks it from the cache, and a takeover's write never holds the
//     takeover up.
//
// Every refusal is an Event on the pod and a count for the metrics; the
// pod is annotated with what it got. It touches nothing on the host but
// its own files under dataDir/claims (package nodeapi's), and of the
// cluster only claims and the pods' annotation and label (the leader, pool
// status, its Lease and ConfigMap); apiclient makes its clients (and bounds
// their requests), trimmed the leader's informers of pods and StatefulSets,
// claimstest is a fake API server for its tests.
package claims
