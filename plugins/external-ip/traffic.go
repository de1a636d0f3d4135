package main

import (
	"log/slog"
	"os"

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
	if len(files) == 0 {
		if err != nil {
			log.Warn("netfilter sockets closed in the plugin", "error", err)
		}
		nat.Close()
		return
	}
	perr := park.Files(files)
	if perr == nil {
		nat.Close()
		return
	}
	log.Debug("parking failed, a child holds the netfilter sockets", "error", perr)
	holdInChild(files, nat, log)
}

// holdInChild gives files to a detached child that holds them until nat,
// our own copy, is closed.
func holdInChild(files []*os.File, nat *assigner.HostTable, log *slog.Logger) {
	r, w, err := os.Pipe()
	exe, xerr := os.Executable()
	if err == nil && xerr == nil {
		err = announce.Detach(exe, announce.Plan{Hold: true}, append([]*os.File{r}, files...)...) // closes them
	} else {
		for _, f := range files {
			f.Close()
		}
	}
	nat.Close()
	if w != nil {
		w.Close() // the child's close, now the last, is off our path
	}
	if err != nil || xerr != nil {
		log.Warn("nf_tables socket closed in the plugin", "error", err, "exe", xerr)
	}
}
