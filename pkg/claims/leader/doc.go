// Package leader is the cluster's reconciliation of claims, run by the one
// node process that holds the Lease (LeaseName): it takes part in the
// election, and for each term it leads it sweeps every claim now, on every
// change that may free one, and every SweepEvery. A sweep releases the
// holders whose pod object is gone (read live, compared by UID: never while
// the pod exists), deletes a claim nobody holds unless a StatefulSet of its
// name keeps its ordinal (one made again under the name keeps it too, and
// the claim takes its UID) and its pool's ranges still hold its IP, tells
// the holders of a claim an edit left outside its pool's ranges (a Warning
// event, once a term), writes every pool's status (its counts and
// Ready condition) and the admission policy's view of the pools (the
// ConfigMap PolicyParams).
//
// It owns the term: the election, its informers of the pods that hold
// claims and of every StatefulSet (package trimmed), and the sweep's
// decisions. It reads the claims and pools through the node process's
// caches and writes claims through the node's own writes (Node, package
// claims's), so that the node and the leader change a claim the one same
// way; it never answers the plugin, and never touches a node's files.
package leader
