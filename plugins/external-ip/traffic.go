package main

import (
	"log/slog"
	"os"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
)

// keepNAT hands the nf_tables socket to the announcing session, whose
// detached child ADD starts anyway, instead of a child of its own: our copy
// is closed here, before the session lets its child close the last.
func keepNAT(s *announce.Session, nat *assigner.HostTable, log *slog.Logger) {
	f, err := nat.File()
	if err != nil {
		log.Warn("nf_tables socket closed in the plugin", "error", err)
	}
	if f != nil {
		s.Keep(f)
	}
	nat.Close()
}

// handOverNAT gives the nf_tables socket, if this invocation opened one, to
// a detached child that closes it after we have exited: the kernel's
// release of that socket waits out the last commit's RCU grace period (10
// to 20 ms), which the runtime would otherwise wait for on every ADD and
// DEL that steers. The child is the announcer binary holding a pipe: it
// exits once our copies are closed, sending nothing.
func handOverNAT(nat *assigner.HostTable, log *slog.Logger) {
	f, err := nat.File()
	if f == nil {
		if err != nil {
			log.Warn("nf_tables socket closed in the plugin", "error", err)
		}
		nat.Close()
		return
	}
	r, w, err := os.Pipe()
	exe, xerr := os.Executable()
	if err == nil && xerr == nil {
		err = announce.Detach(exe, announce.Plan{Hold: true}, r, f) // closes r and f
	} else {
		f.Close()
	}
	nat.Close()
	if w != nil {
		w.Close() // the child's close, now the last, is off our path
	}
	if err != nil || xerr != nil {
		log.Warn("nf_tables socket closed in the plugin", "error", err, "exe", xerr)
	}
}
