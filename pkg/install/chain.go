package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/install/internal/cniconf"
	"github.com/external-ip/external-ip/pkg/store"
)

// PluginType is the CNI type of our entry; an entry of this type in the
// primary's list is ours, and is replaced.
const PluginType = "external-ip"

// ErrInvalid: the plugin entry given to the installer is not one the
// plugin would accept, or the primary cannot chain it.
var ErrInvalid = errors.New("invalid")

// Entry is our plugin's entry for the primary's plugin list.
type Entry struct {
	fields  map[string]json.RawMessage
	dataDir string
	routing config.UplinkRouting
}

// DataDir is the state directory the entry gives the plugin: where the
// node upkeep must look for what it holds.
func (e *Entry) DataDir() string { return e.dataDir }

// UplinkRouting is the entry's uplinkRouting: the marks, tables and
// gateways with which the node upkeep repairs the uplink routing.
func (e *Entry) UplinkRouting() config.UplinkRouting { return e.routing }

// ParseEntry decodes and validates our entry (from the ConfigMap) as the
// plugin will: an entry the plugin would refuse would fail every pod's ADD.
// Its cniVersion, if any, is dropped: the list's applies to every plugin.
func ParseEntry(data []byte) (*Entry, error) {
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("%w: plugin config: %v", ErrInvalid, err)
	}
	var typ string
	if err := json.Unmarshal(fields["type"], &typ); err != nil || typ != PluginType {
		return nil, fmt.Errorf("%w: plugin config: type: %s is not %q", ErrInvalid, orMissing(fields["type"]), PluginType)
	}
	delete(fields, "cniVersion")
	e := &Entry{fields: fields}
	probe := e.with(map[string]json.RawMessage{"cniVersion": json.RawMessage(`"1.0.0"`), "name": json.RawMessage(`"install-check"`)})
	c, err := config.Load(probe)
	if err != nil {
		return nil, fmt.Errorf("%w: plugin config: %w", ErrInvalid, err)
	}
	if err := e.checkLibcni(); err != nil {
		return nil, err
	}
	// Every verb refuses such a dataDir: checked as they check it.
	if err := store.CheckDataDir(c.DataDir); err != nil {
		return nil, fmt.Errorf("%w: plugin config: %w", ErrInvalid, err)
	}
	e.dataDir, e.routing = c.DataDir, c.UplinkRouting
	return e, nil
}

// checkLibcni refuses an entry that makes libcni refuse the whole list it
// is chained into (a key libcni reads, with a value of another JSON type):
// the runtime would then load no config, and no pod would start.
func (e *Entry) checkLibcni() error {
	list := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "install-check", "plugins": [{"type": "bridge"}, %s]}`, e.raw())
	_, err := cniconf.ConfListFromBytes([]byte(list))
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%w: plugin config: %s: %s is a %s where libcni reads %s, so the runtime would load no network config",
			ErrInvalid, te.Field, e.value(te.Field), te.Value, te.Type)
	}
	return fmt.Errorf("%w: plugin config: libcni refuses it, so the runtime would load no network config: %w", ErrInvalid, err)
}

// value is the entry's JSON at a dotted path of keys, as a refusal quotes it.
func (e *Entry) value(path string) string {
	fields := e.fields
	keys := strings.Split(path, ".")
	for i, k := range keys {
		raw, ok := fields[k]
		if !ok {
			return "?"
		}
		if i == len(keys)-1 || json.Unmarshal(raw, &fields) != nil {
			return string(mustMarshal(raw)) // compact, on one line
		}
	}
	return "?"
}

func orMissing(raw json.RawMessage) string {
	if raw == nil {
		return "missing"
	}
	return string(raw)
}

// with is the entry's JSON with extra keys added.
func (e *Entry) with(extra map[string]json.RawMessage) []byte {
	m := make(map[string]json.RawMessage, len(e.fields)+len(extra))
	for k, v := range e.fields {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m) // RawMessages that decoded once encode again
	return b
}

func (e *Entry) raw() json.RawMessage { return e.with(nil) }

// chainList returns data (a conflist) with our entry last and no other of
// ours, or nil when it is already so: then nothing is written.
func chainList(name string, data []byte, e *Entry) ([]byte, error) {
	top := map[string]json.RawMessage{}
	var plugins []json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := json.Unmarshal(top["plugins"], &plugins); err != nil {
		return nil, fmt.Errorf("%s: plugins: %w", name, err)
	}
	if err := checkVersion(name, top["cniVersion"]); err != nil {
		return nil, err
	}
	others := make([]json.RawMessage, 0, len(plugins)+1)
	for _, p := range plugins {
		if !isOurs(p) {
			others = append(others, p)
		}
	}
	if len(others) == len(plugins)-1 && isOurs(plugins[len(plugins)-1]) && sameJSON(plugins[len(plugins)-1], e.raw()) {
		return nil, nil
	}
	if len(others) == 0 {
		return nil, fmt.Errorf("%w: %s: holds only external-ip entries; it needs a main plugin first", ErrInvalid, name)
	}
	top["plugins"] = mustMarshal(append(others, e.raw()))
	return encode(top), nil
}

// listFromConf turns a single-plugin config into a list of it and our
// entry, as libcni's ConfListFromConf does (the list's name and cniVersion
// are the config's as libcni decodes them: a null name is ""), keeping the
// plugin as written.
func listFromConf(name string, data []byte, e *Entry) ([]byte, error) {
	c, err := cniconf.ConfFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if isOurs(data) {
		return nil, fmt.Errorf("%w: %s: is an external-ip config alone; it needs a main plugin first", ErrInvalid, name)
	}
	conf := map[string]json.RawMessage{}
	if err := json.Unmarshal(data, &conf); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := checkVersion(name, conf["cniVersion"]); err != nil {
		return nil, err
	}
	top := map[string]json.RawMessage{
		"name":       mustMarshal(c.Network.Name),
		"cniVersion": mustMarshal(c.Network.CNIVersion),
		"plugins":    mustMarshal([]json.RawMessage{data, e.raw()}),
	}
	return encode(top), nil
}

// checkVersion refuses to chain into a list of a version our plugin does
// not speak (config.PluginVersions, which skel enforces): every ADD and DEL
// of the node would fail as incompatible.
func checkVersion(name string, raw json.RawMessage) error {
	// No cniVersion is 0.1.0 to libcni (ConfigDecoder), which has no chaining.
	v := "0.1.0"
	if raw != nil {
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("%w: %s: cniVersion: %s is not a string", ErrInvalid, name, raw)
		}
	}
	speaks := config.PluginVersions().SupportedVersions()
	if !slices.Contains(speaks, v) {
		return fmt.Errorf("%w: %s: cniVersion: %q is not a version external-ip speaks (%s); refusing to chain it, or every pod of the node would fail",
			ErrInvalid, name, v, strings.Join(speaks, ", "))
	}
	return nil
}

func isOurs(plugin json.RawMessage) bool {
	var p struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(plugin, &p) == nil && p.Type == PluginType
}

// sameJSON compares two documents as values, not as text: the primary may
// have re-indented our entry.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return bytes.Equal(mustMarshal(x), mustMarshal(y))
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshalling decoded JSON: %v", err)) // cannot happen: it all decoded
	}
	return b
}

func encode(top map[string]json.RawMessage) []byte {
	var buf bytes.Buffer
	if err := json.Indent(&buf, mustMarshal(top), "", "  "); err != nil {
		panic(fmt.Sprintf("indenting JSON we encoded: %v", err))
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// unchainList is data (a conflist) without our entries, and whether it had
// any. Uninstall writes it over a file someone else rewrote with our entry
// kept: a node must never be left naming a binary we removed.
func unchainList(data []byte) ([]byte, bool) {
	top := map[string]json.RawMessage{}
	var plugins []json.RawMessage
	if json.Unmarshal(data, &top) != nil || json.Unmarshal(top["plugins"], &plugins) != nil {
		return nil, false
	}
	others := make([]json.RawMessage, 0, len(plugins))
	for _, p := range plugins {
		if !isOurs(p) {
			others = append(others, p)
		}
	}
	if len(others) == len(plugins) || len(others) == 0 {
		return nil, false
	}
	top["plugins"] = mustMarshal(others)
	return encode(top), true
}
