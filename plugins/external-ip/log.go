package main

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/errkind"
)

// logTarget is where this invocation logs, for the detached announcer to
// log there too; nil without logFile. The attributes name the invocation
// on every line.
func logTarget(conf *config.Config, args *skel.CmdArgs) *announce.PlanLog {
	if conf.LogFile == "" {
		return nil
	}
	return &announce.PlanLog{File: conf.LogFile, Level: conf.LogLevel, Attrs: []string{
		"network", conf.Name, "container", args.ContainerID, "ifname", args.IfName, "command", os.Getenv("CNI_COMMAND"),
	}}
}

// openLog opens the structured log; stdout belongs to the CNI result.
func openLog(to *announce.PlanLog) (*slog.Logger, func(), error) {
	if to == nil {
		return slog.New(slog.DiscardHandler), func() {}, nil
	}
	return newLog(to)
}

// logOrDiscard is the log, or none when it cannot be opened, as without
// logFile: a DEL must release and GC collect whatever becomes of the log,
// and the runtime's stderr is no place for our JSON lines. It never fails
// (its error is for startAs). ADD, which opens the log with openLog,
// refuses a log it cannot open and so tells the operator.
func logOrDiscard(to *announce.PlanLog) (*slog.Logger, func(), error) {
	log, done, err := openLog(to)
	if err != nil {
		return slog.New(slog.DiscardHandler), func() {}, nil
	}
	return log, done, nil
}

// newLog opens to.File for appending JSON lines at to.Level and above.
func newLog(to *announce.PlanLog) (*slog.Logger, func(), error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(to.Level)); err != nil {
		return nil, nil, errkind.Errorf(config.ErrInvalid, "logLevel: %q: %w", to.Level, err)
	}
	f, err := os.OpenFile(to.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, nil, errkind.Errorf(config.ErrInvalid, "logFile: %q cannot be opened: %w", to.File, err)
	}
	attrs := make([]any, len(to.Attrs))
	for i, a := range to.Attrs {
		attrs[i] = a
	}
	log := slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: level})).With(attrs...)
	return log, func() { f.Close() }, nil
}
