package main

import (
	"errors"
	"log/slog"
	"os"

	"github.com/external-ip/external-ip/pkg/sink"
)

// sinkIn is linger.Options.Sink for the dataDir dir: dir's sink takes the
// netfilter sockets. Where none runs yet, a CNI call (start) tries once to
// start one for the next calls and keeps its own sockets otherwise; the
// conntrack clean-up child starts none: it comes after its own call,
// which would look like a second call within the sink's idle time.
func sinkIn(dir string, log *slog.Logger, start bool) func([]*os.File) error {
	return func(files []*os.File) error {
		err := sink.Give(dir, files)
		if !start || !errors.Is(err, sink.ErrAbsent) {
			return err
		}
		start = false // Board and Done each hand sockets over
		exe, xerr := os.Executable()
		if xerr == nil {
			xerr = sink.Start(exe, dir)
		}
		if xerr != nil {
			log.Debug("no sink started", "error", xerr)
		}
		return err
	}
}

// runSink is the process sink.Start starts: dir's sink, until idle.
func runSink(dir string) int {
	if err := sink.Serve(dir, sink.Options{}); err != nil {
		return 1
	}
	return 0
}
