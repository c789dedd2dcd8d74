package nic_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/qp"
)

// limitsWith returns the default limits with key set to n.
func limitsWith(t testing.TB, key string, n int64) *quota.Limits {
	t.Helper()
	l := quota.DefaultLimits(quota.Probe(1 << 14))
	if err := l.Set(key, n); err != nil {
		t.Fatal(err)
	}
	return &l
}

// serveLimited serves a device with the default limits changed by
// settings (key, value pairs) and returns its server and socket path.
func serveLimited(t *testing.T, settings ...any) *daemon {
	t.Helper()
	l := quota.DefaultLimits(quota.Probe(1 << 14))
	for i := 0; i < len(settings); i += 2 {
		if err := l.Set(settings[i].(string), int64(settings[i+1].(int))); err != nil {
			t.Fatal(err)
		}
	}
	return startServer(t, nic.Config{}, attachd.Config{Limits: &l, LimitFlag: "softnic serve --limit"})
}

// released waits until the processes that attached to d have released
// everything (detaching is the daemon's to finish), and fails t if not.
func released(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		u := d.srv.Usage()
		if u.Total == (quota.Bill{}) && len(u.Processes) == 0 && len(u.Users) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left charged after detaching: total %v, processes %+v", u.Total, u.Processes)
		}
		time.Sleep(time.Millisecond)
	}
}

// refusal checks that err refuses limit (scope.resource) with errno,
// naming the setting that raises it.
func refusal(t *testing.T, what string, err error, limit string, errno error) {
	t.Helper()
	var le *quota.LimitError
	if !errors.As(err, &le) && !strings.Contains(fmt.Sprint(err), limit) {
		t.Errorf("%s: %v, want a refusal at %s", what, err, limit)
		return
	}
	if !errors.Is(err, errno) || !strings.Contains(err.Error(), "softnic serve --limit "+limit+"=N raises it") {
		t.Errorf("%s: %v, want %v naming softnic serve --limit %s", what, err, errno, limit)
	}
}

// TestAttachLimits: each limit of a process holds at its value, refuses
// with its errno and a message naming it, counts the refusal, and what
// the process held is released when it detaches.
func TestAttachLimits(t *testing.T) {
	tests := []struct {
		name     string
		settings []any
		limit    string
		errno    error
		// attack makes what the limit bounds until it is refused, and
		// returns the refusal and how many were made.
		attack func(t *testing.T, d *daemon) (int, error)
		want   int
	}{
		{"sessions", []any{"process.sessions", 3}, "process.sessions", nic.ErrAgain, func(t *testing.T, d *daemon) (int, error) {
			for n := 0; ; n++ {
				dev, err := nic.Open(nic.Config{Attach: d.path})
				if err != nil {
					return n, err
				}
				t.Cleanup(func() { dev.Close() })
			}
		}, 3},
		{"QPs", []any{"process.qps", 5}, "process.qps", nic.ErrNoMem, func(t *testing.T, d *daemon) (int, error) {
			e := attachedEnd(t, d) // with a QP
			for n := 0; ; n++ {
				if _, err := e.pd.CreateQP(nic.QPConfig{SendCQ: e.cq, MaxSendWR: 1, MaxRecvWR: 1}); err != nil {
					return n, err
				}
			}
		}, 4},
		{"mappings", []any{"process.mappings", 40}, "process.mappings", nic.ErrNoMem, func(t *testing.T, d *daemon) (int, error) {
			e := attachedEnd(t, d) // a doorbell page, a CQ ring, a region and a QP's two rings
			for n := 0; ; n++ {
				if _, err := e.pd.AllocMR(4096, mr.LocalWrite); err != nil {
					return n, err
				}
			}
		}, 35},
		{"CQ entries", []any{"uid.cq_entries", 1 << 10}, "uid.cq_entries", nic.ErrNoMem, func(t *testing.T, d *daemon) (int, error) {
			dev := attachTo(t, d)
			for n := 0; ; n++ {
				if _, err := dev.CreateCQ(256); err != nil {
					return n, err
				}
			}
		}, 4},
		{"heap", []any{"process.heap", 64 << 20}, "process.heap", nic.ErrNoMem, func(t *testing.T, d *daemon) (int, error) {
			dev := attachTo(t, d)
			_, err := dev.CreateCQ(qp.MaxCQE) // 256 MiB of completions
			return 0, err
		}, 0},
		{"waiting calls", []any{"process.waits", 4}, "process.waits", nic.ErrAgain, func(t *testing.T, d *daemon) (int, error) {
			e := attachedEnd(t, d)
			l, err := e.dev.Listen(0, nic.ListenOptions{PD: e.pd, QP: nic.QPConfig{SendCQ: e.cq}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			errs := make(chan error, 16)
			for range 16 {
				go func() {
					_, err := l.AcceptRequest(ctx)
					errs <- err
				}()
			}
			// The calls past the limit fail at once; those within it wait,
			// each charged.
			var refused error
			for range 12 {
				if refused = <-errs; !errors.Is(refused, nic.ErrAgain) {
					return 0, refused
				}
			}
			return int(d.srv.Usage().Total[quota.Waits]), refused
		}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := serveLimited(t, tt.settings...)
			t.Run("attack", func(t *testing.T) {
				n, err := tt.attack(t, d)
				refusal(t, tt.name, err, tt.limit, tt.errno)
				if n != tt.want {
					t.Errorf("%d made before the refusal, want %d", n, tt.want)
				}
				if u := d.srv.Usage(); len(u.Processes) != 1 || u.Processes[0].Refused == 0 {
					t.Errorf("processes %+v, want the one refused and counted", u.Processes)
				}
			})
			released(t, d)
		})
	}
}
