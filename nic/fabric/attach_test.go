package fabric_test

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/fabric"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// TestAttachedEndpointReleasesCQ: an attached endpoint's CQ, with its ring
// and descriptors on both sides, goes when the endpoint closes, and when
// NewEndpoint fails after making it: opening and closing endpoints does
// not accumulate descriptors until detach.
func TestAttachedEndpointReleasesCQ(t *testing.T) {
	tests := []struct {
		name string
		open func(pd *nic.PD) error
	}{
		{"open and close", func(pd *nic.PD) error {
			ep, err := fabric.NewEndpoint(pd, fabric.EndpointConfig{})
			if err != nil {
				return err
			}
			return ep.Close()
		}},
		{"the QP fails", func(pd *nic.PD) error {
			// The CQ is made first; the QP refuses the SGE count.
			if _, err := fabric.NewEndpoint(pd, fabric.EndpointConfig{IOVLimit: 1000}); !errors.Is(err, fabric.ErrInvalid) {
				return fmt.Errorf("NewEndpoint with 1000 SGEs: %v, want ErrInvalid", err)
			}
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := nictest.NewDaemon(t, nil).Client
			pd, err := dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.open(pd); err != nil { // a first round settles lazily opened descriptors
				t.Fatal(err)
			}
			// Without collections, a descriptor left open in an *os.File
			// that nothing references counts: its finalizer would close it.
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			before := openDescriptors(t)
			for range 20 {
				if err := tc.open(pd); err != nil {
					t.Fatal(err)
				}
			}
			if left := descriptorsLeft(t, before); left != nil {
				t.Errorf("%d descriptors more than before 20 endpoints, 5 s after: %q", len(left), left)
			}
		})
	}
}

// TestEndpointFlushedAfterClose: the operations in flight when an endpoint
// closes, and its receives, complete with WR_FLUSH_ERR, and Poll and Wait
// return those completions, then ErrClosed, embedded and attached alike; a
// Wait under way when Close comes gets them too.
func TestEndpointFlushedAfterClose(t *testing.T) {
	modes := []struct {
		name string
		open func(t *testing.T) *nic.Device
	}{
		{"embedded", func(t *testing.T) *nic.Device { return nictest.OpenDevice(t, nic.Config{}) }},
		{"attached", func(t *testing.T) *nic.Device { return nictest.NewDaemon(t, nil).Client }},
	}
	reapers := []struct {
		name string
		// reap closes ep and returns the completions it reaps after.
		reap func(t *testing.T, ep *fabric.Endpoint) []fabric.Completion
	}{
		{"poll after close", func(t *testing.T, ep *fabric.Endpoint) []fabric.Completion {
			if err := ep.Close(); err != nil {
				t.Fatal(err)
			}
			var got []fabric.Completion
			for {
				var cs [1]fabric.Completion // one at a time, so that the rest wait their turn
				n, err := ep.Poll(cs[:])
				got = append(got, cs[:n]...)
				if err != nil {
					if !errors.Is(err, fabric.ErrClosed) {
						t.Errorf("Poll: %v, want ErrClosed once reaped", err)
					}
					return got
				}
				if n == 0 {
					t.Fatal("Poll found nothing after Close, and no ErrClosed")
				}
			}
		}},
		{"wait across close", func(t *testing.T, ep *fabric.Endpoint) []fabric.Completion {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			type result struct {
				cs  [4]fabric.Completion
				n   int
				err error
			}
			waited := make(chan result, 1)
			go func() {
				var r result
				r.n, r.err = ep.Wait(ctx, r.cs[:])
				waited <- r
			}()
			time.Sleep(50 * time.Millisecond) // let Wait sleep, mostly
			if err := ep.Close(); err != nil {
				t.Fatal(err)
			}
			r := <-waited
			if r.err != nil {
				t.Fatalf("Wait across Close: %v", r.err)
			}
			got := r.cs[:r.n]
			for {
				var cs [4]fabric.Completion
				n, err := ep.Wait(ctx, cs[:])
				got = append(got, cs[:n]...)
				if err != nil {
					if !errors.Is(err, fabric.ErrClosed) {
						t.Errorf("Wait: %v, want ErrClosed once reaped", err)
					}
					return got
				}
			}
		}},
	}
	// A receive alone waits, attached, in its ring: no doorbell takes it
	// into the daemon's QP before Close does.
	workloads := []struct {
		name  string
		write bool
	}{
		{"write and receive", true},
		{"receive", false},
	}
	for _, mode := range modes {
		for _, rp := range reapers {
			for _, wl := range workloads {
				t.Run(mode.name+"/"+rp.name+"/"+wl.name, func(t *testing.T) {
					nictest.CheckLeaks(t)
					dev := mode.open(t)
					pd, err := dev.AllocPD()
					if err != nil {
						t.Fatal(err)
					}
					m, err := pd.AllocMR(4096, mr.LocalWrite)
					if err != nil {
						t.Fatal(err)
					}
					ep, err := fabric.NewEndpoint(pd, fabric.EndpointConfig{})
					if err != nil {
						t.Fatal(err)
					}
					// A peer device without the QP: the write is retried until
					// Close flushes it.
					peer := nictest.OpenDevice(t, nic.Config{})
					if err := ep.QP().Connect(peer.Addr(), 0xabcd, nic.ConnectOptions{}); err != nil {
						t.Fatal(err)
					}
					want := []string{"recv"}
					if wl.write {
						if err := ep.Write(m.Bytes()[:64], m, 0x1000, 1, "write"); err != nil {
							t.Fatal(err)
						}
						want = []string{"write", "recv"}
					}
					if err := ep.Recv(nil, nil, "recv"); err != nil {
						t.Fatal(err)
					}
					got := rp.reap(t, ep)
					if len(got) != len(want) {
						t.Fatalf("%d completions after Close (%+v), want %v's", len(got), got, want)
					}
					for i, c := range got {
						flags := fabric.FIMsg | fabric.FIRecv
						if want[i] == "write" {
							flags = fabric.FIRMA | fabric.FIWrite
						}
						checkCompletion(t, c, want[i], flags, 0, fabric.StatusError(verbs.WRFlushErr))
					}
					if err := ep.Close(); err != nil {
						t.Errorf("second Close: %v", err)
					}
				})
			}
		}
	}
}

// TestAttachEndpoint: the fabric-style Endpoint works on an attached
// device, buffers found by address among the process's regions.
func TestAttachEndpoint(t *testing.T) {
	nictest.CheckLeaks(t)
	dev := nictest.NewDaemon(t, nil).Client
	pd, _ := dev.AllocPD()
	ep, err := fabric.NewEndpoint(pd, fabric.EndpointConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := pd.AllocMR(1<<16, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	b := openEnd(t, nic.Config{})
	if err := ep.QP().Connect(b.dev.Addr(), b.qp.Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(dev.Addr(), ep.QP().Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	copy(m.Bytes()[100:], "endpoint data")
	if err := ep.Write(m.Bytes()[100:113], nil, b.mr.Addr()+8, uint64(b.mr.RKey()), "w"); err != nil {
		t.Fatal(err)
	}
	if err := ep.Read(m.Bytes()[200:213], nil, b.mr.Addr()+8, uint64(b.mr.RKey()), "r"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []any
	for len(got) < 2 {
		var cs [2]fabric.Completion
		n, err := ep.Wait(ctx, cs[:])
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs[:n] {
			if c.Err != nil {
				t.Fatalf("completion %+v", c)
			}
			got = append(got, c.Context)
		}
	}
	if string(m.Bytes()[200:213]) != "endpoint data" || got[0] != "w" || got[1] != "r" {
		t.Errorf("read back %q, contexts %v", m.Bytes()[200:213], got)
	}
	if err := ep.Write(make([]byte, 8), nil, b.mr.Addr(), uint64(b.mr.RKey()), nil); !errors.Is(err, fabric.ErrInvalid) {
		t.Errorf("Write of a buffer in no region: %v, want ErrInvalid", err)
	}
}
