// Examples cannot skip, and this one needs attach mode: it is built where
// attach mode works, as nic.AttachSupported and nictest.MustHaveAttach
// know it (nic/shm's memfd_linux.go).

//go:build linux && !softnic_portable

package attachd_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
	"github.com/softnic/softnic/verbs"
)

// ExampleServer runs a daemon's device and attaches to it, as a
// program does to softnic serve: the attached device has the same API, its
// region lives in memory the daemon maps too, and the daemon's device
// moves the data (here between two QPs of the process, connected through
// it).
func ExampleServer() {
	dir, _ := os.MkdirTemp("", "softnic")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "softnic.sock")

	// The daemon: a device, served on a unix socket.
	daemon := must(nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Embed: true}))
	defer daemon.Close()
	srv := attachd.NewServer(daemon, attachd.Config{})
	defer srv.Close()
	l := must(net.Listen("unix", sock))
	defer l.Close()
	go srv.Serve(l)

	// A process attached to it (SOFTNIC_SOCKET=sock does the same for
	// nic.Config{}).
	dev := must(nic.Open(nic.Config{Attach: sock}))
	defer dev.Close()
	pd, cq := must(dev.AllocPD()), must(dev.CreateCQ(16))
	region := must(pd.AllocMR(4096, mr.LocalWrite|mr.RemoteWrite))
	a := must(pd.CreateQP(nic.QPConfig{SendCQ: cq}))
	b := must(pd.CreateQP(nic.QPConfig{SendCQ: cq}))
	must(0, a.Connect(dev.Addr(), b.Num(), nic.ConnectOptions{}))
	must(0, b.Connect(dev.Addr(), a.Num(), nic.ConnectOptions{}))

	copy(region.Bytes(), "through the daemon")
	wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{region.SGE(0, 18)},
		RemoteAddr: region.Addr() + 1024, RKey: region.RKey()}
	must(0, a.PostSend(&wr))
	wc := make([]verbs.WC, 1)
	must(cq.Wait(context.Background(), wc))
	fmt.Println(wc[0].Opcode, wc[0].Status)
	fmt.Printf("%s\n", region.Bytes()[1024:1042])
	fmt.Println(len(srv.Processes()), "process attached")
	// Output:
	// RDMA_WRITE SUCCESS
	// through the daemon
	// 1 process attached
}

// must is the example's error handling: a failure ends it.
func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}
