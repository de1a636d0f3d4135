package netns

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"
)

// Load figures: the README's reliability table quotes them.
const (
	loadWorkers = 16
	loadOps     = 25 // per worker: 400 invocations of the plugin in all
)

// loadPool is the overlapping set the workers draw from: few enough IPs
// that most are shared by several attachments at once.
var loadPool = []string{
	"192.0.2.40", "192.0.2.41", "192.0.2.42", "192.0.2.43", "192.0.2.44", "192.0.2.45",
	"2001:db8:1::40", "2001:db8:1::41", "2001:db8:1::42", "2001:db8:1::43",
}

func TestConcurrentAddAndDelKeepHolderEqualToLiveAttachments(t *testing.T) {
	h := newHost(t)
	var mu sync.Mutex
	live := map[string][]string{} // container ID -> IPs it holds after its last successful call
	var wg sync.WaitGroup
	errs := make(chan error, loadWorkers*loadOps)
	start := time.Now()
	for w := range loadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range loadOps {
				id := fmt.Sprintf("w%d-c%d", w, rng.IntN(3)) // each worker reuses 3 attachments
				if err := h.loadStep(id, rng, &mu, live); err != nil {
					errs <- fmt.Errorf("worker %d op %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d processes x %d ADD/DEL = %d invocations over %d shared IPs in %s",
		loadWorkers, loadOps, loadWorkers*loadOps, len(loadPool), time.Since(start).Round(time.Millisecond))
	h.mustHoldExactly(t, "after the load", heldBy(live))
	h.consistent("after the load")
	for id := range live {
		h.run(call{command: "DEL", containerID: id, ifName: "eth0", conf: h.loadConf(nil)}).mustOK(t, "final DEL "+id)
	}
	h.mustHoldExactly(t, "after every DEL", nil)
}

// loadStep makes one ADD (of a random subset) or DEL of attachment id and
// records what it holds when the call succeeds.
func (h *host) loadStep(id string, rng *rand.Rand, mu *sync.Mutex, live map[string][]string) error {
	if rng.IntN(3) == 0 {
		r := h.run(call{command: "DEL", containerID: id, ifName: "eth0", conf: h.loadConf(nil)})
		if r.err != nil {
			return fmt.Errorf("DEL %s: code %d %s", id, r.code, r.msg)
		}
		mu.Lock()
		delete(live, id)
		mu.Unlock()
		return nil
	}
	ips := pick(rng, loadPool, 1+rng.IntN(3))
	r := h.run(call{command: "ADD", containerID: id, ifName: "eth0", netns: "/var/run/netns/" + id, conf: h.loadConf(ips)})
	if r.err != nil {
		return fmt.Errorf("ADD %s %v: code %d %s", id, ips, r.code, r.msg)
	}
	mu.Lock()
	live[id] = ips
	mu.Unlock()
	return nil
}

func (h *host) loadConf(ips []string) map[string]any {
	return h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ips...), "lockTimeout": "60s"})
}

func pick(rng *rand.Rand, pool []string, n int) []string {
	idx := rng.Perm(len(pool))[:n]
	out := make([]string, n)
	for i, j := range idx {
		out[i] = pool[j]
	}
	return out
}

func heldBy(live map[string][]string) []string {
	set := map[string]bool{}
	for _, ips := range live {
		for _, ip := range ips {
			set[ip] = true
		}
	}
	var out []string
	for ip := range set {
		out = append(out, ip)
	}
	sort.Strings(out)
	return out
}

// mustHoldExactly fails unless eip0 carries exactly want of the pool.
func (h *host) mustHoldExactly(t *testing.T, when string, want []string) {
	t.Helper()
	var got []string
	for _, ip := range loadPool {
		if h.holderHas("eip0", ip) {
			got = append(got, ip)
		}
	}
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: eip0 holds %v, but the live attachments hold %v", when, got, want)
	}
}
