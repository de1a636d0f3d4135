//go:build !(metrics && kubernetes)

package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/external-ip/external-ip/pkg/standby"
	"github.com/external-ip/external-ip/pkg/upkeep"
)

// claimsBuilt is false: this build has no Kubernetes client (the plugin's
// own build, which every CNI call starts, must not link client-go).
const claimsBuilt = false

func startClaims(_ context.Context, _ context.CancelCauseFunc, _ *sync.WaitGroup, f *claimFlags, _ string, _ upkeep.Recorder, _ *slog.Logger) (standby.Claims, error) {
	if f.nodeName == "" {
		return nil, nil
	}
	return nil, fmt.Errorf("install: --node-name %q: this binary is built without the Kubernetes client; external-ip-node serves claims (docs/pools.md)", f.nodeName)
}
