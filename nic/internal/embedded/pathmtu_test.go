package embedded_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/embedded"
)

// On loopback (MTU 65536) the path MTU is the device's cap; a device
// listening on every interface finds its source address and MTU per peer.
func TestPathMTU(t *testing.T) {
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
			d, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort(tc.addr), MTU: tc.cap, Embed: true})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if got := d.PathMTU(peer); got != tc.want {
				t.Errorf("PathMTU(%v) = %d, want %d", peer, got, tc.want)
			}
			if got := embedded.SourceFor(device(d), peer).Addr().String(); got != tc.wantSrc {
				t.Errorf("source toward %v: %s, want %s", peer, got, tc.wantSrc)
			}
		})
	}
}
