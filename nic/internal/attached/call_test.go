package attached

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/shm"
)

// answeringDaemon answers every request of one session, each after the
// delay its op is given (none by default), in the order they came.
type answeringDaemon struct {
	delay map[string]time.Duration
}

// open starts the daemon on a socket of its own and attaches to it, the
// process's CQ waiters spinning for waitSpin.
func (d *answeringDaemon) open(t *testing.T, waitSpin time.Duration) *attachment {
	t.Helper()
	mustHaveAttach(t)
	path := filepath.Join(t.TempDir(), "answering.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		uc, err := l.AcceptUnix()
		if err != nil {
			return
		}
		defer uc.Close()
		c := shm.NewConn(uc, attachproto.MaxLine)
		if !greet(c) {
			return
		}
		for {
			line, err := c.ReadLine()
			if err != nil {
				return
			}
			var m attachproto.Msg
			if json.Unmarshal(line, &m) != nil {
				return
			}
			time.Sleep(d.delay[m.Op])
			answer, _ := json.Marshal(attachproto.Msg{ID: m.ID, Result: json.RawMessage(`{}`)})
			if c.Send(answer, nil) != nil {
				return
			}
		}
	}()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := Open(uc, path, slog.New(slog.DiscardHandler), waitSpin, noUp{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev.(*attachment)
}

// TestCallSpinsForAnswersAtOnce: a call the daemon answers at once watches
// for its answer before it sleeps, and keeps doing so while the answers
// come within the budget; two answers in a row that came past it stop the
// spinning for a while, as a CQ waiter's spins stop (package spin). Calls
// that wait for the network never spin, so their waits count for nothing,
// and a device that never spins (a negative nic.Config.WaitSpin) spins for
// no call, nor does one whose reader would have no P to run on while it
// spins (GOMAXPROCS 1).
func TestCallSpinsForAnswersAtOnce(t *testing.T) {
	defer func(b time.Duration) { answerBudget = b }(answerBudget)
	const slow = 20 * time.Millisecond
	tests := []struct {
		name     string
		waitSpin time.Duration
		procs    int           // GOMAXPROCS
		budget   time.Duration // answerBudget
		op       string        // called twice
		after    time.Duration // the daemon's delay for op
		spins    bool          // whether the next call that could spin is given a budget
	}{
		{"answered at once", 50 * time.Microsecond, 2, time.Minute, attachproto.OpAllocPD, 0, true},
		{"answered late", 50 * time.Microsecond, 2, time.Millisecond, attachproto.OpAllocPD, slow, false},
		{"waiting for the network", 50 * time.Microsecond, 2, time.Millisecond, attachproto.OpDial, slow, true},
		{"a device that never spins", -1, 2, time.Minute, attachproto.OpAllocPD, 0, false},
		{"GOMAXPROCS 1", 50 * time.Microsecond, 1, time.Minute, attachproto.OpAllocPD, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			answerBudget = tc.budget
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.procs))
			d := &answeringDaemon{delay: map[string]time.Duration{tc.op: tc.after}}
			a := d.open(t, tc.waitSpin)
			for range 2 {
				if _, err := a.call(context.Background(), tc.op, nil, nil, nil); err != nil {
					t.Fatalf("%s: %v", tc.op, err)
				}
			}
			if got := a.answering.Budget() > 0; got != tc.spins {
				t.Errorf("after two calls of %s answered in %v, the next call spins: %v, want %v", tc.op, tc.after, got, tc.spins)
			}
		})
	}
}
