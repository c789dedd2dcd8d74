package nic_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/qp"
)

// openDescriptors counts the process's open descriptors: an attached
// device's and, the daemon running in the test, its daemon's.
func openDescriptors(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no descriptor count: %v", err)
	}
	return len(fds)
}

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
			ep, err := pd.NewEndpoint(nic.EndpointConfig{})
			if err != nil {
				return err
			}
			return ep.Close()
		}},
		{"the QP fails", func(pd *nic.PD) error {
			// The CQ is made first; the QP refuses the SGE count.
			if _, err := pd.NewEndpoint(nic.EndpointConfig{IOVLimit: 1000}); !errors.Is(err, nic.ErrInvalid) {
				return fmt.Errorf("NewEndpoint with 1000 SGEs: %v, want ErrInvalid", err)
			}
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := attachTo(t, startDaemon(t, nic.Config{}))
			pd, err := dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.open(pd); err != nil { // a first round settles lazily opened descriptors
				t.Fatal(err)
			}
			before := openDescriptors(t)
			for range 20 {
				if err := tc.open(pd); err != nil {
					t.Fatal(err)
				}
			}
			if after := openDescriptors(t); after > before {
				t.Errorf("%d descriptors open after 20 endpoints, %d before", after, before)
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
		{"embedded", func(t *testing.T) *nic.Device { return openDevice(t, nic.Config{}) }},
		{"attached", func(t *testing.T) *nic.Device { return attachTo(t, startDaemon(t, nic.Config{})) }},
	}
	reapers := []struct {
		name string
		// reap closes ep and returns the completions it reaps after.
		reap func(t *testing.T, ep *nic.Endpoint) []nic.Completion
	}{
		{"poll after close", func(t *testing.T, ep *nic.Endpoint) []nic.Completion {
			if err := ep.Close(); err != nil {
				t.Fatal(err)
			}
			var got []nic.Completion
			for {
				var cs [1]nic.Completion // one at a time, so that the rest wait their turn
				n, err := ep.Poll(cs[:])
				got = append(got, cs[:n]...)
				if err != nil {
					if !errors.Is(err, nic.ErrClosed) {
						t.Errorf("Poll: %v, want ErrClosed once reaped", err)
					}
					return got
				}
				if n == 0 {
					t.Fatal("Poll found nothing after Close, and no ErrClosed")
				}
			}
		}},
		{"wait across close", func(t *testing.T, ep *nic.Endpoint) []nic.Completion {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			type result struct {
				cs  [4]nic.Completion
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
				var cs [4]nic.Completion
				n, err := ep.Wait(ctx, cs[:])
				got = append(got, cs[:n]...)
				if err != nil {
					if !errors.Is(err, nic.ErrClosed) {
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
					checkLeaks(t)
					dev := mode.open(t)
					pd, err := dev.AllocPD()
					if err != nil {
						t.Fatal(err)
					}
					m, err := pd.AllocMR(4096, mr.LocalWrite)
					if err != nil {
						t.Fatal(err)
					}
					ep, err := pd.NewEndpoint(nic.EndpointConfig{})
					if err != nil {
						t.Fatal(err)
					}
					// A peer device without the QP: the write is retried until
					// Close flushes it.
					peer := openDevice(t, nic.Config{})
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
						flags := nic.FIMsg | nic.FIRecv
						if want[i] == "write" {
							flags = nic.FIRMA | nic.FIWrite
						}
						checkCompletion(t, c, want[i], flags, 0, nic.StatusError(qp.WRFlushErr))
					}
					if err := ep.Close(); err != nil {
						t.Errorf("second Close: %v", err)
					}
				})
			}
		}
	}
}
