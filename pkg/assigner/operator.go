package assigner

import (
	"log/slog"
	"time"

	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// ForOperator is the assigner of a command an operator runs without a
// network's config (repair, uninstall): the uplink routing is read and
// repaired with the default mark, tables and priorities, and each routed
// uplink keeps the gateway its table has where the main table names none.
func ForOperator(dataDir, device string, log *slog.Logger) *Assigner {
	nat := steer.HostNAT()
	return New(Options{Device: device, DataDir: dataDir, LockTimeout: 5 * time.Second, NAT: nat, Log: log,
		Routing: uplinkroute.NewHostRouting(nat, slots.Default(), nil, false)})
}
