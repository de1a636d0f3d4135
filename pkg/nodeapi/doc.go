// Package nodeapi is what the plugin and the node process (external-ip-node)
// say to each other on one node, and the files through which they manage
// when the other is not there. The plugin imports it, so it links nothing
// heavier than the plugin already does: no client-go, no HTTP (every CNI
// call starts the binary anew).
//
// The node process serves one request per connection, JSON, on the unix
// socket dataDir/node.sock (0600, root's, under /run: as Antrea's and
// Cilium's agents serve their plugins). The plugin asks it to claim IPs
// for an attachment (from a pool, or those it names while pools exist) and
// to release an attachment's claims. A claim's connection stays open until
// the plugin exits (DoThenHold): the node process tells the pod how it
// went only at that close, after the ADD.
//
// The files, under dataDir/claims/ (0700, root's, reached through an
// os.Root so that no name leaves it):
//
//	pools           written by the node process while the cluster has pools:
//	                the plugin reads it (one open) to know whether an IP it
//	                is asked for needs a claim, and STATUS how the pools
//	                that say so hold their IPs. Absent: today's path, no
//	                socket, no cost, the node process may be down.
//	att/<key>       an attachment that asked for a claim, written by the
//	                plugin before it asks: DEL asks for a release only for
//	                these, and the node process releases the holders of its
//	                node whose attachment has none (a reply lost on the way).
//	released/<key>  a DEL's release that the node process was not there to
//	                hear: moved there atomically from att/, carried out and
//	                removed when the node process is back.
//
// It owns these files and the socket's protocol; it decides nothing about
// who may hold an IP (package claims does, in the node process) and never
// touches the plugin's state in dataDir/<device>/ (package store's).
package nodeapi
