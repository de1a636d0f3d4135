package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
)

const usage = `usage: external-ip status [--json] [--data-dir DIR] [--device NAME]

Shows, for each holder device with state under DIR (default %s),
the device, each external IP with its holders (network/container/interface),
and any drift between the state and the kernel. Read only.
`

// runCLI serves a person at the terminal; it changes nothing.
func runCLI(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprintf(stderr, usage, config.DefaultDataDir)
		return 2
	}
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	dataDir := fs.String("data-dir", config.DefaultDataDir, "the plugin's dataDir")
	device := fs.String("device", "", "only this holder device")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
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

// collect reports on one device, or on every device with state in dataDir.
func collect(dataDir, device string) ([]*assigner.Report, error) {
	devices := []string{device}
	if device == "" {
		entries, err := os.ReadDir(dataDir)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		devices = devices[:0]
		for _, e := range entries {
			if e.IsDir() {
				devices = append(devices, e.Name())
			}
		}
	}
	reports := []*assigner.Report{}
	for _, d := range devices {
		as := assigner.New(assigner.Options{Device: d, DataDir: dataDir, LockTimeout: 5 * time.Second})
		r, err := as.Report()
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
		where := "on " + r.Device
		if !ip.OnDevice {
			where = "MISSING from " + r.Device
		}
		proxy := ""
		if ip.Proxy != nil {
			proxy = map[bool]string{true: ", proxy NDP entry present", false: ", proxy NDP entry MISSING"}[*ip.Proxy]
		}
		fmt.Fprintf(w, "  %s  %s, uplink %s%s, %d holder(s):\n", ip.Addr, where, ip.Uplink, proxy, len(ip.Holders))
		for _, h := range ip.Holders {
			fmt.Fprintf(w, "      network %s  container %s  interface %s\n", h.Network, h.ContainerID, h.IfName)
		}
	}
	if len(r.Drift) == 0 {
		fmt.Fprintln(w, "  drift: none")
		return
	}
	fmt.Fprintf(w, "  drift:\n    %s\n", strings.Join(r.Drift, "\n    "))
}
