package announce

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
)

var (
	testMAC = net.HardwareAddr{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}
	testIP4 = netip.MustParseAddr("198.51.100.7")
	testIP6 = netip.MustParseAddr("2001:db8::7")
)

// padding is the zero fill from a 42-byte ARP frame to the 60-byte Ethernet minimum.
var padding = make([]byte, 18)

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestGratuitousARPBuildsRequestAndReplyPerRFC5227(t *testing.T) {
	request := join(
		[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // Ethernet dst: broadcast
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // Ethernet src: uplink MAC
		[]byte{0x08, 0x06},                         // ethertype: ARP
		[]byte{0x00, 0x01},                         // htype: Ethernet
		[]byte{0x08, 0x00},                         // ptype: IPv4
		[]byte{0x06},                               // hlen
		[]byte{0x04},                               // plen
		[]byte{0x00, 0x01},                         // op: request
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // sha: uplink MAC
		[]byte{198, 51, 100, 7},                    // spa: the external IP
		[]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, // tha: zero, as RFC 5227 asks of a request
		[]byte{198, 51, 100, 7},                    // tpa: the external IP again
		padding,
	)
	reply := join(
		[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // Ethernet dst: still broadcast
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // Ethernet src: uplink MAC
		[]byte{0x08, 0x06},                         // ethertype: ARP
		[]byte{0x00, 0x01},                         // htype: Ethernet
		[]byte{0x08, 0x00},                         // ptype: IPv4
		[]byte{0x06},                               // hlen
		[]byte{0x04},                               // plen
		[]byte{0x00, 0x02},                         // op: reply
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // sha: uplink MAC
		[]byte{198, 51, 100, 7},                    // spa: the external IP
		[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // tha: uplink MAC in the reply twin
		[]byte{198, 51, 100, 7},                    // tpa: the external IP again
		padding,
	)
	got, err := GratuitousARP(testMAC, testIP4)
	if err != nil {
		t.Fatalf("GratuitousARP(%s, %s) failed: %v", testMAC, testIP4, err)
	}
	for i, want := range [][]byte{request, reply} {
		if !bytes.Equal(got[i], want) {
			t.Errorf("frame %d differs from RFC 5227 layout\n got: % x\nwant: % x", i, got[i], want)
		}
	}
}

func TestUnsolicitedNASetsRouterFlagOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		router bool
		flags  byte
	}{
		{"host", false, 0x20},  // R=0 S=0 O=1
		{"router", true, 0xa0}, // R=1 S=0 O=1
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := join(
				[]byte{136},              // type: neighbour advertisement
				[]byte{0},                // code
				[]byte{0x00, 0x00},       // checksum: placeholder, the kernel fills it
				[]byte{tc.flags},         // flags: R, S, O are the top three bits
				[]byte{0x00, 0x00, 0x00}, // reserved
				[]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07}, // target: 2001:db8::7
				[]byte{2}, // option type: target link-layer address
				[]byte{1}, // option length: 1 unit of 8 bytes
				[]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f}, // uplink MAC
			)
			got, err := UnsolicitedNA(testMAC, testIP6, tc.router)
			if err != nil {
				t.Fatalf("UnsolicitedNA(%s, %s, %v) failed: %v", testMAC, testIP6, tc.router, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("NA differs from RFC 4861 layout\n got: % x\nwant: % x", got, want)
			}
		})
	}
}

func TestFramesRefuseAddressesOfTheWrongKind(t *testing.T) {
	short := net.HardwareAddr{0x0a, 0x1b, 0x2c}
	long := net.HardwareAddr{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		name string
		mac  net.HardwareAddr
		ip   netip.Addr
		arp  bool
	}{
		{"ARP for an IPv6 address", testMAC, testIP6, true},
		{"ARP for an IPv4-mapped IPv6 address", testMAC, netip.MustParseAddr("::ffff:198.51.100.7"), true},
		{"ARP for the zero address", testMAC, netip.Addr{}, true},
		{"ARP with a short MAC", short, testIP4, true},
		{"ARP with an 8-byte MAC", long, testIP4, true},
		{"NA for an IPv4 address", testMAC, testIP4, false},
		{"NA for an IPv4-mapped IPv6 address", testMAC, netip.MustParseAddr("::ffff:198.51.100.7"), false},
		{"NA for a zoned address", testMAC, netip.MustParseAddr("fe80::1%eth0"), false},
		{"NA for the zero address", testMAC, netip.Addr{}, false},
		{"NA with a short MAC", short, testIP6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.arp {
				_, err = GratuitousARP(tc.mac, tc.ip)
			} else {
				_, err = UnsolicitedNA(tc.mac, tc.ip, false)
			}
			if err == nil {
				t.Errorf("built a frame for mac %q ip %s; want an error", tc.mac, tc.ip)
			}
		})
	}
}
