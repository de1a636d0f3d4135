// Package v1alpha1 is the API that users of external-ip write and read on
// Kubernetes, group external-ip.io, version v1alpha1:
//
//   - ExternalIPPool (cluster-scoped): ranges of IPs, who may draw from
//     them (namespaces by name or label), which nodes may hold them, and
//     how; its status counts what is used and free, and says why the pool
//     gives nothing when it cannot (its ranges overlap an older pool's).
//   - ExternalIPClaim (cluster-scoped, one per IP, named after it): the one
//     owner of an IP in the whole cluster and the attachments holding it.
//     One object per IP, made with the API's create-if-absent, is what
//     makes two nodes racing for an IP end with one owner, as Kubernetes'
//     own Service allocator keeps one IPAddress per IP; a single object per
//     pool that every allocation rewrites is what gave whereabouts its
//     duplicates and leaks under contention.
//
// It holds the Go types, their deep copies (zz_generated.deepcopy.go) and
// the markers from which `go generate` makes the CRDs in deploy/kubernetes;
// the names derived from an IP, and the annotation and label keys that the
// node process, the admission policy and users share. It decides nothing
// and talks to no API server: package pools reads a pool's ranges, package
// claims allocates.
//
// +kubebuilder:object:generate=true
// +groupName=external-ip.io
package v1alpha1

//go:generate go tool controller-gen object paths=. crd:maxDescLen=400 output:crd:dir=../../../../deploy/kubernetes
