package upkeep

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// logBuffer collects the JSON log lines of an upkeep, also those Run's
// goroutine writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(b, nil)) }

// A reloaded entry reaches the running upkeep at once, not at its next
// period (an hour here), and the latest of two not yet taken wins: the
// jobs after it work on its dataDir and uplink routing.
func TestTheRunningUpkeepTakesTheLatestEntryAtOnce(t *testing.T) {
	logs := &logBuffer{}
	u := &Upkeep{DataDir: t.TempDir(), RepairEvery: time.Hour, Log: logs.logger()}
	route := slots.Config{Mask: 0xf00000, Table: 5240, Priority: 5240}
	older := Entry{DataDir: "/run/eip-older", UplinkRouting: config.UplinkRouting{Route: slots.Default()}}
	newer := Entry{DataDir: "/run/eip-newer", UplinkRouting: config.UplinkRouting{Route: route}}
	u.Use(older)
	u.Use(newer)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); u.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "/run/eip-newer") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if u.DataDir != newer.DataDir || u.UplinkRouting.Route != route {
		t.Errorf("the upkeep works on %s with %+v; want the newer entry's %s and %+v", u.DataDir, u.UplinkRouting.Route, newer.DataDir, route)
	}
	if strings.Contains(logs.String(), "/run/eip-older") {
		t.Errorf("an entry replaced before Run took it was taken:\n%s", logs)
	}
	if !strings.Contains(logs.String(), `"mark":"0xf00000"`) {
		t.Errorf("the switch was not logged with the new mark:\n%s", logs)
	}
}
