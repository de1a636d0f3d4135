package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/external-ip/external-ip/pkg/traffic"
)

// Defaults from the README's table of config keys.
const (
	DefaultDevice        = "eip0"
	DefaultDataDir       = "/run/cni/external-ip"
	DefaultPodAnnotation = "external-ip/addresses"
	// PoolAnnotation asks the node process for a free IP of the named pool.
	PoolAnnotation     = "external-ip/pool"
	DefaultCount       = 3
	DefaultInterval    = 1100 * time.Millisecond
	DefaultLockTimeout = 10 * time.Second
	// DefaultProbe is short because a LAN host answers ARP within milliseconds;
	// it is paid only when an address is first taken on this node.
	DefaultProbe = 150 * time.Millisecond
)

// Announce says how many announcement rounds an ADD sends, how far apart.
// A Count of 0 sends none: for IPs that are on no uplink's subnet (a
// routed fabric), which no neighbour on the LAN has an entry for.
type Announce struct {
	Count    int
	Interval time.Duration
}

// Config is the validated network config. The requested IPs are parsed
// separately by Requests, because only ADD needs them: DEL, CHECK and GC
// work from the stored records.
type Config struct {
	CNIVersion    string
	Name          string
	Device        string
	Uplink        string
	AllowedRanges []netip.Prefix
	PodAnnotation string
	// Pool is the pool the pod's annotation external-ip/pool names, "" when
	// it names none.
	Pool string
	// Pools are the config's node-local pools, by name (pools.go).
	Pools    []LocalPool
	Announce Announce
	// Probe is how long to wait for another owner of an address before it is
	// first taken; 0 turns probing off.
	Probe       time.Duration
	DataDir     string
	LogFile     string
	LogLevel    string
	LockTimeout time.Duration
	// Traffic says which flows of the external IPs are steered (package nat
	// makes the rules).
	Traffic traffic.Mode
	// EgressExcluded are the destinations whose flows from the network's
	// containers are never SNATed to the external IP (excluded.go).
	EgressExcluded []netip.Prefix
	// UplinkRouting routes replies and egress out of an external IP's own
	// uplink (uplinks.go).
	UplinkRouting UplinkRouting
	// Hold is how the IPs are held, `auto` resolved; RouteProtocol the
	// protocol number of their routes when held as routes.
	Hold          Hold
	RouteProtocol int
	// Standby makes an IP that another host answers the conflict probe
	// for a standby holding of this attachment instead of a refusal
	// (standby.go).
	Standby bool
	// PrevResult is the main plugin's result, nil when absent.
	PrevResult types.Result
	// PrevResultJSON is that result as it came, when it names the config's
	// cniVersion: what ADD prints, unchanged (see the plugin's printResult).
	// Nil when the result must be converted.
	PrevResultJSON json.RawMessage
	// ValidAttachments lists the attachments GC must keep.
	ValidAttachments []types.GCAttachment

	// static is the config's own externalIPs list, checked by Load.
	static []IP
	// requested are the runtime's sources as Load decoded them, and the
	// first decoding error among them: Requests reports it, so that a bad
	// request fails ADD and CHECK but never DEL or GC, which do not read it.
	requested    []source
	requestedErr error
	// poolRuntime is the pool runtimeConfig.externalIPPool names.
	poolRuntime string
}

type netConf struct {
	// The keys of types.PluginConf that we read, not the struct itself:
	// decoding its DNS, IPAM and capability fields, and prevResult into a
	// map that version.ParsePrevResult then marshals and decodes again, took
	// most of what Load cost in a fresh process (encoding/json builds each
	// struct type's field table at first use; figure: docs/performance.md,
	// "Figures behind design choices").
	CNIVersion       string               `json:"cniVersion"`
	Name             string               `json:"name"`
	RawPrevResult    json.RawMessage      `json:"prevResult"`
	ValidAttachments []types.GCAttachment `json:"cni.dev/valid-attachments"`
	Device           string               `json:"device"`
	Uplink           string               `json:"uplink"`
	ExternalIPs      json.RawMessage      `json:"externalIPs"`
	AllowedRanges    []string             `json:"allowedRanges"`
	PodAnnotation    *string              `json:"podAnnotation"`
	Announce         *announceRaw         `json:"announce"`
	ConflictProbe    json.RawMessage      `json:"conflictProbe"`
	DataDir          string               `json:"dataDir"`
	LogFile          string               `json:"logFile"`
	LogLevel         string               `json:"logLevel"`
	LockTimeout      json.RawMessage      `json:"lockTimeout"`
	Traffic          json.RawMessage      `json:"traffic"`
	EgressExcluded   json.RawMessage      `json:"egressExcludedCIDRs"`
	UplinkRouting    json.RawMessage      `json:"uplinkRouting"`
	Hold             json.RawMessage      `json:"hold"`
	RouteProtocol    json.RawMessage      `json:"routeProtocol"`
	Pools            json.RawMessage      `json:"pools"`
	Standby          json.RawMessage      `json:"standby"`
	RuntimeConfig    struct {
		ExternalIPs    json.RawMessage   `json:"externalIPs"`
		ExternalIPPool json.RawMessage   `json:"externalIPPool"`
		PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations"`
	} `json:"runtimeConfig"`
	Args struct {
		CNI struct {
			ExternalIPs json.RawMessage `json:"externalIPs"`
		} `json:"cni"`
	} `json:"args"`
}

type announceRaw struct {
	Count    *int            `json:"count"`
	Interval json.RawMessage `json:"interval"`
}

// Load decodes and validates the network config from stdin.
func Load(stdin []byte) (*Config, error) {
	c, _, err := load(stdin, false)
	return c, err
}

// LoadForDel is Load for a DEL, which releases what the attachment's
// record says (the CNI spec: a DEL should complete even if some resources
// are missing). Only the keys it needs must be right: name, device and
// dataDir. Any other key that is wrong is taken as absent; ignored says
// what was passed over, for the log. prevResult is not read at all
// (PrevResult stays nil): a DEL steers by its record, and parsing the
// result built encoding/json's tables for the CNI library's result types
// in every DEL (A/B, end to end: -0.21 ms CPU per steered DEL, 95% CI
// -0.27 to -0.17, at an exec floor of 1.83 ms).
func LoadForDel(stdin []byte) (c *Config, ignored []error, err error) {
	return load(stdin, true)
}

// step reads some keys from raw; delNeeds marks the keys a DEL needs.
type step struct {
	set      func(*netConf) error
	delNeeds bool
}

func load(stdin []byte, forDel bool) (*Config, []error, error) {
	raw := &netConf{}
	var ignored []error
	if err := decodeNetConf(stdin, raw); err != nil {
		if !forDel || !elsewhereThanDelsKeys(stdin, err) {
			return nil, nil, decodeError(stdin, err)
		}
		ignored = append(ignored, decodeError(stdin, err))
	}
	c := &Config{
		CNIVersion:       raw.CNIVersion,
		Name:             raw.Name,
		ValidAttachments: raw.ValidAttachments,
	}
	// Each step reads its keys from raw once; a new key is a new step.
	steps := []step{
		{c.setNames, true}, {c.setUplink, false}, {c.setRanges, false}, {c.setAnnounce, false}, {c.setDirs, true},
		{c.setLog, false}, {c.setTimeouts, false}, {c.setSources, false}, {c.setPools, false}, {c.setTraffic, false},
		{c.setExcluded, false}, {c.setHold, false}, {c.setUplinkRouting, false}, {c.setStandby, false},
	}
	for _, s := range steps {
		err := s.set(raw)
		if err != nil && forDel && !s.delNeeds {
			ignored = append(ignored, err)
			err = s.set(&netConf{}) // the defaults of its keys
		}
		if err != nil {
			return nil, nil, err
		}
	}
	if forDel {
		return c, ignored, nil
	}
	prev, same, err := parsePrevResult(raw.CNIVersion, raw.RawPrevResult)
	if err != nil {
		return nil, nil, decodef("prevResult: %s", oneLine(err.Error()))
	}
	c.PrevResult = prev
	if same {
		c.PrevResultJSON = raw.RawPrevResult
	}
	return c, ignored, nil
}

// elsewhereThanDelsKeys says whether err, the config's decoding error, is
// a value of the wrong type (which encoding/json skips, decoding the rest)
// and the keys a DEL needs are all strings.
func elsewhereThanDelsKeys(stdin []byte, err error) bool {
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) {
		return false
	}
	var dels struct {
		Name    string `json:"name"`
		Device  string `json:"device"`
		DataDir string `json:"dataDir"`
	}
	return json.Unmarshal(stdin, &dels) == nil
}

// oneLine keeps a message on one line: the CNI library's errors quote the
// main plugin's values raw ("invalid CIDR address: " and a route's dst),
// and a value may hold a newline.
func oneLine(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// parsePrevResult decodes the main plugin's result as
// version.ParsePrevResult does, from the raw bytes: a result that names no
// cniVersion of its own takes the config's. same says that it names the
// config's.
func parsePrevResult(cniVersion string, raw json.RawMessage) (types.Result, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	if raw[0] != '{' {
		return nil, false, fmt.Errorf("could not parse prevResult: %s is not an object", raw)
	}
	if res, ok := plainResult(cniVersion, raw); ok {
		return res, res.CNIVersion == cniVersion && verbatim(raw), nil
	}
	return libraryPrevResult(cniVersion, raw)
}

// libraryPrevResult is parsePrevResult for an object, through the CNI
// library alone.
func libraryPrevResult(cniVersion string, raw json.RawMessage) (types.Result, bool, error) {
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, false, fmt.Errorf("could not parse prevResult: %w", err)
	}
	if v.CNIVersion == "" {
		// Rare (results before 1.0.0 may omit it): the library's way.
		conf := &types.PluginConf{CNIVersion: cniVersion}
		if err := json.Unmarshal(raw, &conf.RawPrevResult); err != nil {
			return nil, false, err
		}
		err := version.ParsePrevResult(conf)
		return conf.PrevResult, false, err
	}
	res, err := create.Create(cniVersion, raw)
	if err != nil {
		return nil, false, fmt.Errorf("could not parse prevResult: %w", err)
	}
	return res, v.CNIVersion == cniVersion && verbatim(raw), nil
}

// verbatim says whether raw may go out as it came. encoding/json matched
// "cniVersion" without regard to case and replaced invalid UTF-8; the
// library's own output spells the key exactly and is valid UTF-8. So raw
// must be valid UTF-8 and name the key once, spelt exactly: otherwise a
// runtime that is stricter than Go would find no version, or two.
func verbatim(raw []byte) bool {
	once := bytes.Count(bytes.ToLower(raw), []byte(`"cniversion"`)) == 1
	return once && bytes.Contains(raw, []byte(`"cniVersion"`)) && utf8.Valid(raw)
}

func (c *Config) setNames(raw *netConf) error {
	if raw.Name == "" {
		return invalidf("name: missing network name")
	}
	c.Device = orDefault(raw.Device, DefaultDevice)
	return CheckIfName("device", c.Device)
}

func (c *Config) setUplink(raw *netConf) error {
	c.Uplink, c.PodAnnotation = "", DefaultPodAnnotation
	if raw.Uplink != "" {
		if err := CheckIfName("uplink", raw.Uplink); err != nil {
			return err
		}
		if raw.Uplink == c.Device {
			return invalidf("uplink: %q is also the holder device", raw.Uplink)
		}
		c.Uplink = raw.Uplink
	}
	if raw.PodAnnotation != nil {
		if *raw.PodAnnotation == "" {
			return invalidf("podAnnotation: must not be empty")
		}
		c.PodAnnotation = *raw.PodAnnotation
	}
	return nil
}

func (c *Config) setRanges(raw *netConf) error {
	c.AllowedRanges = nil
	for i, s := range raw.AllowedRanges {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || p.Addr().Zone() != "" {
			return invalidf("allowedRanges[%d]: %q is not a CIDR", i, s)
		}
		if p.Addr().Is4In6() {
			return invalidf("allowedRanges[%d]: %q is an IPv4-mapped IPv6 range; write it as IPv4", i, s)
		}
		c.AllowedRanges = append(c.AllowedRanges, p.Masked())
	}
	return nil
}

// Bounds keep one ADD from scheduling unbounded work on the node.
const (
	maxCount    = 20
	minInterval = 10 * time.Millisecond
	maxInterval = time.Minute
	maxProbe    = 10 * time.Second
	maxLockWait = 5 * time.Minute
)

func (c *Config) setAnnounce(raw *netConf) error {
	c.Announce = Announce{Count: DefaultCount, Interval: DefaultInterval}
	if raw.Announce == nil {
		return nil
	}
	if n := raw.Announce.Count; n != nil {
		if *n < 0 || *n > maxCount {
			return invalidf("announce.count: %d is outside 0..%d", *n, maxCount)
		}
		c.Announce.Count = *n
	}
	d, set, err := decodeDuration("announce.interval", raw.Announce.Interval)
	if err != nil || !set {
		return err
	}
	if d < minInterval || d > maxInterval {
		return invalidf("announce.interval: %q is outside %v..%v", d, minInterval, maxInterval)
	}
	c.Announce.Interval = d
	return nil
}

func (c *Config) setDirs(raw *netConf) error {
	c.DataDir = orDefault(raw.DataDir, DefaultDataDir)
	if !filepath.IsAbs(c.DataDir) {
		return invalidf("dataDir: %q is not an absolute path", c.DataDir)
	}
	c.DataDir = filepath.Clean(c.DataDir)
	return nil
}

func (c *Config) setLog(raw *netConf) error {
	c.LogFile = ""
	if raw.LogFile != "" && !filepath.IsAbs(raw.LogFile) {
		return invalidf("logFile: %q is not an absolute path", raw.LogFile)
	}
	c.LogFile = raw.LogFile
	c.LogLevel = orDefault(raw.LogLevel, "info")
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
		return nil
	}
	return invalidf("logLevel: %q is not one of debug, info, warn, error", raw.LogLevel)
}

func (c *Config) setTimeouts(raw *netConf) error {
	c.LockTimeout, c.Probe = DefaultLockTimeout, DefaultProbe
	d, set, err := decodeDuration("lockTimeout", raw.LockTimeout)
	if err != nil {
		return err
	}
	if set {
		if d <= 0 || d > maxLockWait {
			return invalidf("lockTimeout: %q must be above 0s and at most %v", d, maxLockWait)
		}
		c.LockTimeout = d
	}
	d, set, err = decodeDuration("conflictProbe", raw.ConflictProbe)
	if err != nil {
		return err
	}
	if set {
		if d < 0 || d > maxProbe {
			return invalidf("conflictProbe: %q is outside 0s..%v", d, maxProbe)
		}
		c.Probe = d
	}
	return nil
}

// CheckIfName applies the kernel's rules for interface names (dev_valid_name)
// and refuses the names it would expand, which also keeps a device name
// safe as a path element under dataDir.
func CheckIfName(field, name string) error {
	switch {
	case name == "":
		return invalidf("%s: must not be empty", field)
	case len(name) > 15:
		return invalidf("%s: %q is longer than 15 bytes", field, name)
	case name == "." || name == "..":
		return invalidf("%s: %q is not a valid interface name", field, name)
	case strings.ContainsAny(name, "/: \t\n\r\v\f\x00") || strings.IndexByte(name, 0xa0) >= 0:
		// The kernel's isspace() also takes byte 0xa0 for a space.
		return invalidf("%s: %q contains a character not allowed in an interface name", field, name)
	case strings.IndexByte(name, '%') >= 0:
		// The kernel takes a name with a % as a pattern and makes the
		// device under the first free number (dev_alloc_name): the device
		// would not be the one named here.
		return invalidf("%s: %q contains %%, which the kernel expands to a number", field, name)
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// decodeDuration reads an optional Go duration string such as "1.1s".
func decodeDuration(field string, raw json.RawMessage) (time.Duration, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, false, decodef("%s: want a duration string such as \"1.1s\", got %s", field, truncate(raw, 64))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, false, invalidf("%s: %q is not a duration such as \"1.1s\"", field, s)
	}
	return d, true, nil
}
