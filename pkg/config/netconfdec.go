package config

import (
	"bytes"
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/external-ip/external-ip/pkg/plainjson"
)

// decodeNetConf is json.NewDecoder(bytes.NewReader(stdin)).Decode(raw)
// for a new raw, by hand when the config is in plain form (package
// plainjson): encoding/json built the field tables of netConf's types in
// every invocation (A/B, end to end, over the store's hand decoding: -0.10
// ms CPU per steered DEL, 95% CI -0.16 to -0.07, at an exec floor of 1.55
// ms; an ADD's -0.02 ms, -0.09 to +0.02, did not show alone, as its
// prevResult still built encoding/json's tables). Any other form goes to
// encoding/json, with its result or its error;
// FuzzNetConfDecodingIsEncodingJSONs compares the two, and
// TestNetConfDecoderReadsEveryField fills every field by reflection.
func decodeNetConf(stdin []byte, raw *netConf) error {
	var n netConf
	d := plainjson.New(stdin)
	n.decode(d)
	if d.OK() {
		*raw = n
		return nil
	}
	return json.NewDecoder(bytes.NewReader(stdin)).Decode(raw)
}

// The JSON names of netConf's fields and of those of its parts: a name
// left out would be passed over, which TestNetConfDecoderReadsEveryField
// finds.
var (
	netConfNames = []string{"cniVersion", "name", "prevResult", "cni.dev/valid-attachments", "device", "uplink",
		"externalIPs", "allowedRanges", "podAnnotation", "announce", "conflictProbe", "dataDir", "logFile", "logLevel",
		"lockTimeout", "traffic", "egressExcludedCIDRs", "uplinkRouting", "hold", "routeProtocol", "pools", "standby",
		"runtimeConfig", "args"}
	attachmentNames = []string{"containerID", "ifname"}
	announceNames   = []string{"count", "interval"}
	runtimeNames    = []string{"externalIPs", "externalIPPool", "io.kubernetes.cri.pod-annotations"}
	argsNames       = []string{"cni"}
	argsCNINames    = []string{"externalIPs"}
)

func (n *netConf) decode(d *plainjson.Decoder) {
	d.Object(netConfNames, func(name string) {
		switch name {
		case "cniVersion":
			d.Str(&n.CNIVersion)
		case "name":
			d.Str(&n.Name)
		case "prevResult":
			d.Raw(&n.RawPrevResult)
		case "cni.dev/valid-attachments":
			plainjson.List(d, &n.ValidAttachments, func(a *types.GCAttachment) {
				d.Object(attachmentNames, func(name string) {
					if name == "containerID" {
						d.Str(&a.ContainerID)
					} else {
						d.Str(&a.IfName)
					}
				})
			})
		case "allowedRanges":
			plainjson.List(d, &n.AllowedRanges, d.Str)
		case "podAnnotation":
			d.StrPtr(&n.PodAnnotation)
		case "announce":
			plainjson.Ptr(d, &n.Announce, func(a *announceRaw) { a.decode(d) })
		case "runtimeConfig":
			n.decodeRuntime(d)
		case "args":
			d.Object(argsNames, func(string) {
				d.Object(argsCNINames, func(string) { d.Raw(&n.Args.CNI.ExternalIPs) })
			})
		default:
			n.decodeRest(d, name)
		}
	})
}

// decodeRest reads the keys of netConf whose value is a string or kept
// raw.
func (n *netConf) decodeRest(d *plainjson.Decoder, name string) {
	if p := n.stringField(name); p != nil {
		d.Str(p)
	} else if p := n.rawField(name); p != nil {
		d.Raw(p)
	} else {
		d.GiveUp() // a name listed but not read here: encoding/json reads it
	}
}

func (n *netConf) stringField(name string) *string {
	switch name {
	case "device":
		return &n.Device
	case "uplink":
		return &n.Uplink
	case "dataDir":
		return &n.DataDir
	case "logFile":
		return &n.LogFile
	case "logLevel":
		return &n.LogLevel
	}
	return nil
}

func (n *netConf) rawField(name string) *json.RawMessage {
	switch name {
	case "externalIPs":
		return &n.ExternalIPs
	case "conflictProbe":
		return &n.ConflictProbe
	case "lockTimeout":
		return &n.LockTimeout
	case "traffic":
		return &n.Traffic
	case "egressExcludedCIDRs":
		return &n.EgressExcluded
	case "uplinkRouting":
		return &n.UplinkRouting
	case "hold":
		return &n.Hold
	case "routeProtocol":
		return &n.RouteProtocol
	case "pools":
		return &n.Pools
	case "standby":
		return &n.Standby
	}
	return nil
}

func (n *netConf) decodeRuntime(d *plainjson.Decoder) {
	rc := &n.RuntimeConfig
	d.Object(runtimeNames, func(name string) {
		switch name {
		case "externalIPs":
			d.Raw(&rc.ExternalIPs)
		case "externalIPPool":
			d.Raw(&rc.ExternalIPPool)
		default:
			d.StringMap(&rc.PodAnnotations)
		}
	})
}

func (a *announceRaw) decode(d *plainjson.Decoder) {
	d.Object(announceNames, func(name string) {
		if name == "count" {
			plainjson.Ptr(d, &a.Count, d.Int)
		} else {
			d.Raw(&a.Interval)
		}
	})
}
