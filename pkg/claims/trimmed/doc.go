// Package trimmed makes the informers by which the leading node process
// watches the cluster's pods that hold claims and all its StatefulSets,
// each object cached with only what package leader reads of it (who it
// is; a StatefulSet's ordinals' range): whole objects, pod templates and
// all, would sit in the node process's memory, whose limit is the
// DaemonSet's. It reads and writes nothing itself; starting, waiting for
// and stopping the informers is the caller's.
package trimmed
