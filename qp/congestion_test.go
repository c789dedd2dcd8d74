package qp

import "testing"

// TestCongestion walks a window through slow start, loss, congestion
// avoidance and a timeout.
func TestCongestion(t *testing.T) {
	c := newCongestion(256)
	steps := []struct {
		name   string
		step   func()
		cwnd   float64
		send   int32 // in flight that may still send one more
		noSend int32 // in flight that may not
	}{
		{"start", func() {}, 32, 31, 32},
		{"slow start grows by what was acked", func() { c.onAck(16) }, 48, 47, 48},
		{"a loss halves it", func() { c.onLoss(false) }, 24, 23, 24},
		{"avoidance grows one packet a window", func() { c.onAck(24) }, 25, 24, 25},
		{"a timeout starts from the smallest", func() { c.onLoss(true) }, minWindow, minWindow - 1, minWindow},
		{"slow start again up to ssthresh", func() { c.onAck(4) }, 12, 11, 12},
		{"never beyond the limit", func() { c.onAck(1000) }, 256, 255, 256},
		{"halving stops at the smallest", func() {
			for range 10 {
				c.onLoss(false)
			}
		}, minWindow, minWindow - 1, minWindow},
	}
	for _, s := range steps {
		s.step()
		if c.cwnd != s.cwnd || !c.maySend(s.send) || c.maySend(s.noSend) {
			t.Fatalf("%s: cwnd %.2f, maySend(%d) %v, maySend(%d) %v; want cwnd %.2f", s.name, c.cwnd,
				s.send, c.maySend(s.send), s.noSend, c.maySend(s.noSend), s.cwnd)
		}
	}
	if got := c.ackEvery(); got != minWindow/2 {
		t.Errorf("ackEvery at cwnd %v: %d, want %d", c.cwnd, got, minWindow/2)
	}
}
