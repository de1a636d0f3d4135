//go:build !metrics

package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/external-ip/external-ip/pkg/upkeep"
)

// metricsBuilt is false: this is the plugin's build, which starts at every
// CNI call and must not link client_golang (package metrics' doc).
const metricsBuilt = false

func startMetrics(context.Context, *sync.WaitGroup, string, string, *slog.Logger) (upkeep.Recorder, error) {
	return nil, nil
}
