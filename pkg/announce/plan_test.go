package announce

import (
	"bufio"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPlanSurvivesJSONRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan Plan
	}{
		{"both families on a router", Plan{
			Uplink:   Uplink{Name: "eth0", Index: 2, MAC: testMAC, Router: true},
			IPs:      []netip.Addr{testIP4, testIP6},
			Rounds:   2,
			Interval: 1100 * time.Millisecond,
		}},
		{"nothing left to send", Plan{
			Uplink: Uplink{Name: "bond0.100", Index: 4096, MAC: testMAC},
		}},
		{"an interval below a millisecond", Plan{
			Uplink:   Uplink{Name: "eth1", Index: 3, MAC: testMAC},
			IPs:      []netip.Addr{testIP6},
			Rounds:   1,
			Interval: 1500 * time.Nanosecond,
		}},
		{"with the caller's log", Plan{
			Uplink: Uplink{Name: "eth0", Index: 2, MAC: testMAC},
			IPs:    []netip.Addr{testIP4},
			Rounds: 2, Interval: time.Second,
			Log: &PlanLog{File: "/var/log/external-ip.log", Level: "debug", Attrs: []string{"network", "pods", "container", "c1"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.plan)
			if err != nil {
				t.Fatalf("encoding %+v: %v", tc.plan, err)
			}
			var got Plan
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("decoding %s: %v", b, err)
			}
			if !reflect.DeepEqual(got, tc.plan) {
				t.Errorf("plan changed in a JSON round trip through %s\n got: %+v\nwant: %+v", b, got, tc.plan)
			}
		})
	}
}

func TestPlanJSONSpellsMACAndIntervalAsText(t *testing.T) {
	p := Plan{Uplink: Uplink{Name: "eth0", Index: 2, MAC: testMAC}, Rounds: 2, Interval: 1100 * time.Millisecond}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("encoding %+v: %v", p, err)
	}
	for _, want := range []string{`"mac":"0a:1b:2c:3d:4e:5f"`, `"interval":"1.1s"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("encoded plan %s lacks %s", b, want)
		}
	}
}

func TestPlanFromEnvRefusesBrokenPlans(t *testing.T) {
	good := `"uplink":"eth0","index":2,"mac":"0a:1b:2c:3d:4e:5f","ips":["198.51.100.7"],"rounds":2,"interval":"1.1s"`
	if _, err := PlanFromEnv("{" + good + "}"); err != nil {
		t.Fatalf("refused a good plan: %v", err)
	}
	for _, tc := range []struct{ name, env string }{
		{"not JSON", "rounds=2"},
		{"no uplink name", `{"index":2,"mac":"0a:1b:2c:3d:4e:5f","rounds":2,"interval":"1s"}`},
		{"no uplink index", `{"uplink":"eth0","mac":"0a:1b:2c:3d:4e:5f","rounds":2,"interval":"1s"}`},
		{"an unparsable MAC", `{"uplink":"eth0","index":2,"mac":"0a:1b","rounds":2,"interval":"1s"}`},
		{"an 8-byte MAC", `{"uplink":"eth0","index":2,"mac":"00:01:02:03:04:05:06:07","rounds":2,"interval":"1s"}`},
		{"an unparsable interval", `{"uplink":"eth0","index":2,"mac":"0a:1b:2c:3d:4e:5f","rounds":2,"interval":"soon"}`},
		{"a negative interval", `{"uplink":"eth0","index":2,"mac":"0a:1b:2c:3d:4e:5f","rounds":2,"interval":"-1s"}`},
		{"negative rounds", `{"uplink":"eth0","index":2,"mac":"0a:1b:2c:3d:4e:5f","rounds":-1,"interval":"1s"}`},
		{"a bad IP", `{"uplink":"eth0","index":2,"mac":"0a:1b:2c:3d:4e:5f","ips":["198.51.100.300"],"rounds":2,"interval":"1s"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if p, err := PlanFromEnv(tc.env); err == nil {
				t.Errorf("accepted %s as %+v; want an error", tc.env, p)
			}
		})
	}
}

// loopbackPlan sends nothing, so it needs no root, but still lives
// rounds*interval like a real one.
func loopbackPlan(ips []netip.Addr, rounds int, interval time.Duration) Plan {
	return Plan{
		Uplink:   Uplink{Name: "lo", Index: 1, MAC: make([]byte, ethernetAddrLen)},
		IPs:      ips,
		Rounds:   rounds,
		Interval: interval,
	}
}

func TestDetachDoesNotHoldTheCallersStdoutUntilTheLaterRounds(t *testing.T) {
	p := loopbackPlan(nil, 2, time.Second)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fifo, done := doneFIFO(t)
	// The helper plays the plugin; reading its stdout to EOF is what a
	// runtime does before it considers ADD finished.
	helper := exec.Command(exe)
	helper.Env = append(os.Environ(), envDetachHelper+"="+string(b), envDone+"="+fifo,
		// A -race binary otherwise sleeps a second before it exits.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	helper.Stderr = os.Stderr
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := helper.Start(); err != nil {
		t.Fatalf("starting the plugin stand-in: %v", err)
	}
	if _, err := io.ReadAll(stdout); err != nil {
		t.Fatalf("reading the plugin stand-in's stdout: %v", err)
	}
	held := time.Since(start)
	if err := helper.Wait(); err != nil {
		t.Fatalf("the plugin stand-in failed to detach: %v", err)
	}
	if held >= p.Interval {
		t.Errorf("stdout reached EOF after %s, not before the first later round (%s): the announcer holds it", held, p.Interval)
	}
	results := waitDone(t, done, 1, time.Duration(p.Rounds)*p.Interval+5*time.Second)
	if elapsed := time.Since(start); elapsed < time.Duration(p.Rounds)*p.Interval {
		t.Errorf("detached announcer finished after %s, before its %d rounds of %s", elapsed, p.Rounds, p.Interval)
	}
	if results[0] != "ok" {
		t.Errorf("detached announcer failed: %s", results[0])
	}
}

func TestDetachSplitsAPlanTooBigForOneEnvironmentString(t *testing.T) {
	ips := make([]netip.Addr, 10000)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)})
	}
	p := loopbackPlan(ips, 0, 0)
	if b, _ := json.Marshal(p); len(b) < 128<<10 {
		t.Fatalf("plan of %d bytes is too small to test splitting", len(b))
	}
	fifo, done := doneFIFO(t)
	t.Setenv(envDone, fifo)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := Detach(exe, p); err != nil {
		t.Fatalf("detaching a plan of %d addresses: %v", len(ips), err)
	}
	for i, r := range waitDone(t, done, 2, 10*time.Second) {
		if r != "ok" {
			t.Errorf("detached announcer %d failed: %s", i, r)
		}
	}
}

// doneFIFO makes the FIFO that detached test binaries report to (envDone)
// and opens it for the test, read and write: so that neither this open
// nor a child's blocks, and reads wait for a line instead of ending.
func doneFIFO(t *testing.T) (string, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "done")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return path, f
}

// waitDone blocks until n detached test binaries have reported to done,
// and returns their results; past timeout it fails, naming how many did.
func waitDone(t *testing.T, done *os.File, n int, timeout time.Duration) []string {
	t.Helper()
	if err := done.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(done)
	var results []string
	for len(results) < n {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("%d of %d detached announcers reported within %s: %v", len(results), n, timeout, err)
		}
		_, result, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		results = append(results, result)
	}
	return results
}

// queued is how many bytes wait in the pipe or FIFO f, from either end
// (FIONREAD, which x/sys names TIOCINQ).
func queued(t *testing.T, f *os.File) int {
	t.Helper()
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A plan with no rounds left only holds the caller's sockets: its child,
// which needs no uplink to do that, must start, wait for the hold pipe to
// close, and only then end. (Such a plan once failed the child's decoding,
// and the child exited at once: the plugin's DEL then closed the last copy
// of the nf_tables socket itself and waited out the kernel's grace period.)
func TestAHoldOnlyChildEndsOnlyOnceTheHoldPipeCloses(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fifo, done := doneFIFO(t)
	t.Setenv(envDone, fifo)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := Detach(exe, Plan{Hold: true}, r); err != nil {
		t.Fatal(err)
	}
	// A byte in the hold pipe is gone only once the child reads it: then
	// it has started and waits on the pipe, where a broken one has ended.
	if _, err := w.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); queued(t, w) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hold-only child did not read its hold pipe within 10s: it never started, or ended without reading it")
		}
	}
	if n := queued(t, done); n > 0 {
		t.Fatalf("the hold-only child reported (%d bytes) with the hold pipe still open", n)
	}
	w.Close()
	if got := waitDone(t, done, 1, 10*time.Second); got[0] != "ok" {
		t.Errorf("the hold-only child ended with %q, want ok", got[0])
	}
}
