package nicbench_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/verbs"
)

// Two devices on loopback, an initiator on one and a target on the
// other, and a few workloads: what softnic bench --one-process does, with
// figures that depend on the machine (so this example prints what ran,
// not how fast).
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
	t, err := nicbench.NewDeviceTarget(devs[1])
	if err != nil {
		fmt.Println(err)
		return
	}
	in, err := nicbench.Dial(devs[0], t, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	clear(t.MR.Bytes()[:nicbench.LargeSize]) // the first WRITE's target
	n, _, err := in.Throughput(verbs.WRWrite, nicbench.LargeSize, nicbench.Window, 1, nicbench.Poll, nicbench.Limit{Ops: 100})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d WRITEs of %d KiB\n", n, nicbench.LargeSize>>10)
	// The first WRITE put the initiator's first 64 KiB at the start of
	// the target's region.
	fmt.Println("the target holds the data:", string(t.MR.Bytes()[:nicbench.LargeSize]) == string(in.MR.Bytes()[:nicbench.LargeSize]))

	w, _ := nicbench.Lookup("read_8_wait")
	f, err := w.Run(in, nicbench.Limit{Ops: 100}, make([]time.Duration, 1000))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d round trips, p99 no shorter than the median: %v\n", w.Name, f.Ops, f.P99 >= f.Value && f.Value > 0)

	if n, _, err = in.FetchAdd(16, nicbench.Wait, nicbench.Limit{Ops: 100}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(n, "FETCH_ADDs done")
	// Output:
	// 100 WRITEs of 64 KiB
	// the target holds the data: true
	// read 8B latency wait: 100 round trips, p99 no shorter than the median: true
	// 100 FETCH_ADDs done
}
