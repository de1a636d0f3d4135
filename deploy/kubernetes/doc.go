// Package kubernetes holds the manifests that deploy external-ip on a
// cluster: the namespace, the ConfigMap with the plugin entry, and the
// installer DaemonSet that runs `external-ip install --watch` on every node.
// It has no code: its test decodes each manifest strictly with the
// Kubernetes API types and checks what the DaemonSet promises (host
// network, only NET_ADMIN and NET_RAW, readiness, no uninstall on leaving).
package kubernetes
