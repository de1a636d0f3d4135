// Command external-ip is a CNI chained plugin that gives containers external
// IPs held on a host device and announced on the node's uplink. Run with
// CNI_COMMAND set it speaks CNI; run by a person it reports what it holds.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/sink"
)

func main() {
	if dir := os.Getenv(sink.EnvDir); dir != "" {
		os.Exit(runSink(dir))
	}
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
	growStack()
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: counted("ADD", cmdAdd), Del: counted("DEL", cmdDel), Check: counted("CHECK", cmdCheck),
		GC: counted("GC", cmdGC), Status: counted("STATUS", cmdStatus),
	}, config.PluginVersions(), help)
}
