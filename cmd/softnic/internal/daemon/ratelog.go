package daemon

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// rateLog writes the log lines of one kind of event a peer can cause as
// often as it likes (a SEND received, a connection made or lost): at most
// burst lines a second (--log-rate). The events left out are counted, and the
// next line written (or Flush's) says how many there were, so that a
// flood costs the log a few lines a second and still shows its size.
type rateLog struct {
	log   *zap.Logger
	level zapcore.Level
	msg   string
	burst int
	now   func() time.Time // time.Now, or a test's clock

	mu      sync.Mutex
	window  time.Time // when the current second began
	lines   int       // lines written in it
	skipped uint64    // events not logged since the last line
}

// DefaultLogRate is how many lines of one kind a second the log takes
// unless Config.LogRate says otherwise.
const DefaultLogRate = 10

// NotLoggedKey names the log field of the count of events left out.
const NotLoggedKey = "more_not_logged"

func newRateLog(log *zap.Logger, level zapcore.Level, msg string, burst int) *rateLog {
	return &rateLog{log: log, level: level, msg: msg, burst: burst, now: time.Now}
}

// Log writes the event's line, unless this second's lines are used up;
// fields is called only for a line that is written, and an event left out
// allocates nothing (Logger.Check takes an entry it would not give back),
// so that a flood does not run the garbage collector.
func (r *rateLog) Log(fields func() []zap.Field) {
	if !r.log.Core().Enabled(r.level) {
		return
	}
	if skipped, ok := r.take(); ok {
		f := fields()
		if skipped > 0 {
			f = append(f, zap.Uint64(NotLoggedKey, skipped))
		}
		r.log.Log(r.level, r.msg, f...)
	}
}

// take reports whether a line may be written now and how many events went
// unlogged before it.
func (r *rateLog) take() (uint64, bool) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.window) >= time.Second {
		r.window, r.lines = now, 0
	}
	if r.lines >= r.burst {
		r.skipped++
		return 0, false
	}
	r.lines++
	skipped := r.skipped
	r.skipped = 0
	return skipped, true
}

// Flush writes one line with the count of the events left out since the
// last line, if any: the daemon calls it every second and as it stops.
func (r *rateLog) Flush() {
	r.mu.Lock()
	skipped := r.skipped
	r.skipped = 0
	r.mu.Unlock()
	if skipped > 0 {
		r.log.Log(r.level, r.msg+" (the ones not logged)", zap.Uint64(NotLoggedKey, skipped))
	}
}

// sampledLog bounds the lines the library (nic, attachd) writes into the
// daemon's log, as rateLog does for the daemon's own kinds of event: each
// message at most rate lines a second, the rest counted and told by
// Flush. A program that attaches and detaches in a loop, or fails QP
// after QP, cannot fill the log.
type sampledLog struct {
	log, sampled *zap.Logger

	mu      sync.Mutex
	dropped map[sampledKey]uint64 // lines left out since the last Flush
}

type sampledKey struct {
	level zapcore.Level
	msg   string
}

// sampledKinds bounds the messages whose left-out lines are told apart;
// the library has a few dozen.
const sampledKinds = 256

func newSampledLog(log *zap.Logger, rate int) *sampledLog {
	s := &sampledLog{log: log, dropped: map[sampledKey]uint64{}}
	s.sampled = log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, rate, 0, zapcore.SamplerHook(s.hook))
	}))
	return s
}

// Logger returns the logger whose lines are bounded.
func (s *sampledLog) Logger() *zap.Logger { return s.sampled }

func (s *sampledLog) hook(e zapcore.Entry, d zapcore.SamplingDecision) {
	if d&zapcore.LogDropped == 0 {
		return
	}
	k := sampledKey{e.Level, e.Message}
	s.mu.Lock()
	if _, ok := s.dropped[k]; !ok && len(s.dropped) >= sampledKinds {
		k.msg = "(other messages)"
	}
	s.dropped[k]++
	s.mu.Unlock()
}

// Flush writes, for each message some of whose lines were left out since
// the last Flush, one line that counts them.
func (s *sampledLog) Flush() {
	s.mu.Lock()
	dropped := s.dropped
	s.dropped = map[sampledKey]uint64{}
	s.mu.Unlock()
	for k, n := range dropped {
		s.log.Log(k.level, k.msg+" (the ones not logged)", zap.Uint64(NotLoggedKey, n))
	}
}
