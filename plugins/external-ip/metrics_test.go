package main

import (
	"bytes"
	"strings"
	"testing"
)

type flagCase struct {
	args []string
	want string
}

func TestMetricsAddressIsRefusedWithoutWatchOrNotHostPort(t *testing.T) {
	watch := []string{"install", "--plugin-config", "x", "--watch", "--metrics-address"}
	cases := []flagCase{{[]string{"install", "--plugin-config", "x", "--metrics-address", "127.0.0.1:9477"}, "--metrics-address needs --watch"}}
	if metricsBuilt {
		cases = append(cases, flagCase{append(watch, "9477"), `--metrics-address "9477": not HOST:PORT`},
			flagCase{append(watch, "127.0.0.1:http"), "not HOST:PORT"})
	} else {
		cases = append(cases, flagCase{append(watch, "127.0.0.1:9477"), "built without metrics"})
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := runCLI(c.args, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), c.want) || strings.Count(strings.TrimSpace(errb.String()), "\n") > 0 {
			t.Errorf("%v: %d %q; want a failure, one line with %q", c.args, code, errb.String(), c.want)
		}
	}
}
