package attachd

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
