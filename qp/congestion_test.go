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
		{"a loss halves it", func() { c.onLoss(false, false) }, 24, 23, 24},
		{"avoidance grows one packet a window", func() { c.onAck(24) }, 25, 24, 25},
		{"a timeout starts from the smallest", func() { c.onLoss(true, false) }, minWindow, minWindow - 1, minWindow},
		{"slow start again up to ssthresh", func() { c.onAck(4) }, 12, 11, 12},
		{"never beyond the limit", func() { c.onAck(1000) }, 256, 255, 256},
		{"halving stops at the smallest", func() {
			for range 10 {
				c.onLoss(false, false)
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

// TestCongestionUndo: a timeout that proves spurious gets back the window
// and threshold it cut, and only once; a loss signalled otherwise (a NAK,
// a gap) keeps its cut.
func TestCongestionUndo(t *testing.T) {
	c := newCongestion(256)
	c.onAck(100)          // slow start: 132
	c.onLoss(true, false) // minWindow, threshold 66
	c.onAck(4)
	c.undo()
	if c.cwnd != 132 || c.ssthresh != 256 {
		t.Fatalf("undo after a timeout: cwnd %v, ssthresh %v; want 132, 256", c.cwnd, c.ssthresh)
	}
	c.onAck(1000) // 256, the limit
	c.undo()
	if c.cwnd != 256 || c.ssthresh != 256 {
		t.Fatalf("a second undo: cwnd %v, ssthresh %v; want 256, 256 unchanged", c.cwnd, c.ssthresh)
	}
	c.onLoss(false, false)
	c.undo()
	if c.cwnd != 128 || c.ssthresh != 128 {
		t.Fatalf("undo after a NAK: cwnd %v, ssthresh %v; want the halving kept, 128, 128", c.cwnd, c.ssthresh)
	}
	c.onLoss(true, false) // minWindow, threshold 64
	c.onLoss(true, true)  // again, nothing acknowledged between: minWindow, threshold minWindow
	c.undo()
	if c.cwnd != 128 || c.ssthresh != 128 {
		t.Fatalf("undo after two timeouts in a row: cwnd %v, ssthresh %v; want those from before the first, 128, 128", c.cwnd, c.ssthresh)
	}
}
