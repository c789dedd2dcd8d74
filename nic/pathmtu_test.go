package nic

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestRoCEMTU(t *testing.T) {
	tests := []struct{ ifMTU, want int }{
		{1500, 1024}, // rxe's active_mtu on the lab's Ethernet
		{9000, 4096}, // and with LAB_MTU=9000
		{65536, 4096},
		{1104, 1024},
		{1103, 512},
		{576, 256},
		{335, 0},
	}
	for _, tt := range tests {
		if got := RoCEMTU(tt.ifMTU); got != tt.want {
			t.Errorf("RoCEMTU(%d) = %d, want %d", tt.ifMTU, got, tt.want)
		}
	}
}

// On loopback (MTU 65536) the path MTU is the device's cap; a device
// listening on every interface finds its source address and MTU per peer.
func TestPathMTU(t *testing.T) {
	if m, err := LocalMTU(netip.MustParseAddr("127.0.0.1")); err != nil || m != 4096 {
		t.Errorf("LocalMTU(127.0.0.1) = %d, %v; want 4096 (lo carries 64 KiB)", m, err)
	}
	if m, err := LocalMTU(netip.MustParseAddr("127.0.0.2")); err != nil || m != 4096 {
		t.Errorf("LocalMTU(127.0.0.2) = %d, %v; want 4096 (lo holds 127.0.0.1/8)", m, err)
	}
	if _, err := LocalMTU(netip.MustParseAddr("198.51.100.77")); err == nil {
		t.Error("LocalMTU of an address no interface has: no error")
	}
	peer := netip.MustParseAddrPort("127.0.0.1:4791")
	for _, tc := range []struct {
		addr    string
		cap     int
		want    int
		wantSrc string
	}{
		{"127.0.0.1:0", 0, 4096, "127.0.0.1"},
		{"127.0.0.1:0", 1024, 1024, "127.0.0.1"},
		{"0.0.0.0:0", 0, 4096, "127.0.0.1"},
		{"0.0.0.0:0", 512, 512, "127.0.0.1"},
	} {
		t.Run(fmt.Sprintf("%s cap %d", tc.addr, tc.cap), func(t *testing.T) {
			d, err := Open(Config{Addr: netip.MustParseAddrPort(tc.addr), MTU: tc.cap, Embed: true})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if got := d.PathMTU(peer); got != tc.want {
				t.Errorf("PathMTU(%v) = %d, want %d", peer, got, tc.want)
			}
			if got := d.prov.(*embeddedDevice).sourceFor(peer).Addr().String(); got != tc.wantSrc {
				t.Errorf("source toward %v: %s, want %s", peer, got, tc.wantSrc)
			}
		})
	}
}
