package attachd

import (
	"sync"

	"github.com/softnic/softnic/nic/quota"
)

// AttachPace bounds how fast the processes of one user may attach: Burst
// attaches at once, then Rate a second. An attach beyond waits its turn
// before the daemon sets anything up for it (Server.PacedAttaches counts
// the waits). A session costs the daemon about a millisecond of CPU to set
// up and tear down (its doorbell, its goroutines, what the process made,
// the cleanup): a program attaching and detaching in a loop, about 400
// times a second, took a third of a CPU from the daemon, and doubled the
// p99 latency of another program's 64 KiB WRITEs. Paced, a loop costs the
// daemon at most Rate sessions a second, and the wait falls on its own
// user; a program that attaches once, or a test suite starting dozens of
// programs at once, is not slowed.
type AttachPace struct {
	Burst int
	Rate  int
}

// Defaults of AttachPace.
const (
	DefaultAttachBurst = 64
	DefaultAttachRate  = 100
)

// WithDefaults returns p with its fields that are not positive set to
// their defaults.
func (p AttachPace) WithDefaults() AttachPace {
	if p.Burst <= 0 {
		p.Burst = DefaultAttachBurst
	}
	if p.Rate <= 0 {
		p.Rate = DefaultAttachRate
	}
	return p
}

// attachPacers paces each user's attaches (AttachPace). A user's pacer is
// made at its first attach and kept: the users admitted are few.
type attachPacers struct {
	pace  AttachPace
	mu    sync.Mutex
	users map[int]*quota.Pacer
}

// take waits for uid's turn to attach, and reports false if done is
// closed first.
func (a *attachPacers) take(uid int, done <-chan struct{}) bool {
	a.mu.Lock()
	p := a.users[uid]
	if p == nil {
		if a.users == nil {
			a.users = make(map[int]*quota.Pacer)
		}
		p = &quota.Pacer{Rate: float64(a.pace.Rate), Burst: float64(a.pace.Burst)}
		a.users[uid] = p
	}
	a.mu.Unlock()
	return p.Take(done)
}

// paced counts the attaches that waited their turn.
func (a *attachPacers) paced() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n uint64
	for _, p := range a.users {
		n += p.Paced()
	}
	return n
}
