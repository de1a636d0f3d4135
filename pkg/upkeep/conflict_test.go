package upkeep

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"

	"github.com/external-ip/external-ip/pkg/announce"
)

var (
	nodeMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	rogueMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x66}
	held4    = netip.MustParseAddr("192.0.2.50")
	held6    = netip.MustParseAddr("2001:db8::50")
)

// fakeRecorder keeps what the upkeep recorded.
type fakeRecorder struct {
	held      []HeldIP
	announced map[string]int
	repaired  map[string]int
	began     []string
	ended     []string
}

func newFakeRecorder() *fakeRecorder {
	return &fakeRecorder{announced: map[string]int{}, repaired: map[string]int{}}
}

func (r *fakeRecorder) Held(h []HeldIP)             { r.held = h }
func (r *fakeRecorder) Announced(up, reason string) { r.announced[up+" "+reason]++ }
func (r *fakeRecorder) Repaired(kind string)        { r.repaired[kind]++ }
func (r *fakeRecorder) ConflictBegan(ip netip.Addr, m net.HardwareAddr) {
	r.began = append(r.began, ip.String()+" "+m.String())
}
func (r *fakeRecorder) ConflictEnded(ip netip.Addr, m net.HardwareAddr) {
	r.ended = append(r.ended, ip.String()+" "+m.String())
}

// conflictCase is a conflicts holding held4 and held6 on up0, its log, and
// the defences it asked for.
type conflictCase struct {
	c       *conflicts
	rec     *fakeRecorder
	logs    *bytes.Buffer
	defends []HeldIP
	t0      time.Time
}

func newConflictCase() *conflictCase {
	k := &conflictCase{rec: newFakeRecorder(), logs: &bytes.Buffer{}, t0: time.Unix(1e9, 0)}
	k.c = newConflicts(slog.New(slog.NewJSONHandler(k.logs, nil)), k.rec, func(h HeldIP) { k.defends = append(k.defends, h) })
	k.c.setHeld([]HeldIP{{IP: held4, Uplink: "up0", Device: "eip0", Holders: 1}, {IP: held6, Uplink: "up0", Device: "eip0", Holders: 2}},
		map[string]net.HardwareAddr{"up0": nodeMAC}, []net.HardwareAddr{nodeMAC}, k.t0)
	return k
}

func (k *conflictCase) at(sec float64) time.Time {
	return k.t0.Add(time.Duration(sec * float64(time.Second)))
}

func arpFrame(t *testing.T, op arp.Operation, mac net.HardwareAddr, sender, target netip.Addr) []byte {
	t.Helper()
	p, err := arp.NewPacket(op, mac, sender, net.HardwareAddr{0, 0, 0, 0, 0, 0}, target)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := p.MarshalBinary()
	f, err := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: mac, EtherType: ethernet.EtherTypeARP, Payload: payload}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// naFrame is an unsolicited NA for ip with mac as its target link-layer
// address, in an IPv6 packet with the given hop limit, in an Ethernet frame.
func naFrame(t *testing.T, mac net.HardwareAddr, ip netip.Addr, hops byte) []byte {
	t.Helper()
	msg, err := announce.UnsolicitedNA(mac, ip, false)
	if err != nil {
		t.Fatal(err)
	}
	h := make([]byte, ipv6HeaderLen)
	h[0] = 6 << 4
	binary.BigEndian.PutUint16(h[4:6], uint16(len(msg)))
	h[6], h[7] = 58, hops
	copy(h[8:24], netip.MustParseAddr("fe80::66").AsSlice())
	copy(h[24:40], netip.MustParseAddr("ff02::1").AsSlice())
	f, err := (&ethernet.Frame{Destination: net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, Source: mac,
		EtherType: ethernet.EtherTypeIPv6, Payload: append(h, msg...)}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestEveryKindOfClaimOnAHeldIPIsSeen(t *testing.T) {
	other := netip.MustParseAddr("192.0.2.1")
	grat, _ := announce.GratuitousARP(rogueMAC, held4)
	for _, tc := range []struct {
		name  string
		frame func(t *testing.T) []byte
		ip    netip.Addr
	}{
		{"gratuitous request", func(*testing.T) []byte { return grat[0] }, held4},
		{"gratuitous reply", func(*testing.T) []byte { return grat[1] }, held4},
		{"request with our IP as sender", func(t *testing.T) []byte { return arpFrame(t, arp.OperationRequest, rogueMAC, held4, other) }, held4},
		{"reply with our IP as sender", func(t *testing.T) []byte { return arpFrame(t, arp.OperationReply, rogueMAC, held4, other) }, held4},
		{"neighbour advertisement", func(t *testing.T) []byte { return naFrame(t, rogueMAC, held6, 255) }, held6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newConflictCase()
			k.c.seen("up0", tc.frame(t), k.at(0))
			want := tc.ip.String() + " " + rogueMAC.String()
			if len(k.rec.began) != 1 || k.rec.began[0] != want {
				t.Errorf("conflicts began: %v, want [%s]", k.rec.began, want)
			}
			if len(k.defends) != 1 || k.defends[0].IP != tc.ip {
				t.Errorf("defences: %v, want one of %s", k.defends, tc.ip)
			}
		})
	}
}

func TestWhatIsNotAClaimIsIgnored(t *testing.T) {
	unheld := netip.MustParseAddr("192.0.2.99")
	own, _ := announce.GratuitousARP(nodeMAC, held4)
	for _, tc := range []struct {
		name   string
		uplink string
		frame  func(t *testing.T) []byte
	}{
		{"the node's own announcement", "up0", func(*testing.T) []byte { return own[0] }},
		{"an IP we do not hold", "up0", func(t *testing.T) []byte { return arpFrame(t, arp.OperationReply, rogueMAC, unheld, unheld) }},
		{"a probe for our IP (sender 0.0.0.0)", "up0", func(t *testing.T) []byte {
			return arpFrame(t, arp.OperationRequest, rogueMAC, netip.IPv4Unspecified(), held4)
		}},
		{"a request for our IP from another sender", "up0", func(t *testing.T) []byte {
			return arpFrame(t, arp.OperationRequest, rogueMAC, netip.MustParseAddr("192.0.2.7"), held4)
		}},
		{"a claim heard on another uplink", "up1", func(t *testing.T) []byte { return arpFrame(t, arp.OperationReply, rogueMAC, held4, held4) }},
		{"a routed advertisement (hop limit 64)", "up0", func(t *testing.T) []byte { return naFrame(t, rogueMAC, held6, 64) }},
		{"the node's own advertisement", "up0", func(t *testing.T) []byte { return naFrame(t, nodeMAC, held6, 255) }},
		{"a runt", "up0", func(*testing.T) []byte { return []byte{1, 2, 3} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newConflictCase()
			k.c.seen(tc.uplink, tc.frame(t), k.at(0))
			if len(k.rec.began) != 0 || len(k.defends) != 0 || k.logs.Len() != 0 {
				t.Errorf("taken for a conflict: began %v, defences %v, log %s", k.rec.began, k.defends, k.logs)
			}
		})
	}
}

func TestAnEpisodeIsLoggedOnceWithBothMACs(t *testing.T) {
	k := newConflictCase()
	grat, _ := announce.GratuitousARP(rogueMAC, held4)
	for i := range 5 {
		k.c.seen("up0", grat[i%2], k.at(float64(i)))
	}
	lines := strings.Split(strings.TrimSpace(k.logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], rogueMAC.String()) || !strings.Contains(lines[0], nodeMAC.String()) ||
		!strings.Contains(lines[0], held4.String()) {
		t.Errorf("five claims in one episode logged as:\n%s\nwant one line naming %s, theirs %s and ours %s", k.logs, held4, rogueMAC, nodeMAC)
	}
	if len(k.rec.began) != 1 {
		t.Errorf("one episode began %d times: %v", len(k.rec.began), k.rec.began)
	}
}

// RFC 5227 section 2.4 (b): one announcement, then none within
// DEFEND_INTERVAL (10 s) of the last.
func TestDefenceIsOneRoundThenAtMostOneEveryTenSeconds(t *testing.T) {
	k := newConflictCase()
	grat, _ := announce.GratuitousARP(rogueMAC, held4)
	var at []float64
	for _, s := range []float64{0, 1, 5, 9.9, 10, 12, 19.9, 20, 35} {
		before := len(k.defends)
		k.c.seen("up0", grat[0], k.at(s))
		if len(k.defends) > before {
			at = append(at, s)
		}
	}
	want := []float64{0, 10, 20, 35}
	if len(at) != len(want) {
		t.Fatalf("defended at %v s, want %v s", at, want)
	}
	for i := range want {
		if at[i] != want[i] {
			t.Errorf("defended at %v s, want %v s", at, want)
		}
	}
}

func TestAnEpisodeEndsWhenTheIPIsReleasedOrTheClaimantFallsQuiet(t *testing.T) {
	k := newConflictCase()
	grat, _ := announce.GratuitousARP(rogueMAC, held4)
	k.c.seen("up0", naFrame(t, rogueMAC, held6, 255), k.at(0))
	k.c.seen("up0", grat[0], k.at(0))
	ups, ours := map[string]net.HardwareAddr{"up0": nodeMAC}, []net.HardwareAddr{nodeMAC}
	// held6 released, held4 still held and its claimant heard a minute ago.
	k.c.setHeld([]HeldIP{{IP: held4, Uplink: "up0", Device: "eip0", Holders: 1}}, ups, ours, k.at(60))
	if len(k.rec.ended) != 1 || k.rec.ended[0] != held6.String()+" "+rogueMAC.String() {
		t.Fatalf("after releasing %s: ended %v, want only its episode", held6, k.rec.ended)
	}
	k.c.setHeld([]HeldIP{{IP: held4, Uplink: "up0", Device: "eip0", Holders: 1}}, ups, ours, k.at(episodeQuiet.Seconds()))
	if len(k.rec.ended) != 2 {
		t.Fatalf("a claimant quiet for %s: ended %v, want its episode over", episodeQuiet, k.rec.ended)
	}
	k.c.seen("up0", grat[0], k.at(episodeQuiet.Seconds()+1))
	if len(k.rec.began) != 3 || strings.Count(k.logs.String(), "claims a held IP") != 3 {
		t.Errorf("a claim after the episode ended must begin a new one, logged: began %v\n%s", k.rec.began, k.logs)
	}
}
