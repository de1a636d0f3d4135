// Package poolrows is the bench's pool rows: what the cluster's pools cost
// an ADD, against a real API server (etcd and kube-apiserver of
// test/e2e/kubernetes/build.sh's cached build) and the node process
// (external-ip-node) serving the node's socket, all in a node namespace of
// their own, as the e2e's single-node cluster runs them. The pods asking
// exist as API objects on that node; no kubelet runs them: the bench execs
// the plugin as the runtime would, with the pod's CNI_ARGS and annotation.
//
// It owns the cluster (its processes, objects and scratch directory) and
// what each row asks; the bench owns the nodes, the timing and the report,
// and lends them through Bench. It touches no namespace but the node the
// bench made for it.
package poolrows
