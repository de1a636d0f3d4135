package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/install"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/standby"
	"github.com/external-ip/external-ip/pkg/upkeep"
)

// nodeCommands are the commands a DaemonSet runs, as the usage lists them.
const nodeCommands = `       external-ip install --plugin-config FILE [--bin-dir DIR] [--conf-dir DIR] [--primary NAME]
                           [--plugin-binary FILE]
                           [--watch [--reannounce-every D] [--repair-every D] [--data-dir DIR]
                                    [--standby-every D] [--metrics-address HOST:PORT]
                                    [--node-name NAME [--kubeconfig FILE] [--namespace NS]]] | [--check]
       external-ip uninstall [--bin-dir DIR] [--conf-dir DIR] [--data-dir DIR] [--force]
       external-ip version
`

const nodeHelp = `install copies this binary into the CNI bin dir and chains the plugin entry
in FILE into the primary network config (the lexically first valid .conf,
.conflist or .json in the conf dir, or NAME). It changes nothing when both
are in place. --watch keeps them in place until SIGTERM; leaving does not
uninstall. --check exits 0 only when both are in place. --plugin-binary
installs FILE instead of this binary. --watch also listens for other hosts
claiming a held IP and, every --standby-every (default 200ms, 0: never),
checks the active holder of each IP held in standby and takes it over
when it stops answering (docs/standby.md); --metrics-address serves Prometheus metrics on
HOST:PORT/metrics (the external-ip-node build only; docs/observe.md).
--node-name serves the cluster's pools and claims to the plugin on the
socket in the data dir, as that node (the external-ip-node build only;
docs/pools.md).
uninstall changes nothing and exits 1, naming the holders, while pods hold
external IPs of DIR (default: the dataDir of the entry install chained):
their DELs need the chained entry (containerd runs DEL with the networks it
loads now); drain or delete those pods, then run it again. It first
releases, as GC does, the IPs of pods whose network namespace is gone
without their DEL, and says which. --force goes on while pods hold IPs,
and says for each IP it leaves held how to release it later. Then it restores
every config file install changed, byte for byte, and removes the binary it
installed (or puts back the one that was there before: a package's); a
running install --watch then chains nothing more. It also
removes the holder device of DIR and table inet external-ip, when they are
ours and empty, and says what it keeps and why otherwise. While it keeps something (or a watcher still runs) it keeps
the binary too, and its last line is the command that finishes. version
prints the version and revision.
`

// nodeUsage is install's and uninstall's -h.
var nodeUsage = "usage: " + strings.TrimLeft(nodeCommands, " ") + "\n" + nodeHelp

// usageText is every command a person can run: the terminal's (cli.go's
// usage) and the node's, under one "usage:", each group's help after.
func usageText() string {
	commands, help, _ := strings.Cut(fmt.Sprintf(usage, config.DefaultDataDir), "\n\n")
	return commands + "\n" + nodeCommands + "\n" + help + "\n" + nodeHelp
}

// about is what the binary prints when run with no arguments and no
// CNI_COMMAND: what it is, then the usage; skel adds the CNI versions.
func about() string {
	return "external-ip: holds and announces external IPs for containers\n\n" + strings.TrimSuffix(usageText(), "\n")
}

// runNodeCLI serves the commands a DaemonSet runs; ok is false for any
// other command.
func runNodeCLI(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "install":
		return runInstall(args[1:], stderr), true
	case "uninstall":
		return runUninstall(args[1:], stderr), true
	case "version":
		fmt.Fprintln(stdout, versionLine())
		return 0, true
	}
	return 0, false
}

// nodeFlags are the flags both commands share; scripts rely on the names.
type nodeFlags struct {
	fs              *flag.FlagSet
	binDir, confDir string
}

func newNodeFlags(cmd string, stderr io.Writer) *nodeFlags {
	f := &nodeFlags{fs: flag.NewFlagSet(cmd, flag.ContinueOnError)}
	f.fs.SetOutput(stderr)
	f.fs.Usage = func() { fmt.Fprint(stderr, nodeUsage) }
	f.fs.StringVar(&f.binDir, "bin-dir", "/opt/cni/bin", "the CNI bin dir")
	f.fs.StringVar(&f.confDir, "conf-dir", "/etc/cni/net.d", "the CNI conf dir")
	return f
}

type installFlags struct {
	*nodeFlags
	pluginConfig, primary, dataDir string
	pluginBinary, metricsAddress   string
	watch, check                   bool
	reannounce, repair, standby    time.Duration
	claims                         claimFlags
	// routing is the entry's uplinkRouting, for the upkeep's repair.
	routing config.UplinkRouting
}

func parseInstall(args []string, stderr io.Writer) (*installFlags, error) {
	f := &installFlags{nodeFlags: newNodeFlags("install", stderr)}
	fs := f.fs
	fs.StringVar(&f.pluginConfig, "plugin-config", "", "our plugin entry as JSON (required)")
	fs.StringVar(&f.primary, "primary", "", "the conf dir file to chain into (default: the one the runtime picks)")
	fs.BoolVar(&f.watch, "watch", false, "keep running and keep the chain in place")
	fs.BoolVar(&f.check, "check", false, "exit 0 only when the binary and the chain are in place")
	fs.DurationVar(&f.reannounce, "reannounce-every", 0, "with --watch: re-announce every held IP this often (0: never)")
	fs.DurationVar(&f.repair, "repair-every", 0, "with --watch: repair drift this often (0: never)")
	fs.DurationVar(&f.standby, "standby-every", standby.DefaultEvery, "with --watch: check the active holder of each IP held in standby this often (0: never)")
	fs.StringVar(&f.pluginBinary, "plugin-binary", "", "the plugin binary to install (default: this one)")
	fs.StringVar(&f.metricsAddress, "metrics-address", "", "with --watch: serve Prometheus metrics on HOST:PORT/metrics (default: off)")
	fs.StringVar(&f.dataDir, "data-dir", config.DefaultDataDir, "the plugin's dataDir, for --reannounce-every and --repair-every (default: the entry's)")
	f.claims.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := f.claims.check(f.watch); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("install: unexpected argument %q", fs.Arg(0))
	case f.pluginConfig == "":
		return nil, errors.New("install: --plugin-config: missing")
	case f.watch && f.check:
		return nil, errors.New("install: --watch and --check: choose one")
	case !f.watch && (f.reannounce != 0 || f.repair != 0):
		return nil, errors.New("install: --reannounce-every and --repair-every need --watch")
	case f.reannounce < 0 || f.repair < 0:
		return nil, fmt.Errorf("install: --reannounce-every %s, --repair-every %s: must not be negative", f.reannounce, f.repair)
	case f.standby < 0 || (f.standby > 0 && f.standby < 10*time.Millisecond):
		return nil, fmt.Errorf("install: --standby-every %s: must be 0 (off) or at least 10ms", f.standby)
	}
	return f, checkMetricsAddress(f.metricsAddress, f.watch)
}

func runInstall(args []string, stderr io.Writer) int {
	f, err := parseInstall(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	in, err := f.installer(log)
	if err != nil {
		fmt.Fprintf(stderr, "external-ip install: %v\n", err)
		return 1
	}
	switch {
	case f.check:
		err = in.Check()
	case f.watch:
		err = f.runWatch(in, log)
	default:
		_, err = in.Install()
	}
	if err != nil {
		fmt.Fprintf(stderr, "external-ip install: %v\n", err)
		return 1
	}
	return 0
}

func (f *installFlags) installer(log *slog.Logger) (*install.Installer, error) {
	data, err := os.ReadFile(f.pluginConfig)
	if err != nil {
		return nil, fmt.Errorf("--plugin-config: %w", err)
	}
	entry, err := install.ParseEntry(data)
	if err != nil {
		return nil, fmt.Errorf("--plugin-config %s: %w", f.pluginConfig, err)
	}
	if err := f.upkeepDataDir(entry); err != nil {
		return nil, err
	}
	f.routing = entry.UplinkRouting()
	return &install.Installer{BinDir: f.binDir, ConfDir: f.confDir, Entry: entry, Primary: f.primary, Exe: f.pluginBinary, Log: log}, nil
}

// upkeepDataDir makes the upkeep look where the plugin keeps its state:
// the entry's dataDir, unless --data-dir names it. One that names another
// would leave the upkeep finding nothing, and saying nothing.
func (f *installFlags) upkeepDataDir(entry *install.Entry) error {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "data-dir" })
	if !set {
		f.dataDir = entry.DataDir()
		return nil
	}
	if filepath.Clean(f.dataDir) != entry.DataDir() {
		return fmt.Errorf("--data-dir: %q is not the plugin entry's dataDir %q", f.dataDir, entry.DataDir())
	}
	return nil
}

// runWatch keeps the chain, and runs the upkeep beside it, until SIGTERM
// or SIGINT. It leaves everything installed: a pod restart or an upgrade
// must not leave pods without external IPs.
func (f *installFlags) runWatch(in *install.Installer, log *slog.Logger) error {
	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, restart := context.WithCancelCause(sig)
	defer restart(nil)
	log.Info("starting", "version", versionLine(), "binDir", f.binDir, "confDir", f.confDir,
		"reannounceEvery", f.reannounce.String(), "repairEvery", f.repair.String())
	var wg sync.WaitGroup
	rec, err := startMetrics(ctx, &wg, f.metricsAddress, f.dataDir, log)
	if err != nil {
		return err
	}
	claimed, err := startClaims(ctx, restart, &wg, &f.claims, f.dataDir, rec, log)
	if err != nil {
		stop()
		wg.Wait()
		return err
	}
	up := &upkeep.Upkeep{DataDir: f.dataDir, ReannounceEvery: f.reannounce, RepairEvery: f.repair,
		WatchEvery: watchEvery, LockTimeout: 10 * time.Second, Log: log, Recorder: rec, UplinkRouting: f.routing}
	wg.Go(func() { up.Run(ctx) })
	moves := &standby.StateMoves{DataDir: f.dataDir, LockTimeout: 10 * time.Second, UplinkRouting: f.routing, Log: log}
	if f.standby > 0 {
		sb := f.standbyWatch(moves, rec, claimed, log)
		wg.Go(func() { sb.Run(ctx) })
	}
	follow := func(e *install.Entry) {
		if claimed != nil && e.DataDir() != f.dataDir {
			// The plugin reaches the claims by a socket in dataDir, which
			// the claims' server cannot move: a new process serves the new.
			log.Error("the plugin entry's dataDir changed; the node process serving claims restarts to serve it there", "from", f.dataDir, "to", e.DataDir())
			restart(errDataDirMoved)
			return
		}
		up.Use(upkeep.Entry{DataDir: e.DataDir(), UplinkRouting: e.UplinkRouting()})
		moves.Use(e.DataDir(), e.UplinkRouting())
		if m, ok := rec.(interface{ FoldFrom(dataDir string) }); ok {
			m.FoldFrom(e.DataDir())
		}
	}
	err = in.Watch(ctx, install.WatchOptions{EntryFile: f.pluginConfig, OnEntry: follow})
	stop()
	wg.Wait()
	log.Info("stopping; external-ip stays installed (external-ip uninstall removes it)")
	if cause := context.Cause(ctx); errors.Is(cause, errDataDirMoved) || errors.Is(cause, nodeapi.ErrNotAccepting) {
		return cause // exit non-zero: the DaemonSet starts the process again
	}
	return err
}

var errDataDirMoved = errors.New("the plugin entry's dataDir changed: restarting to serve the claims there")

// standbyWatch is the watch of the IPs held in standby (package standby)
// on moves, counted in rec when it records standby too, and telling
// claimed (nil: the node process serves no claims) of its moves.
func (f *installFlags) standbyWatch(moves *standby.StateMoves, rec upkeep.Recorder, claimed standby.Claims, log *slog.Logger) *standby.Watcher {
	w := &standby.Watcher{Every: f.standby, Ports: standby.RawPorts{}, Log: log, Moves: moves, Claims: claimed}
	if r, ok := rec.(standby.Recorder); ok {
		w.Recorder = r
	}
	return w
}

func runUninstall(args []string, stderr io.Writer) int {
	f := newNodeFlags("uninstall", stderr)
	var dataDir string
	f.fs.StringVar(&dataDir, "data-dir", "", "the plugin's dataDir, whose empty holder device uninstall removes (default: the one install recorded, else "+config.DefaultDataDir+")")
	force := f.fs.Bool("force", false, "uninstall while pods hold external IPs, saying how to release each later")
	if err := f.fs.Parse(args); err != nil {
		return 2
	}
	if f.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "uninstall: unexpected argument %q\n", f.fs.Arg(0))
		return 2
	}
	in := &install.Installer{BinDir: f.binDir, ConfDir: f.confDir, Retire: true, DataDir: dataDir, Force: *force, Assigner: cliAssigner, Log: slog.New(slog.NewJSONHandler(stderr, nil))}
	if err := in.Uninstall(); err != nil {
		fmt.Fprintf(stderr, "external-ip uninstall: %v\n", err)
		return 1
	}
	return 0
}
