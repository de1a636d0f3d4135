package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

const usage = `usage: external-ip status [--json] [--data-dir DIR] [--device NAME]
       external-ip repair [--data-dir DIR] [--device NAME]

status shows, for each holder device with state under DIR (default %s),
the device, each external IP with its holders (network/container/interface),
and any drift between the state and the kernel. It changes nothing.

repair finishes an interrupted change, rebuilds the per-IP index from the
attachment records and makes the holder carry exactly the held IPs. Run it
after moving aside a state file that an error named as corrupt.
`

// runCLI serves a person at the terminal: status only reads, repair
// changes the state and the holder to match the records.
func runCLI(args []string, stdout, stderr io.Writer) int {
	if code, ok := runNodeCLI(args, stdout, stderr); ok {
		return code
	}
	if len(args) == 0 || (args[0] != "status" && args[0] != "repair") {
		fmt.Fprint(stderr, usageText())
		return 2
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	dataDir := fs.String("data-dir", config.DefaultDataDir, "the plugin's dataDir")
	device := fs.String("device", "", "only this holder device")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	// The device names a directory under dataDir: a name the kernel would
	// refuse ("../x") would put state outside it.
	if *device != "" {
		if err := config.CheckIfName("--device", *device); err != nil {
			fmt.Fprintf(stderr, "external-ip %s: %v\n", args[0], err)
			return 2
		}
	}
	if args[0] == "repair" {
		return repair(*dataDir, *device, stdout, stderr)
	}
	reports, err := collect(*dataDir, *device)
	if err != nil {
		fmt.Fprintf(stderr, "external-ip status: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(reports)
		return 0
	}
	for _, r := range reports {
		printReport(stdout, r)
	}
	if len(reports) == 0 {
		fmt.Fprintf(stdout, "no external-ip state under %s\n", *dataDir)
	}
	return 0
}

// devices is the one device asked for, or every device with state.
func devices(dataDir, device string) ([]string, error) {
	if device != "" {
		return []string{device}, nil
	}
	return host.StateDevices(dataDir)
}

// cliAssigner works without a network's config: the uplink routing is
// read and repaired with the mark, tables and priorities the node's
// routing records (the defaults when none is), and each routed uplink
// keeps the gateway its table has where the main table names none. A
// record that cannot be read leaves the defaults, whose rewrite of the
// chains the routing then refuses.
func cliAssigner(dataDir, device string, log *slog.Logger) *assigner.Assigner {
	nat := steer.HostNAT()
	c, err := uplinkroute.Recorded(nat)
	if err != nil {
		c = slots.Default()
	}
	return assigner.New(assigner.Options{Device: device, DataDir: dataDir, LockTimeout: 5 * time.Second, NAT: nat, Log: log,
		Routing: uplinkroute.NewHostRouting(nat, c, nil, false)})
}

func repair(dataDir, device string, stdout, stderr io.Writer) int {
	devs, err := devices(dataDir, device)
	if err != nil {
		fmt.Fprintf(stderr, "external-ip repair: %v\n", err)
		return 1
	}
	for _, d := range devs {
		fixed, err := cliAssigner(dataDir, d, nil).Repair()
		if err != nil {
			fmt.Fprintf(stderr, "external-ip repair: %s: %v\n", d, err)
			return 1
		}
		for _, f := range fixed {
			fmt.Fprintf(stdout, "%s: fixed: %s\n", d, f)
		}
		fmt.Fprintf(stdout, "%s: repaired\n", d)
	}
	return 0
}

// collect reports on one device, or on every device with state in dataDir.
func collect(dataDir, device string) ([]*assigner.Report, error) {
	devs, err := devices(dataDir, device)
	if err != nil {
		return nil, err
	}
	reports := []*assigner.Report{}
	for _, d := range devs {
		r, err := cliAssigner(dataDir, d, nil).Report()
		if err != nil {
			return nil, err
		}
		reports = append(reports, r)
	}
	return reports, nil
}

func printReport(w io.Writer, r *assigner.Report) {
	fmt.Fprintf(w, "holder %s: %s (state in %s)\n", r.Device, r.Holder, r.StateDir)
	if len(r.IPs) == 0 {
		fmt.Fprintln(w, "  no external IPs held")
	}
	for _, ip := range r.IPs {
		if len(ip.Holders) == 0 {
			printStandby(w, ip)
			continue
		}
		where := "on " + r.Device
		if ip.Hold == "route" {
			where = fmt.Sprintf("routed to %s (protocol %d)", r.Device, ip.Route)
		}
		if !ip.OnDevice {
			where = "MISSING from " + r.Device
			if ip.Hold == "route" {
				where = fmt.Sprintf("route to %s (protocol %d) MISSING", r.Device, ip.Route)
			}
		}
		proxy := ""
		if ip.Proxy != nil {
			kind := map[bool]string{true: "NDP", false: "ARP"}[ip.Addr.Is6()]
			proxy = map[bool]string{true: ", proxy " + kind + " entry present", false: ", proxy " + kind + " entry MISSING"}[*ip.Proxy]
		}
		fmt.Fprintf(w, "  %s  %s, uplink %s%s, %d holder(s):\n", ip.Addr, where, ip.Uplink, proxy, len(ip.Holders))
		for _, h := range ip.Holders {
			fmt.Fprintf(w, "      network %s  container %s  interface %s\n", h.Network, h.ContainerID, h.IfName)
		}
		printStandbyHolders(w, ip)
		printSteering(w, ip)
	}
	printUplinks(w, r.Uplinks)
	if len(r.Drift) == 0 {
		fmt.Fprintln(w, "  drift: none")
		return
	}
	fmt.Fprintf(w, "  drift:\n    %s\n", strings.Join(r.Drift, "\n    "))
}

// printStandby shows an IP held here in standby only: another node
// answers for it.
func printStandby(w io.Writer, ip assigner.IPReport) {
	fmt.Fprintf(w, "  %s  STANDBY (another node holds it), uplink %s\n", ip.Addr, ip.Uplink)
	printStandbyHolders(w, ip)
}

func printStandbyHolders(w io.Writer, ip assigner.IPReport) {
	if len(ip.Standby) > 0 {
		fmt.Fprintf(w, "      %d standby holder(s):\n", len(ip.Standby))
	}
	for _, h := range ip.Standby {
		fmt.Fprintf(w, "      network %s  container %s  interface %s  (standby)\n", h.Network, h.ContainerID, h.IfName)
	}
}

// printSteering shows where table inet external-ip sends the IP's flows.
func printSteering(w io.Writer, ip assigner.IPReport) {
	if len(ip.Targets) > 0 {
		fmt.Fprintf(w, "      ingress to %v\n", ip.Targets)
	}
	if len(ip.EgressFrom) > 0 {
		fmt.Fprintf(w, "      egress from %v\n", ip.EgressFrom)
	}
}

// printUplinks shows the uplinks whose flows our rules route.
func printUplinks(w io.Writer, ups []uplinkroute.UplinkReport) {
	for _, u := range ups {
		fmt.Fprintf(w, "  uplink %s routed by mark %s, table %d, gateways %v %v\n", u.Uplink, u.Mark, u.Table, u.Gateway4, u.Gateway6)
	}
}
