package nicbench_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/qp"
)

// Two devices on loopback, a pair between them, and each workload once:
// what softnic bench does, with figures that depend on the machine (so
// this example prints what ran, not how fast).
func Example() {
	var devs [2]*nic.Device
	for i := range devs {
		d, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Embed: true})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer d.Close()
		devs[i] = d
	}
	p, err := nicbench.NewPair(devs[0], devs[1], nicbench.StreamDepth)
	if err != nil {
		fmt.Println(err)
		return
	}
	clear(p.MB.Bytes()[:nicbench.StreamSize]) // the first WRITE's target
	if _, err := p.Transfer(qp.WRWrite, 100); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("100 WRITEs of %d KiB\n", nicbench.StreamSize>>10)
	// The first WRITE put a's first 64 KiB at the start of b's region.
	fmt.Println("b holds a's data:", string(p.MB.Bytes()[:nicbench.StreamSize]) == string(p.MA.Bytes()[:nicbench.StreamSize]))

	rtts := make([]time.Duration, 100)
	if err := p.Write8(rtts, false); err != nil {
		fmt.Println(err)
		return
	}
	l := nicbench.Percentiles(rtts)
	fmt.Println("8-byte WRITEs: p99 no shorter than the median:", l.P99 >= l.Median && l.Median > 0)

	if _, err := p.FetchAdd(100, 16); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("FETCH_ADDs done")
	// Output:
	// 100 WRITEs of 64 KiB
	// b holds a's data: true
	// 8-byte WRITEs: p99 no shorter than the median: true
	// FETCH_ADDs done
}
