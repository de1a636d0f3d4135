package install

import (
	"errors"
	"fmt"
	"time"

	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/nat"
	"golang.org/x/sys/unix"
)

// retire removes what the plugin leaves on the host once no pod holds an
// external IP: the holder devices of dataDir and table inet external-ip,
// each only when it is ours and empty. A dataDir with neither state nor a
// holder never ran the plugin here: nothing on the host is judged ours
// then, the shared table included. kept lines say what stays and why.
func (i *Installer) retire(dataDir string) ([]string, error) {
	devs, err := host.StateDevices(dataDir)
	if err != nil {
		return nil, err
	}
	var kept []string
	for k, d := range devs {
		var also func() (string, error)
		if k == len(devs)-1 && len(kept) == 0 {
			also = retireTable // the last device's lock covers it, all others empty
		}
		a := assigner.New(assigner.Options{Device: d, DataDir: dataDir, LockTimeout: 10 * time.Second, Log: i.log()})
		line, err := a.Retire(also)
		if errors.Is(err, unix.EPERM) {
			// Uninstall's job is the conf dir and the binary; a caller
			// without CAP_NET_ADMIN (a container with its capabilities
			// dropped) leaves the empty holder, and is told so.
			line, err = fmt.Sprintf("holder %s: kept: removing it needs CAP_NET_ADMIN (%v); run uninstall as root on the node to remove it", d, err), nil
		}
		if err != nil {
			return kept, fmt.Errorf("removing holder %s: %w", d, err)
		}
		if line != "" && dataDir != config.DefaultDataDir {
			line += " (uninstall --data-dir " + dataDir + ")" // the undo file that named it is gone then
		}
		if line != "" {
			kept = append(kept, line)
		}
	}
	return kept, nil
}

// retireTable deletes table inet external-ip when it steers nothing.
func retireTable() (string, error) {
	t, err := nat.Open()
	if err != nil {
		return "", err
	}
	defer t.Close()
	st, err := t.Read()
	if err != nil || !st.Present {
		return "", err
	}
	// Hairpin subnets and exclusion elements alone steer nothing (the
	// rules also need an external IP with targets, a source to SNAT); DEL
	// leaves them for GC.
	if n := len(st.Ingress) + len(st.Egress) + len(st.Stray); n > 0 {
		return fmt.Sprintf("table inet %s: kept: it still steers %d entries, of pods of another dataDir or left over (external-ip repair removes those no record holds)", nat.TableName, n), nil
	}
	return "", t.Delete()
}

// retireDataDir is the dataDir whose leftovers uninstall removes: the one
// asked for, else the one install recorded, else the default.
func (i *Installer) retireDataDir(u *undo) string {
	switch {
	case i.DataDir != "":
		return i.DataDir
	case u != nil && u.DataDir != "":
		return u.DataDir
	}
	return config.DefaultDataDir
}
