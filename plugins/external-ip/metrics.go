package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// watchEvery is how often the node process reads the held IPs, for the
// conflict watch's uplinks and the external_ip_held series.
const watchEvery = 5 * time.Second

// checkMetricsAddress refuses an address that is not HOST:PORT, one given
// without --watch, and any in a build without metrics.
func checkMetricsAddress(addr string, watch bool) error {
	if addr == "" {
		return nil
	}
	if !watch {
		return errors.New("install: --metrics-address needs --watch")
	}
	if !metricsBuilt {
		return fmt.Errorf("install: --metrics-address %q: this binary is built without metrics; external-ip-node serves them (docs/observe.md)", addr)
	}
	_, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || n == 0 {
		return fmt.Errorf("install: --metrics-address %q: not HOST:PORT", addr)
	}
	return nil
}
