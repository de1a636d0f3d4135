// Command external-ip is a CNI chained plugin that gives containers external
// IPs held on a host device and announced on the node's uplink. Run with
// CNI_COMMAND set it speaks CNI; run by a person it reports what it holds.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/external-ip/external-ip/pkg/announce"
)

func main() {
	if plan := os.Getenv(announce.EnvPlan); plan != "" {
		os.Exit(runAnnouncer(plan))
	}
	if job := os.Getenv(envForget); job != "" {
		os.Exit(runForget(job))
	}
	command := os.Getenv("CNI_COMMAND")
	if command == "" && len(os.Args) > 1 {
		os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr))
	}
	var help string
	if command == "" {
		help = about() // a person's; a runtime's call has no use for it
	}
	skipSkelNetNSCheck()
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: counted("ADD", cmdAdd), Del: counted("DEL", cmdDel), Check: counted("CHECK", cmdCheck),
		GC: counted("GC", cmdGC), Status: counted("STATUS", cmdStatus),
	}, supported, help)
}

// envNetnsOverride turns off skel's check that CNI_NETNS is not the
// plugin's own namespace.
const envNetnsOverride = "CNI_NETNS_OVERRIDE"

// runtimeNetnsOverride is CNI_NETNS_OVERRIDE as the runtime set it,
// before skipSkelNetNSCheck sets it for skel.
var runtimeNetnsOverride string

// skipSkelNetNSCheck keeps skel from checking CNI_NETNS after ADD and DEL
// have run. ADD and DEL make the same check before they change anything
// (checkNetNS), honouring the runtime's override; once it has passed,
// skel's cannot fail (it also answers "not the plugin's" for a path it
// cannot open), and it costs each ADD and DEL the opening of both
// namespaces: 0.19 ms on the bench's slow machine (docs/performance.md,
// "Tried on 4 Dec 2026, night").
func skipSkelNetNSCheck() {
	runtimeNetnsOverride = os.Getenv(envNetnsOverride)
	os.Setenv(envNetnsOverride, "1")
}

// supported starts at 0.3.0, where chaining and prevResult begin.
var supported = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
