package netns

import (
	"os"
	"path/filepath"
	"testing"
)

// A DEL releases what the attachment's record says: a log it cannot open
// or a key it does not use must not fail it and leak the IPs (the CNI
// spec: a DEL should complete even if some resources are missing).
func TestDelReleasesWhatItsRecordSaysWhateverTheKeysItDoesNotUse(t *testing.T) {
	for name, spoil := range map[string]func(conf map[string]any){
		"traffic Both":          func(c map[string]any) { c["traffic"] = "Both" },
		"announce.count 50":     func(c map[string]any) { c["announce"] = map[string]any{"count": 50} },
		"announce.count a word": func(c map[string]any) { c["announce"] = map[string]any{"count": "three"} },
		"a garbage prevResult":  func(c map[string]any) { c["prevResult"] = "garbage" },
		"a prevResult of a bad shape": func(c map[string]any) {
			c["prevResult"] = map[string]any{"cniVersion": "1.0.0", "ips": "10.0.0.5/24"}
		},
		"a relative logFile":    func(c map[string]any) { c["logFile"] = "external-ip.log" },
		"an unusable static IP": func(c map[string]any) { c["externalIPs"] = []string{"127.0.0.1"} },
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost(t)
			conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
			h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
			spoil(conf)
			h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL c1 with "+name)
			h.mustHold(t, "after DEL with "+name, "eip0")
		})
	}
}

// The keys a DEL does use must still be right: it would otherwise look
// for the record in the wrong place.
func TestDelStillRefusesABadDeviceOrDataDir(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(sharedIP)})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
	before := h.settledView()
	for key, value := range map[string]string{"device": "eip%d", "dataDir": "run/external-ip"} {
		bad := h.netConf("1.0.0", map[string]any{key: value, "traffic": "Both"})
		h.run(attach("DEL", "c1", bad)).mustFail(t, "DEL with "+key+" "+value, 7, key, value)
	}
	h.mustBeUnchanged(t, "the refused DELs", before)
}

// DEL, GC, CHECK and STATUS must not fail because the log cannot be
// opened; ADD still refuses it, which tells the operator.
func TestOnlyADDFailsWhenTheLogFileCannotBeOpened(t *testing.T) {
	h := newHost(t)
	logDir := filepath.Join(t.TempDir(), "log")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(logDir, "external-ip.log")
	conf := h.netConf("1.1.0", map[string]any{"runtimeConfig": runtimeIPs(sharedIP), "logFile": logFile})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD c1")
	h.run(attach("ADD", "c2", conf)).mustOK(t, "ADD c2")
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	h.run(attach("ADD", "c3", conf)).mustFail(t, "ADD with its logFile's directory gone", 7, "logFile", logFile)
	h.run(attach("CHECK", "c1", conf)).mustOK(t, "CHECK with its logFile's directory gone")
	h.run(call{command: "STATUS", conf: conf}).mustOK(t, "STATUS with its logFile's directory gone")
	h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL with its logFile's directory gone")
	h.mustHold(t, "after DEL c1", "eip0", sharedIP+"/32")
	gc := h.gcConf("testnet", []string{}, map[string]any{"logFile": logFile})
	h.run(call{command: "GC", conf: gc}).mustOK(t, "GC with its logFile's directory gone")
	h.mustHold(t, "after GC kept nothing", "eip0")
	if _, err := os.Stat(logDir); err == nil {
		t.Errorf("a call made the log's directory %s", logDir)
	}
}
