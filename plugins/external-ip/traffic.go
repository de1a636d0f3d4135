package main

import (
	"log/slog"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/park"
)

// keepNAT hands the netfilter sockets to the announcing session, which
// keeps them open past our exit with its own slow sockets (parked, or in
// its detached child): our copy is closed here, before the session's
// Finish, so that ours is never the last.
func keepNAT(s *announce.Session, nat *assigner.HostTable, log *slog.Logger) {
	files, err := nat.Files()
	if err != nil {
		log.Warn("netfilter socket closed in the plugin", "error", err)
	}
	for _, f := range files {
		s.Keep(f)
	}
	nat.Close()
}

// handOverNAT keeps the netfilter sockets (nf_tables', conntrack's) that
// this invocation opened open until after we have exited: the kernel's
// release of such a socket waits out the last nf_tables commit's RCU grace
// period (10 to 20 ms), which the runtime would otherwise wait for on every
// DEL and GC that steers. They are parked (package park) or, where that
// fails, inherited by the announcer binary holding a pipe, which exits once
// our copies are closed, sending nothing.
func handOverNAT(nat *assigner.HostTable, log *slog.Logger) {
	files, err := nat.Files()
	if err != nil && len(files) == 0 {
		log.Warn("netfilter sockets closed in the plugin", "error", err)
	}
	h := announce.Holder{Park: park.Files, Log: log}
	w, err := h.Hold(announce.Plan{}, "netfilter sockets", files)
	nat.Close()
	if w != nil {
		w.Close() // the child's close, now the last, is off our path
	}
	if err != nil {
		log.Warn("nf_tables socket closed in the plugin", "error", err)
	}
}
