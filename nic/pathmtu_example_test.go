package nic_test

import (
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softnic/softnic/nic"
)

// The path MTU rxe picks for a network interface's MTU: the largest RoCE
// MTU whose packets, with their IP, UDP and InfiniBand headers, fit.
func ExampleRoCEMTU() {
	for _, ifMTU := range []int{1500, 9000, 576} {
		fmt.Printf("interface MTU %d: path MTU %d\n", ifMTU, nic.RoCEMTU(ifMTU))
	}
	// Output:
	// interface MTU 1500: path MTU 1024
	// interface MTU 9000: path MTU 4096
	// interface MTU 576: path MTU 256
}

// A device takes the path MTU toward each peer from the route there;
// Config.MTU caps it. Loopback carries 64 KiB, so the cap decides.
func ExampleDevice_PathMTU() {
	dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), MTU: 2048})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	fmt.Println(dev.PathMTU(netip.MustParseAddrPort("127.0.0.1:4791")))
	// Output: 2048
}

// A daemon that serves peers it does not know bounds what their connection
// requests may hold: at most 64 requests whose handshake has not completed,
// 8 from one address, each for at most 5 s.
func ExampleCMLimits() {
	dev, err := nic.Open(nic.Config{
		Addr: netip.MustParseAddrPort("127.0.0.1:0"),
		CM:   nic.CMLimits{HalfOpen: 64, HalfOpenPerSource: 8, Handshake: 5 * time.Second},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	n, _ := dev.Counter("cm_rejected_busy")
	fmt.Println("requests rejected beyond the limits:", n)
	// Output: requests rejected beyond the limits: 0
}
