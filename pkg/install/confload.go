package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// This file decides which conf dir files a runtime would load, with the
// rules of libcni v1.3 (ConfFiles, NetworkConfFromBytes,
// NetworkPluginConfFromBytes). We do not import libcni: it links net/http,
// TLS and OpenTelemetry, 2 MB and about a millisecond of start-up on every
// CNI call of the plugin binary, which shares this package with the
// installer. confload_test.go holds both to the same inputs.

// confFiles lists dir's non-directory entries whose extension is one of
// confExts. A missing dir has no files: the primary CNI has not made it yet.
func confFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && slices.Contains(confExts, filepath.Ext(e.Name())) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// checkPluginConf accepts a single-plugin config: a JSON object with a type.
func checkPluginConf(data []byte) error {
	var c types.PluginConf
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("parsing configuration: %w", err)
	}
	if c.Type == "" {
		return errors.New("no plugin type")
	}
	return nil
}

// checkConfList accepts a .conflist with a name and at least one plugin
// inline. libcni's NetworkConfFromBytes also takes a list without a
// "plugins" key (its plugins may sit in a subdirectory); we never chain into
// one, so it is refused here as it was with libcni. Keys are looked up
// exactly, as libcni's map does: a struct would match "NAME" too.
func checkConfList(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return fmt.Errorf("parsing configuration list: %w", err)
	}
	if err := checkListHeader(top); err != nil {
		return err
	}
	raw, ok := top["plugins"]
	if !ok {
		return errors.New("no plugins in the file")
	}
	var plugins []json.RawMessage
	if !isKind(raw, '[') || json.Unmarshal(raw, &plugins) != nil {
		return fmt.Errorf("plugins: %s is not a list", raw)
	}
	if len(plugins) == 0 {
		return errors.New("no plugins in the file")
	}
	for i, p := range plugins {
		if err := checkPluginConf(p); err != nil {
			return fmt.Errorf("plugin %d: %w", i, err)
		}
	}
	return nil
}

// checkListHeader checks the list's own keys as libcni reads them.
func checkListHeader(top map[string]json.RawMessage) error {
	name, ok := top["name"]
	if !ok {
		return errors.New("no name")
	}
	if !isKind(name, '"') {
		return fmt.Errorf("name: %s is not a string", name)
	}
	if v, ok := top["cniVersion"]; ok && !isKind(v, '"') {
		return fmt.Errorf("cniVersion: %s is not a string", v)
	}
	if err := checkVersions(top); err != nil {
		return err
	}
	for _, key := range []string{"disableCheck", "disableGC", "loadOnlyInlinedPlugins"} {
		if err := checkBool(key, top); err != nil {
			return err
		}
	}
	return nil
}

// checkVersions: every cniVersions entry must be a version, and so must
// cniVersion when cniVersions is given (libcni compares them all).
func checkVersions(top map[string]json.RawMessage) error {
	raw, ok := top["cniVersions"]
	if !ok {
		return nil
	}
	var entries []json.RawMessage
	if !isKind(raw, '[') || json.Unmarshal(raw, &entries) != nil {
		return fmt.Errorf("cniVersions: %s is not a list", raw)
	}
	for _, e := range entries {
		var v string
		if !isKind(e, '"') || json.Unmarshal(e, &v) != nil {
			return fmt.Errorf("cniVersions: %s is not a string", e)
		}
		if err := checkVersionEntry("cniVersions", v); err != nil {
			return err
		}
	}
	var v string
	if raw, ok := top["cniVersion"]; ok && json.Unmarshal(raw, &v) == nil && v != "" {
		return checkVersionEntry("cniVersion", v) // an empty cniVersion is not compared
	}
	return nil
}

func checkVersionEntry(key, v string) error {
	if _, err := version.GreaterThan(v, version.Current()); err != nil {
		return fmt.Errorf("%s: %q: %w", key, v, err)
	}
	return nil
}

// checkBool: libcni takes a JSON bool or the strings "true" and "false" in
// any case.
func checkBool(key string, top map[string]json.RawMessage) error {
	raw, ok := top[key]
	if !ok || isKind(raw, 't') || isKind(raw, 'f') {
		return nil
	}
	var s string
	if isKind(raw, '"') && json.Unmarshal(raw, &s) == nil {
		if low := strings.ToLower(s); low == "true" || low == "false" {
			return nil
		}
	}
	return fmt.Errorf("%s: %s is not a boolean", key, raw)
}

// isKind tells a JSON value's kind by its first byte: decoding null into a
// Go string or slice succeeds and leaves it empty, where libcni's type
// assertion on the decoded value fails.
func isKind(raw json.RawMessage, first byte) bool {
	return len(raw) > 0 && raw[0] == first
}
