package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/config"
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

// newLog opens to.File for appending JSON lines at to.Level and above.
func newLog(to *announce.PlanLog) (*slog.Logger, func(), error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(to.Level)); err != nil {
		return nil, nil, fmt.Errorf("%w: logLevel: %w", config.ErrInvalid, err)
	}
	f, err := os.OpenFile(to.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: logFile: %w", config.ErrInvalid, err)
	}
	attrs := make([]any, len(to.Attrs))
	for i, a := range to.Attrs {
		attrs[i] = a
	}
	log := slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: level})).With(attrs...)
	return log, func() { f.Close() }, nil
}
