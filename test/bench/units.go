package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
)

// floorRow is the exec floor's row name.
const floorRow = "exec floor (stdin to stdout)"

// floorUnit gives the exec floor the same environment and stdin as an ADD.
func (b *bench) floorUnit(res *results, n0 *node) {
	floor := res.add(&series{name: floorRow, verb: "exec", group: "reference"})
	res.units = append(res.units, unit{tag: "floor", run: func(it int, keep bool) {
		c := b.eipCall(b.bins["floor"].path, "ADD", n0, fmt.Sprintf("floor-%d", it), "198.19.0.1", nil)
		x := b.execIn(n0, c)
		if x.err == nil && !bytes.Equal(x.stdout, c.stdin) {
			x.err = fmt.Errorf("floor did not echo its stdin")
		}
		floor.record(x, keep)
	}})
}

// noopConf makes noop a chained plugin: its debug file says PASSTHROUGH, so
// it parses the config and prevResult and prints the prevResult back.
func (b *bench) noopConf() ([]byte, error) {
	debugFile := filepath.Join(b.state, "noop-debug.json")
	if err := writeFile(debugFile, `{"ReportResult":"PASSTHROUGH"}`); err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": "bench", "type": "noop",
		"debugFile": debugFile, "prevResult": json.RawMessage(prevResult),
	})
}

func (b *bench) noopUnit(res *results, n0 *node) error {
	conf, err := b.noopConf()
	if err != nil {
		return err
	}
	add := res.add(&series{name: "noop ADD", verb: "ADD", group: "reference"})
	del := res.add(&series{name: "noop DEL", verb: "DEL", group: "reference"})
	b.referencePair(res, n0, "noop", call{bin: b.bins["noop"].path, stdin: conf}, "10.1.0.5/24", add, del)
	return nil
}

func (b *bench) hostLocalUnit(res *results, n0 *node) {
	conf, _ := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": "bench", "type": "host-local",
		"ipam": map[string]any{
			"type": "host-local", "dataDir": filepath.Join(b.state, "host-local"),
			"ranges": [][]map[string]any{{{"subnet": "10.128.0.0/16"}}},
		},
	})
	add := res.add(&series{name: "host-local ADD", verb: "ADD", group: "reference"})
	del := res.add(&series{name: "host-local DEL", verb: "DEL", group: "reference"})
	b.referencePair(res, n0, "hl", call{bin: b.bins["host-local"].path, stdin: conf}, "10.128.", add, del)
}

// referencePair adds the unit of a reference plugin: an ADD that must print
// want, then its DEL.
func (b *bench) referencePair(res *results, n0 *node, tag string, base call, want string, add, del *series) {
	res.units = append(res.units, unit{tag: tag, run: func(it int, keep bool) {
		c := base
		c.command, c.containerID, c.ifName, c.netns = "ADD", fmt.Sprintf("%s-%d", tag, it), "eth0", n0.podPath()
		x := b.execIn(n0, c)
		if x.err == nil && !bytes.Contains(x.stdout, []byte(want)) {
			x.err = fmt.Errorf("%s ADD printed no %s: %q", filepath.Base(c.bin), want, x.stdout)
		}
		add.record(x, keep)
		c.command = "DEL"
		del.record(b.execIn(n0, c), keep)
	}})
}

// eipUnits are external-ip's rows: empty node, held addresses, what-ifs.
func (b *bench) eipUnits(res *results, n0 *node, helds []heldNode) {
	eip, cgo := b.bins["external-ip"].path, b.bins["external-ip-cgo"].path
	b.pair(res, "v4", "external-ip", "IPv4", "0 held", n0, eip, v4(1), nil)
	b.pair(res, "v6", "external-ip", "IPv6", "0 held", n0, eip, v6(2), nil)
	for i, h := range helds {
		ip, label := v4(10+i), "IPv4, "+h.label
		if h.v6 {
			ip, label = v6(10+i), "IPv6, "+h.label
		}
		b.pair(res, fmt.Sprintf("held%d", i), "held", label, "", h.n, eip, ip, nil)
	}
	b.pair(res, "probe", "what-if", "IPv4, default conflictProbe", "conflictProbe absent: the 150ms default", n0, eip, v4(3),
		map[string]any{"conflictProbe": nil})
	b.pair(res, "announce", "what-if", "IPv4, default announce", "announce absent: 3 rounds, 2 by a detached child", n0, eip, v4(4),
		map[string]any{"announce": nil})
	b.pair(res, "cgo", "what-if", "IPv4, cgo build", "built as plain `go build` does, with cgo (dynamically linked)", n0, cgo, v4(5), nil)
	if c, ok := b.bins["external-ip-candidate"]; ok {
		b.pair(res, "cand4", "what-if", "IPv4, candidate", "built from "+b.opts.candidate, n0, c.path, v4(6), nil)
		b.pair(res, "cand6", "what-if", "IPv6, candidate", "built from "+b.opts.candidate, n0, c.path, v6(7), nil)
	}
}

// pair adds the ADD and DEL rows of one external-ip scenario and its unit.
func (b *bench) pair(res *results, tag, group, label, note string, n *node, bin string, ip func(int) string, extra map[string]any) {
	add := res.add(&series{name: "external-ip ADD " + label, verb: "ADD", group: group, note: note})
	del := res.add(&series{name: "external-ip DEL " + label, verb: "DEL", group: group, note: note})
	res.units = append(res.units, unit{tag: tag, run: func(it int, keep bool) {
		id := fmt.Sprintf("%s-%d", tag, it)
		x := b.execIn(n, b.eipCall(bin, "ADD", n, id, ip(it), extra))
		if x.err == nil && !bytes.Contains(x.stdout, []byte("10.1.0.5/24")) {
			x.err = fmt.Errorf("ADD printed no prevResult: %q", x.stdout)
		}
		add.record(x, keep)
		del.record(b.execIn(n, b.eipCall(bin, "DEL", n, id, ip(it), extra)), keep)
	}})
}

// kernelUnits measure the kernel's own share, one unit per node.
func (b *bench) kernelUnits(res *results, n0 *node, helds []heldNode) error {
	if err := b.kernelAt(res, "", n0, "198.19.250.1"); err != nil {
		return err
	}
	if err := b.kernelAt(res, "IPv6", n0, "2001:db8:1::b:1"); err != nil {
		return err
	}
	for _, h := range helds {
		ip := "198.19.250.1"
		if h.v6 {
			ip = "2001:db8:1::b:1"
		}
		if err := b.kernelAt(res, h.label, h.n, ip); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) kernelAt(res *results, label string, n *node, ip string) error {
	k, err := b.openKernelProbe(n, ip)
	if err != nil {
		return err
	}
	res.kernel[label] = k
	warmup := b.opts.warmup
	res.units = append(res.units, unit{tag: "kernel " + label, run: func(it int, keep bool) { k.once(uint32(it+warmup), keep) }})
	return nil
}
