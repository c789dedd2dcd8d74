package cwnd

import "testing"

// TestCongestion walks a window through slow start, loss, congestion
// avoidance and a timeout.
func TestCongestion(t *testing.T) {
	c := New(256)
	steps := []struct {
		name   string
		step   func()
		cwnd   float64
		send   int32 // in flight that may still send one more
		noSend int32 // in flight that may not
	}{
		{"start", func() {}, 32, 31, 32},
		{"slow start grows by what was acked", func() { c.OnAck(16) }, 48, 47, 48},
		{"a loss halves it", func() { c.OnLoss(false, false) }, 24, 23, 24},
		{"avoidance grows one packet a window", func() { c.OnAck(24) }, 25, 24, 25},
		{"a timeout starts from the smallest", func() { c.OnLoss(true, false) }, Min, Min - 1, Min},
		{"slow start again up to ssthresh", func() { c.OnAck(4) }, 12, 11, 12},
		{"never beyond the limit", func() { c.OnAck(1000) }, 256, 255, 256},
		{"halving stops at the smallest", func() {
			for range 10 {
				c.OnLoss(false, false)
			}
		}, Min, Min - 1, Min},
	}
	for _, s := range steps {
		s.step()
		if c.cwnd != s.cwnd || !c.MaySend(s.send) || c.MaySend(s.noSend) {
			t.Fatalf("%s: cwnd %.2f, maySend(%d) %v, maySend(%d) %v; want cwnd %.2f", s.name, c.cwnd,
				s.send, c.MaySend(s.send), s.noSend, c.MaySend(s.noSend), s.cwnd)
		}
	}
	if got := c.AckEvery(); got != Min/2 {
		t.Errorf("ackEvery at cwnd %v: %d, want %d", c.cwnd, got, Min/2)
	}
}

// TestCongestionUndo: a timeout that proves spurious gets back the window
// and threshold it cut, and only once; a loss signalled otherwise (a NAK,
// a gap) keeps its cut.
func TestCongestionUndo(t *testing.T) {
	c := New(256)
	c.OnAck(100)          // slow start: 132
	c.OnLoss(true, false) // Min, threshold 66
	c.OnAck(4)
	c.Undo()
	if c.cwnd != 132 || c.ssthresh != 256 {
		t.Fatalf("undo after a timeout: cwnd %v, ssthresh %v; want 132, 256", c.cwnd, c.ssthresh)
	}
	c.OnAck(1000) // 256, the limit
	c.Undo()
	if c.cwnd != 256 || c.ssthresh != 256 {
		t.Fatalf("a second undo: cwnd %v, ssthresh %v; want 256, 256 unchanged", c.cwnd, c.ssthresh)
	}
	c.OnLoss(false, false)
	c.Undo()
	if c.cwnd != 128 || c.ssthresh != 128 {
		t.Fatalf("undo after a NAK: cwnd %v, ssthresh %v; want the halving kept, 128, 128", c.cwnd, c.ssthresh)
	}
	c.OnLoss(true, false) // Min, threshold 64
	c.OnLoss(true, true)  // again, nothing acknowledged between: Min, threshold Min
	c.Undo()
	if c.cwnd != 128 || c.ssthresh != 128 {
		t.Fatalf("undo after two timeouts in a row: cwnd %v, ssthresh %v; want those from before the first, 128, 128", c.cwnd, c.ssthresh)
	}
}
