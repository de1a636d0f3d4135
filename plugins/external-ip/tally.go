package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/tally"
)

// counted makes cmd leave one line in the node's request tally (package
// tally) once it has its result, whatever the result: the node process
// serves the counts as external_ip_cni_requests_total.
func counted(verb string, cmd func(*skel.CmdArgs) error) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error {
		err := cmd(args)
		tally.Record(dataDirOf(args.StdinData), verb, codeOf(err))
		return err
	}
}

// codeOf is the CNI code the runtime sees for err; 0 is success.
func codeOf(err error) uint {
	var e *types.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	}
	return types.ErrInternal
}

// dataDirOf is the config's dataDir, read leniently so that a config the
// plugin refused is still counted where the node process looks. Most
// configs leave dataDir out: a scan for the key (encoding/json matches it in
// any case, and a \u escape could spell it) spares them a second decode.
func dataDirOf(stdin []byte) string {
	if !mayNameDataDir(stdin) {
		return config.DefaultDataDir
	}
	var c struct {
		DataDir string `json:"dataDir"`
	}
	if json.Unmarshal(stdin, &c) != nil || !filepath.IsAbs(c.DataDir) {
		return config.DefaultDataDir
	}
	return filepath.Clean(c.DataDir)
}

func mayNameDataDir(b []byte) bool {
	const key = "datadir"
	if bytes.Contains(b, []byte(`\u`)) {
		return true
	}
	for i := bytes.IndexAny(b, "dD"); i >= 0 && i+len(key) <= len(b); {
		if bytes.EqualFold(b[i:i+len(key)], []byte(key)) {
			return true
		}
		j := bytes.IndexAny(b[i+1:], "dD")
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}
