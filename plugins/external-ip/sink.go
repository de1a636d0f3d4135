package main

import (
	"errors"
	"log/slog"
	"os"

	"github.com/external-ip/external-ip/pkg/sink"
)

// sinkIn is linger.Options.Sink for the dataDir dir: dir's sink takes the
// netfilter sockets; where none runs yet this invocation starts one for
// the next and keeps its own otherwise.
func sinkIn(dir string, log *slog.Logger) func([]*os.File) error {
	return func(files []*os.File) error {
		err := sink.Give(dir, files)
		if !errors.Is(err, sink.ErrAbsent) {
			return err
		}
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
