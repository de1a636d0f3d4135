// Package config parses and validates the plugin's network configuration and
// every source of requested external IPs into net/netip types.
//
// It owns the meaning of the config keys and the refusal rules that need no
// host: syntax, address classes and allowedRanges. It never touches the host;
// checks that need the kernel (an address already on another interface, the
// uplink subnet's network and broadcast addresses) belong to package assigner.
//
// Every error names where the value came from, the value and the reason, and
// wraps one of ErrDecode, ErrInvalid or ErrArgs so that the caller can map it
// to a CNI error code once, at the top.
package config
