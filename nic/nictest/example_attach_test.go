// Examples cannot skip, and this one needs attach mode: it is built where
// attach mode works, as nic.AttachSupported and nictest.MustHaveAttach
// know it (nic/shm's memfd_linux.go).

//go:build linux && !softnic_portable

package nictest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// A daemon and a process attached to it, as softnic serve and a program
// linked with nic: the client's packets leave through the daemon's
// device, whose recorder sees them.
func ExampleStartDaemon() {
	d, err := nictest.StartDaemon(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	pd, err := d.Client.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	cq, err := d.Client.CreateCQ(4)
	if err != nil {
		log.Fatal(err)
	}
	q, err := pd.CreateQP(nic.QPConfig{SendCQ: cq})
	if err != nil {
		log.Fatal(err)
	}
	// The QP talks to itself through the daemon.
	if err := q.Connect(d.Client.Addr(), q.Num(), nic.ConnectOptions{}); err != nil {
		log.Fatal(err)
	}
	m, err := pd.AllocMR(64, nictest.Access)
	if err != nil {
		log.Fatal(err)
	}
	if err := q.PostSend(&verbs.SendWR{Opcode: verbs.WRFetchAdd, Flags: verbs.Signaled, SGL: []verbs.SGE{m.SGE(0, 8)},
		RemoteAddr: m.Addr() + 8, RKey: m.RKey(), CompareAdd: 5}); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wc [1]verbs.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil {
		log.Fatal(err)
	}
	ack, err := d.Recorder.Wait(ctx, func(pk *nictest.Packet) bool { return pk.Dir == nic.Sent && pk.OpCode == wire.OpRCAtomicAck })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(wc[0].Status, ack.OpCode)
	// Output: SUCCESS RC Atomic Acknowledge
}
