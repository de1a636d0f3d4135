package upkeep

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
	"github.com/external-ip/external-ip/test/logbuf"
)

// A reloaded entry reaches the running upkeep at once, not at its next
// period (an hour here), and the latest of two not yet taken wins: the
// jobs after it work on its dataDir and uplink routing.
func TestTheRunningUpkeepTakesTheLatestEntryAtOnce(t *testing.T) {
	logs := &logbuf.Buffer{}
	u := &Upkeep{DataDir: t.TempDir(), RepairEvery: time.Hour, Log: logs.Logger()}
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
