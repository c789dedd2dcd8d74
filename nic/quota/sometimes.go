package quota

import (
	"sync"
	"time"

	"go.uber.org/zap"
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

// Log logs msg with fields as a warning on log, unless one was logged
// less than a minute ago.
func (s *Sometimes) Log(log *zap.Logger, msg string, fields ...zap.Field) {
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
		fields = append(fields, zap.Uint64("not_logged_since", skipped))
	}
	log.Warn(msg, fields...)
}
