package nic

import (
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

// The RoCE MTU of loopback's addresses is 4096 (lo carries 64 KiB).
func TestLocalMTU(t *testing.T) {
	if m, err := LocalMTU(netip.MustParseAddr("127.0.0.1")); err != nil || m != 4096 {
		t.Errorf("LocalMTU(127.0.0.1) = %d, %v; want 4096 (lo carries 64 KiB)", m, err)
	}
	if m, err := LocalMTU(netip.MustParseAddr("127.0.0.2")); err != nil || m != 4096 {
		t.Errorf("LocalMTU(127.0.0.2) = %d, %v; want 4096 (lo holds 127.0.0.1/8)", m, err)
	}
	if _, err := LocalMTU(netip.MustParseAddr("198.51.100.77")); err == nil {
		t.Error("LocalMTU of an address no interface has: no error")
	}
}
