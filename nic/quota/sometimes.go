package quota

import (
	"log/slog"
	"sync"
	"time"
)

// Sometimes logs an event that a peer can repeat at will (a refused
// request, say) at most once a minute, saying how many it left out since:
// the events are counted elsewhere, and a flood of them must not fill the
// log. The zero Sometimes is ready; it is safe for concurrent use.
type Sometimes struct {
	mu      sync.Mutex
	last    time.Time
	skipped uint64
	now     func() time.Time // a test's clock
}

// Log logs msg with args (as slog.Logger.Warn takes them) as a warning on log, unless one was logged
// less than a minute ago.
func (s *Sometimes) Log(log *slog.Logger, msg string, args ...any) {
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	t := now()
	s.mu.Lock()
	if !s.last.IsZero() && t.Sub(s.last) < logEvery {
		s.skipped++
		s.mu.Unlock()
		return
	}
	skipped := s.skipped
	s.last, s.skipped = t, 0
	s.mu.Unlock()
	if skipped > 0 {
		args = append(args, slog.Uint64("not_logged_since", skipped))
	}
	log.Warn(msg, args...)
}
