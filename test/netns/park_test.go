package netns

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/park"
	"github.com/external-ip/external-ip/pkg/sink"
)

// parkingWorks says whether this process can park a file, as the plugin
// would: the sysctl alone does not tell (root may still make rings under
// kernel.io_uring_disabled=1, and a seccomp filter leaves it at 0).
func parkingWorks(t *testing.T) bool {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := park.Files([]*os.File{w}); err != nil {
		w.Close()
		t.Logf("parking here: %v", err)
		return false
	}
	return true
}

// A steered IPv4 ADD with one round and its DEL leave slow-to-close
// sockets (the ARP socket; nf_tables' and conntrack's) that are parked in
// an io_uring, or, where io_uring is refused, held by a child as before.
// Either way both succeed, the plugin closes none of them itself, and the
// debug log says which way was taken.
func TestSlowSocketsAreParkedOrElseHeldByAChild(t *testing.T) {
	bin := faultBinary(t)
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("io_uring refused=%v", refuse), func(t *testing.T) {
			h := newHost(t)
			h.forwardIPv4()
			logFile := t.TempDir() + "/external-ip.log"
			conf := h.netConf("1.0.0", map[string]any{"logFile": logFile, "logLevel": "debug", "traffic": "both",
				"runtimeConfig": runtimeIPs("192.0.2.74")})
			env := []string{sink.RefuseEnv + "=1"} // the sink would take the netfilter sockets
			if refuse {
				env = append(env, park.RefuseEnv+"=1")
			}
			h.runWith(bin, call{command: "ADD", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}, env...).mustOK(t, "ADD")
			h.runWith(bin, call{command: "DEL", containerID: "c1", ifName: "eth0", netns: "/var/run/netns/c1", conf: conf}, env...).mustOK(t, "DEL")
			waitNoAnnouncer(t, h, 10*time.Second)
			lines := readLog(t, logFile)
			wantChild := refuse || !parkingWorks(t)
			const msg = "parking failed, a child holds the sockets"
			for _, cmd := range []string{"ADD", "DEL"} {
				if got := hasLine(lines, cmd, msg); got != wantChild {
					t.Errorf("%s logged %q: %v, want %v (io_uring refused: %v)\nlog: %+v", cmd, msg, got, wantChild, refuse, lines)
				}
			}
			for _, l := range lines {
				if l.Level == "WARN" || l.Level == "ERROR" {
					t.Errorf("%s logged %s %q: a socket was closed in the plugin or not handed over", l.Command, l.Level, l.Msg)
				}
			}
		})
	}
}
