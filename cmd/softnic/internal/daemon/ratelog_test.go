package daemon

import (
	"io"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A flood of events writes DefaultLogRate lines a second; the first line of
// the next second counts the events left out, and Flush counts the rest.
func TestRateLog(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	r := newRateLog(zap.New(core), zapcore.InfoLevel, "SEND received", DefaultLogRate)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	built := 0
	event := func(i int) {
		r.Log(func() []zap.Field { built++; return []zap.Field{zap.Int("i", i)} })
	}
	for i := range 1000 {
		event(i)
	}
	if logs.Len() != DefaultLogRate || built != DefaultLogRate {
		t.Fatalf("%d lines written, %d built for 1000 events in one second; want %d", logs.Len(), built, DefaultLogRate)
	}
	now = now.Add(999 * time.Millisecond)
	event(1000)
	if logs.Len() != DefaultLogRate {
		t.Fatalf("%d lines within the second, want %d", logs.Len(), DefaultLogRate)
	}
	now = now.Add(time.Millisecond)
	event(1001)
	last := logs.All()[logs.Len()-1]
	if got := last.ContextMap(); got["i"] != int64(1001) || got[NotLoggedKey] != uint64(991) {
		t.Errorf("the next second's first line has %v; want i 1001 and %s 991", got, NotLoggedKey)
	}
	for i := range 20 {
		event(2000 + i)
	}
	r.Flush()
	last = logs.All()[logs.Len()-1]
	if last.Message != "SEND received (the ones not logged)" || last.ContextMap()[NotLoggedKey] != uint64(11) {
		t.Errorf("Flush wrote %q %v; want the 11 events left out", last.Message, last.ContextMap())
	}
	n := logs.Len()
	r.Flush()
	if logs.Len() != n {
		t.Error("a second Flush with nothing left out wrote a line")
	}
}

// Below the logger's level, nothing is built or counted.
func TestRateLogLevel(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	r := newRateLog(zap.New(core), zapcore.InfoLevel, "connected", DefaultLogRate)
	for range 100 {
		r.Log(func() []zap.Field { t.Fatal("fields built for a level the logger drops"); return nil })
	}
	r.Flush()
	if logs.Len() != 0 {
		t.Errorf("%d lines", logs.Len())
	}
}

// An event left out allocates nothing: a SEND flood, which the log mostly
// leaves out, must not run the garbage collector of the daemon (whose
// pauses slowed every other peer's WRITEs).
func TestRateLogLeftOutAllocatesNothing(t *testing.T) {
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel)
	r := newRateLog(zap.New(core), zapcore.InfoLevel, "SEND received", 1)
	qpn := uint32(0x11)
	event := func() {
		r.Log(func() []zap.Field { return []zap.Field{zap.String("qpn", hex(uint64(qpn)))} })
	}
	event() // the second's one line
	if allocs := testing.AllocsPerRun(1000, event); allocs != 0 {
		t.Errorf("an event left out allocates %v times, want 0", allocs)
	}
}
