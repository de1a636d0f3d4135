//go:build metrics

package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/metrics"
	"github.com/external-ip/external-ip/pkg/upkeep"
)

// metricsBuilt is true in the node build (external-ip-node).
const metricsBuilt = true

// startMetrics serves the metrics on addr until ctx ends; "" serves none.
// The tally is folded from dataDir and, when it is another, the default
// dataDir, where the plugin counts a call whose config it could not read.
func startMetrics(ctx context.Context, wg *sync.WaitGroup, addr, dataDir string, log *slog.Logger) (upkeep.Recorder, error) {
	if addr == "" {
		return nil, nil
	}
	l, err := metrics.Listen(addr)
	if err != nil {
		return nil, err
	}
	var others []string
	if dataDir != config.DefaultDataDir {
		others = append(others, config.DefaultDataDir)
	}
	v, rev := versionParts()
	m := metrics.New(v, rev, dataDir, others...)
	wg.Go(func() {
		if err := m.Serve(ctx, l, log); err != nil {
			log.Error("metrics stopped", "error", err)
		}
	})
	log.Info("serving metrics", "address", l.Addr().String())
	return m, nil
}
