// Package kubernetes holds the manifests that deploy external-ip on a
// cluster: the namespace, the ConfigMap with the plugin entry, and the
// installer DaemonSet that runs `external-ip-node install --watch` on every
// node, for the Prometheus Operator a PodMonitor and a PrometheusRule, and,
// under examples/, the workloads that docs/workloads.md shows fitting one
// external IP. It has no code: its tests decode each manifest strictly with
// the Kubernetes API types and check what the DaemonSet promises (host
// network, only NET_ADMIN and NET_RAW, readiness, no uninstall on leaving,
// metrics where the scrape looks), that RBAC grants exactly what the node
// process does and the admission policies refuse what they must (their
// CEL evaluated offline, as the API server of the oldest release each says
// it needs compiles it, and that release exactly; every pod write the
// node process makes admitted by the policy that bounds them), that the
// install docs say the release the manifests need and never drop the
// node-pods policy, that the alerts use served metrics, and why each
// example fits (one replica and its strategy, one node, or a spread for
// route mode), its annotation in the pod template.
package kubernetes
