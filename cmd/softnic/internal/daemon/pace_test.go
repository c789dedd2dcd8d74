package daemon

import (
	"testing"
	"time"
)

// The pacer spaces the buffers that go back by 1/rate; a buffer that
// comes back after a pause goes at once.
func TestSendPacer(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newSendPacer(1000, func() time.Time { return now })
	for i, want := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond} {
		if d := p.take(); d != want {
			t.Errorf("buffer %d of a burst waits %v, want %v", i, d, want)
		}
	}
	now = now.Add(4 * time.Millisecond) // the four went back
	if d := p.take(); d != 0 {
		t.Errorf("the next buffer waits %v, want 0", d)
	}
	if d := p.take(); d != time.Millisecond {
		t.Errorf("the one after waits %v, want 1ms", d)
	}
	now = now.Add(time.Hour)
	if d := p.take(); d != 0 {
		t.Errorf("after a pause a buffer waits %v, want 0", d)
	}
}
