package scenario

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
)

// openLoopback opens the two devices on free ports of 127.0.0.1.
func openLoopback(server, client nic.Config) (*nic.Device, *nic.Device, error) {
	server.Addr = netip.MustParseAddrPort("127.0.0.1:0")
	client.Addr = server.Addr
	s, err := nic.Open(server)
	if err != nil {
		return nil, nil, err
	}
	c, err := nic.Open(client)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, c, nil
}

// output collects what a scenario says.
type output struct {
	mu    sync.Mutex
	lines []string
}

func (o *output) say(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lines = append(o.lines, strings.Split(s, "\n")...)
}

func (o *output) text() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.lines, "\n")
}

// TestScenarios runs every scenario and checks, besides the checks each
// makes itself, that its ladder names what the story is about, that every
// step is explained and ok, and that Pause is called between steps.
func TestScenarios(t *testing.T) {
	psns := func(l *ladder.Ladder, k ladder.Kind, c ladder.Cause) []wire.PSN {
		var ps []wire.PSN
		for _, an := range l.Anomalies() {
			if an.Kind == k && an.Cause == c {
				ps = append(ps, an.PSN)
			}
		}
		return ps
	}
	tests := []struct {
		name  string
		check func(t *testing.T, l *ladder.Ladder)
	}{
		{"loss", func(t *testing.T, l *ladder.Ladder) {
			// The WRITE's four packets: First 0x1000, Middle 0x1001 lost,
			// Middle 0x1002 and Last 0x1003 resent after the NAK.
			if got := psns(l, ladder.Retransmission, ladder.CauseNAK); !slices.Equal(got, []wire.PSN{0x1001, 0x1002, 0x1003}) {
				t.Errorf("retransmitted after the NAK: %v, want 0x1001..0x1003", got)
			}
			if got := psns(l, ladder.Lost, 0); !slices.Equal(got, []wire.PSN{0x1001}) {
				t.Errorf("lost: %v", got)
			}
		}},
		{"timeout", func(t *testing.T, l *ladder.Ladder) {
			if got := psns(l, ladder.Retransmission, ladder.CauseTimeout); !slices.Equal(got, []wire.PSN{0x1000}) {
				t.Errorf("retransmitted after a timeout: %v, want 0x1000", got)
			}
			if l.Total(ladder.NAK) != 0 {
				t.Errorf("%d NAKs, want none", l.Total(ladder.NAK))
			}
		}},
		{"rnr", func(t *testing.T, l *ladder.Ladder) {
			if n := l.Total(ladder.RNRWait); n == 0 || len(psns(l, ladder.Retransmission, ladder.CauseRNR)) != n {
				t.Errorf("%d RNR NAKs, retransmissions after them %v", n, psns(l, ladder.Retransmission, ladder.CauseRNR))
			}
		}},
		{"seqerr", func(t *testing.T, l *ladder.Ladder) {
			if got := psns(l, ladder.NAK, 0); !slices.Equal(got, []wire.PSN{0x1001}) {
				t.Errorf("NAKs: %v, want one for 0x1001", got)
			}
			if got := psns(l, ladder.Retransmission, ladder.CauseNAK); !slices.Equal(got, []wire.PSN{0x1001, 0x1002}) {
				t.Errorf("retransmitted after the NAK: %v, want 0x1001 and 0x1002", got)
			}
		}},
		{"atomic-replay", func(t *testing.T, l *ladder.Ladder) {
			if got := psns(l, ladder.Duplicate, 0); !slices.Equal(got, []wire.PSN{0x1000, 0x1000}) {
				t.Errorf("duplicates: %v, want the copy of 0x1000 and its second ATOMIC ACKNOWLEDGE", got)
			}
			if l.Total(ladder.Retransmission) != 0 {
				t.Errorf("%d retransmissions, want none: a copy is not one", l.Total(ladder.Retransmission))
			}
		}},
		{"bad-rkey", func(t *testing.T, l *ladder.Ladder) {
			if got := psns(l, ladder.NAK, 0); !slices.Equal(got, []wire.PSN{0x1000}) {
				t.Errorf("NAKs: %v", got)
			}
		}},
	}
	if len(tests) != len(Scenarios) {
		t.Fatalf("%d scenarios tested, %d exist", len(tests), len(Scenarios))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Lookup(tt.name)
			if s == nil {
				t.Fatalf("no scenario %q", tt.name)
			}
			var out output
			pauses, traced := 0, 0
			var tmu sync.Mutex
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := s.Run(ctx, Options{
				Open:  openLoopback,
				Say:   out.say,
				Pause: func() error { pauses++; return nil },
				Trace: func(*nic.TracePacket) { tmu.Lock(); traced++; tmu.Unlock() },
			})
			if err != nil {
				t.Fatalf("%v\n%s", err, out.text())
			}
			tt.check(t, l)
			text := out.text()
			steps := len(regexp.MustCompile(`(?m)^== \d+\. `).FindAllString(text, -1))
			if oks := strings.Count(text, "\nok: "); oks != steps+1 || pauses != steps-1 {
				t.Errorf("%d steps, %d ok lines, %d pauses; want an ok per step and for the ladder, a pause between steps", steps, oks, pauses)
			}
			if !strings.Contains(text, "\n== the ladder\n") || !strings.HasSuffix(text, "steps behaved as expected.") {
				t.Errorf("output:\n%s", text)
			}
			if traced < l.Packets() {
				t.Errorf("Options.Trace saw %d packets, the ladder %d", traced, l.Packets())
			}
		})
	}
}

// TestPauseError: an error from Pause (the user closed standard input)
// ends the scenario with it.
func TestPauseError(t *testing.T) {
	stop := errors.New("no more input")
	var out output
	_, err := Lookup("bad-rkey").Run(context.Background(), Options{Open: openLoopback, Say: out.say, Pause: func() error { return stop }})
	if !errors.Is(err, stop) {
		t.Errorf("Run: %v, want %v", err, stop)
	}
}
