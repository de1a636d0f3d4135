package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// pct is the nearest-rank percentile of ds.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// p is a percentile of a series' wall times.
func p(s *series, q float64) time.Duration {
	return pctOf(s, q, func(x sample) time.Duration { return x.wall })
}

func cpuP50(s *series) time.Duration {
	return pctOf(s, 50, func(x sample) time.Duration { return x.cpu })
}

func faultsP50(s *series) int64 {
	return int64(pctOf(s, 50, func(x sample) time.Duration { return time.Duration(x.minflt) }))
}

func pctOf(s *series, q float64, f func(sample) time.Duration) time.Duration {
	if s == nil {
		return 0
	}
	ds := make([]time.Duration, len(s.samples))
	for i, x := range s.samples {
		ds[i] = f(x)
	}
	return pct(ds, q)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

func goVersion() string {
	out, err := exec.Command("go", "version").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimSpace(string(out))
}

func kernel() string {
	out, _ := exec.Command("uname", "-sr").Output()
	return strings.TrimSpace(string(out))
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func (b *bench) report(r *results) error {
	md := b.markdown(r)
	fmt.Println()
	fmt.Println(r.latencyTable())
	fmt.Println(r.goalTable())
	fmt.Println(r.concTable())
	if b.opts.out == "" {
		return nil
	}
	if err := os.MkdirAll(b.opts.out, 0o755); err != nil {
		return err
	}
	mdPath, svgPath := filepath.Join(b.opts.out, "benchmark.md"), filepath.Join(b.opts.out, "benchmark.svg")
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(svgPath, []byte(r.svg()), 0o644); err != nil {
		return err
	}
	logf("wrote %s and %s", mdPath, svgPath)
	return nil
}

// doc is the markdown being written.
type doc struct{ strings.Builder }

func (d *doc) w(format string, args ...any) { fmt.Fprintf(d, format, args...) }

func (b *bench) markdown(r *results) string {
	var d doc
	b.headerSection(&d, r)
	d.w("## Goals\n\n%s\n", r.goalTable())
	b.findings(&d, r)
	b.latencySection(&d, r)
	b.howSection(&d)
	b.heldSection(&d, r)
	b.concSection(&d, r)
	if pr := r.profile; pr != nil {
		b.profileSection(&d, r, pr)
	}
	return d.String()
}

func (b *bench) headerSection(d *doc, r *results) {
	d.w("# Benchmark: what external-ip adds to a pod's start-up\n\n")
	d.w("Written by `go run ./test/bench -out docs` (`make bench`) on %s, in %s.\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), r.elapsed.Round(time.Second))
	d.w("Machine: %d x %s, %s, %s. %d recorded iterations after %d of warm-up, shuffle seed %d.\n\n",
		runtime.NumCPU(), cpuModel(), kernel(), goVersion(), r.n, b.opts.warmup, r.seed)
	d.w("Run it as root from the repository root: `go run ./test/bench -out docs` (flags: `-n` iterations, `-held`/`-held6` addresses held, `-conc-max`/`-conc-reps`, `-src DIR` to measure another tree, `-candidate DIR` to interleave a candidate build as extra rows, `-keep` to keep the namespaces). It needs `ip`, the Go toolchain and the module proxy (or a warm module cache); `strace`, if installed, adds the syscall tables.\n\n")
}

func (b *bench) latencySection(d *doc, r *results) {
	d.w("## Latency of one invocation\n\n")
	d.w("Each iteration runs every scenario once, in a new random order, so that machine noise falls on all of them alike; ")
	d.w("an ADD is always followed by its DEL, so each node holds the same addresses at every ADD. ")
	d.w("Wall time runs from fork to exit with stdout read to EOF, as libcni's `invoke.RawExec` does; CPU (user + system) and minor page faults are the child's rusage. ")
	d.w("The ratio columns compare with the reference plugin's ADD for ADD and exec rows and its DEL for DEL rows.\n\n")
	d.w("%s\n", r.latencyTable())
	d.w("![p50 and p95 per scenario; concurrency](benchmark.svg)\n\n")
}

// latencyTable is the markdown table of every series.
func (r *results) latencyTable() string {
	var sb strings.Builder
	noopA, noopD := p(r.byName["noop ADD"], 50), p(r.byName["noop DEL"], 50)
	hlA, hlD := p(r.byName["host-local ADD"], 50), p(r.byName["host-local DEL"], 50)
	sb.WriteString("| scenario | p50 | p95 | CPU p50 | faults p50 | x noop | x host-local | failures |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.rows {
		n, h := noopA, hlA
		if s.verb == "DEL" {
			n, h = noopD, hlD
		}
		name := s.name
		if s.note != "" {
			name += " (" + s.note + ")"
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %d | %s | %s | %d |\n", name,
			ms(p(s, 50)), ms(p(s, 95)), ms(cpuP50(s)), faultsP50(s), ratio(p(s, 50), n), ratio(p(s, 50), h), s.fails)
	}
	return sb.String()
}

func (b *bench) howSection(d *doc) {
	d.w("### How each scenario runs\n\n")
	d.w("- Every binary runs in a network namespace made for the run (a node with `uplink0` 192.0.2.1/24, 198.18.0.1/15 and 2001:db8:1::1/64, IPv6 forwarding on, and a veth to a LAN namespace, as in `test/netns`), forked from an OS thread that entered the namespace with `ns.Do`, so no `ip netns exec` is timed. All state (`dataDir`, host-local's `dataDir`, noop's debug file) is on a tmpfs mounted for the run.\n")
	d.w("- Environment and stdin as libcni passes them: the caller's environment plus `CNI_COMMAND`, `CNI_CONTAINERID` (new per iteration), `CNI_NETNS`, `CNI_IFNAME=eth0`, `CNI_ARGS=`, `CNI_PATH`; config at cniVersion 1.0.0. Stdin is a pipe that already holds the config and is closed, stdout a pipe the launching thread reads to EOF, stderr a memfd: libcni feeds stdin and drains stdout from goroutines, and in this harness those goroutines waited up to 10 ms for Go's sysmon to hand them a P whenever every P's thread was blocked waiting for a child, which is what made two concurrent ADDs look slower than two serial ones in earlier runs.\n")
	d.w("- **exec floor**: a Go program that copies stdin to stdout, given the external-ip ADD config on stdin.\n")
	d.w("- **noop**: containernetworking/cni v1.3.1 `plugins/test/noop` as a chained plugin: `debugFile` on the tmpfs saying `PASSTHROUGH`, so it parses the config and prevResult, rewrites its debug file and prints the prevResult. (Without a debug file it only prints `{}`.)\n")
	d.w("- **host-local**: containernetworking/plugins v1.10.0, subnet 10.128.0.0/16, `dataDir` on the tmpfs; ADD allocates an address, DEL frees it.\n")
	d.w("- **external-ip**: one IP from `runtimeConfig.externalIPs`, in a connected subnet of the uplink (automatic uplink), `announce: {count: 1}` (the first round, two ARP frames or one NA, is sent inside ADD) and `conflictProbe: \"0s\"`; the held-address nodes were filled through the plugin itself, one attachment per address. The what-if rows change one thing each.\n")
	d.w("- Binaries, all built with CGO_ENABLED=0 as the containernetworking/plugins releases are, except the cgo what-if row:\n\n")
	b.binariesTable(d)
}

// binSize is a binary's size for the findings; sizes are known only to
// the bench, so results carry them.
func (r *results) binSize(name string) string {
	if b, ok := r.bins[name]; ok {
		return fmt.Sprintf("%.1f MB", float64(b.size)/1e6)
	}
	return "?"
}

func (b *bench) binariesTable(d *doc) {
	d.w("| binary | built with | size | linking |\n|---|---|---:|---|\n")
	for _, name := range []string{"floor", "noop", "host-local", "external-ip", "external-ip-cgo", "external-ip-candidate"} {
		bin, ok := b.bins[name]
		if !ok {
			continue
		}
		link := "dynamic (ld.so + libc)"
		if bin.static {
			link = "static"
		}
		d.w("| %s | %s | %.1f MB | %s |\n", name, bin.how, float64(bin.size)/1e6, link)
	}
}

// kernelCost is a node's kernel probe as "add / remove" medians.
func (r *results) kernelCost(label string) string {
	k, ok := r.kernel[label]
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.3f / %.3f ms", float64(median(k.add))/1e6, float64(median(k.del))/1e6)
}

func (b *bench) heldSection(d *doc, r *results) {
	d.w("\n## Held addresses\n\n")
	d.w("The last column is the kernel's share, measured from the harness over one netlink socket: adding one more address to the node's `eip0` and removing it again (medians; one add and one remove per iteration, interleaved with the scenarios so that the kernel's lists are as cold in the caches as they are for the plugin), which every ADD and DEL of a new IP pays whatever the plugin does.\n\n")
	d.w("| node holds | filled in | ADD p50 | ADD - ADD at 0 held | DEL p50 | DEL - DEL at 0 held | kernel: address add / remove |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, fam := range []string{"IPv4", "IPv6"} {
		probe := map[string]string{"IPv4": "", "IPv6": "IPv6"}[fam]
		d.w("| nothing (%s) | - | %s | - | %s | - | %s |\n", fam, ms(p(r.byName["external-ip ADD "+fam], 50)),
			ms(p(r.byName["external-ip DEL "+fam], 50)), r.kernelCost(probe))
	}
	for _, row := range r.heldRows() {
		r.heldRow(d, row)
	}
	d.w("\n%s\n", r.ipv6Limit())
}

// heldRows are the ADD rows of the held-address scenarios.
func (r *results) heldRows() []*series {
	var out []*series
	for _, row := range r.rows {
		if row.group == "held" && row.verb == "ADD" {
			out = append(out, row)
		}
	}
	return out
}

// heldParts splits "external-ip ADD IPv6, 1,000 IPv6 held" into the family
// of the added IP and the held label.
func heldParts(row *series) (fam, held string) {
	label := strings.TrimPrefix(row.name, "external-ip ADD ")
	fam, held, _ = strings.Cut(label, ", ")
	return fam, held
}

func (r *results) heldRow(d *doc, row *series) {
	fam, held := heldParts(row)
	ref, delRef := p(r.byName["external-ip ADD "+fam], 50), p(r.byName["external-ip DEL "+fam], 50)
	info := r.held[held]
	del := r.byName[strings.Replace(row.name, " ADD ", " DEL ", 1)]
	d.w("| %s (ADD of one more %s) | %.0f s, %.0f ADD/s | %s | %+.2f ms | %s | %+.2f ms | %s |\n", held, fam, info.took.Seconds(),
		float64(info.count)/info.took.Seconds(), ms(p(row, 50)), float64(p(row, 50)-ref)/1e6, ms(p(del, 50)),
		float64(p(del, 50)-delRef)/1e6, r.kernelCost(held))
}

func (b *bench) concSection(d *doc, r *results) {
	if len(r.conc) > 0 {
		d.w("\n## Concurrent ADDs\n\n")
		d.w("For each K, one thread in the node namespace forks K ADDs of distinct attachments and IPs back to back (as a shell's `a & b & wait` does) and collects each as it exits; in alternating order, K ADDs also run one after the other; then their DELs. Totals run from the first fork to the last exit; medians over %d repetitions, each half starting 150 ms after the previous one so that the detached announcers of earlier ADDs have exited. K = 1 is the control (the same single ADD both ways): its ratio shows the noise, and it is left out of the goal. The ADDs contend for the holder's lock, which serializes only the state change; exec, Go start-up and config parsing overlap on the %d CPUs.\n\n", b.opts.concReps, runtime.NumCPU())
		d.w("%s\n", r.concTable())
	}
	if c := r.cold; c != nil {
		d.w("Cold node: %d ADDs started together on a node that has no `eip0` yet (the first pods of a freshly booted node), %d bursts, each on a new node: median total %s, %d of %d ADDs failed.\n", c.k, len(c.walls), ms(median(c.walls)), c.fails, c.runs)
		for _, e := range c.errs {
			d.w("\n    %s\n", e)
		}
		d.w("\n")
	}
}

func (r *results) concTable() string {
	var sb strings.Builder
	sb.WriteString("| K | K serial ADDs (total, median) | K concurrent ADDs (total, median) | concurrent / serial | one ADD among K (median) | failures |\n")
	sb.WriteString("|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.conc {
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %s | %d |\n", c.k, ms(median(c.serial)), ms(median(c.concurrent)),
			ratio(median(c.concurrent), median(c.serial)), ms(median(c.lat)), c.fails)
	}
	return sb.String()
}
