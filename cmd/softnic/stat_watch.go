package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
)

// softnic stat --watch [INTERVAL]: the counters again every INTERVAL with
// their rates per second, as `watch -n 1 rdma statistic` shows rxe's:
// redrawn on a terminal, as lines of the counters that changed otherwise
// (for a pipe or a file), as a JSON object per interval with --json. It
// ends on Ctrl-C (or SIGTERM) with status 0.

// defaultWatch is --watch's interval when none is given.
const defaultWatch = time.Second

// minWatch bounds the interval from below: each sample is a request to
// the daemon.
const minWatch = 100 * time.Millisecond

// watchFlag is --watch: on its own, or with an interval (--watch=2s, or
// --watch 2s, where the interval is stat's one argument).
type watchFlag struct {
	on       bool
	interval time.Duration
}

func defineWatch(fs *flag.FlagSet) *watchFlag {
	w := &watchFlag{interval: defaultWatch}
	fs.Var(w, "watch", "show the counters again every `INTERVAL` (default 1s), with their rates per second, until Ctrl-C")
	return w
}

func (w *watchFlag) IsBoolFlag() bool { return true }

func (w *watchFlag) String() string {
	if w == nil || !w.on {
		return ""
	}
	return w.interval.String()
}

func (w *watchFlag) Set(s string) error {
	if on, err := strconv.ParseBool(s); err == nil {
		w.on = on
		return nil
	}
	return w.setInterval(s)
}

func (w *watchFlag) setInterval(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		if n, nerr := strconv.ParseFloat(s, 64); nerr == nil { // seconds, as watch -n takes them
			d, err = time.Duration(n*float64(time.Second)), nil
		}
	}
	if err != nil || d < minWatch {
		return fmt.Errorf("interval %q: want %v or more, such as 2s or 0.5", s, minWatch)
	}
	w.on, w.interval = true, d
	return nil
}

// watchStat runs stat --watch until the context ends or a signal comes.
func watchStat(inv *invocation, controlPath string, asJSON bool, w *watchFlag) error {
	if len(inv.args) == 1 {
		if err := w.setInterval(inv.args[0]); err != nil {
			return usagef("--watch: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(inv.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	mode := watchLines
	switch {
	case asJSON:
		mode = watchJSON
	case isTerminal(inv.stdout):
		mode = watchRedraw
	}
	t := time.NewTicker(w.interval)
	defer t.Stop()
	fetch := func(ctx context.Context) (control.Counters, error) {
		var l control.Counters
		return l, control.Call(ctx, controlPath, "stat", &l)
	}
	return (&statWatcher{out: inv.stdout, mode: mode, interval: w.interval}).run(ctx, fetch, t.C)
}

// isTerminal reports whether w is a terminal (a character device: /dev/null
// passes too, which does no harm).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// How a statWatcher shows its samples.
type watchMode int

const (
	watchLines  watchMode = iota // a line per counter that changed
	watchRedraw                  // the whole table, redrawn
	watchJSON                    // a JSON object per sample
)

// statWatcher shows samples of the counters with their rates.
type statWatcher struct {
	out      io.Writer
	mode     watchMode
	interval time.Duration

	prev   map[string]uint64
	prevAt time.Time
	buf    []byte
}

// run shows a sample now and one at each tick, until ctx ends. A daemon
// that stops answering ends it with an error.
func (s *statWatcher) run(ctx context.Context, fetch func(context.Context) (control.Counters, error), ticks <-chan time.Time) error {
	now := time.Now()
	for {
		l, err := fetch(ctx)
		if ctx.Err() != nil {
			return nil // Ctrl-C
		}
		if err != nil {
			return err
		}
		if err := s.sample(now, l); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case now = <-ticks:
		}
	}
}

// sample shows the counters l as of now, with their rates since the
// previous sample.
func (s *statWatcher) sample(now time.Time, l control.Counters) error {
	dt := now.Sub(s.prevAt).Seconds()
	first := s.prev == nil
	rate := func(c control.Counter) (float64, bool) {
		prev, ok := s.prev[c.Name]
		if first || !ok || dt <= 0 || c.Value < prev || control.Level(c.Name) {
			return 0, false
		}
		return float64(c.Value-prev) / dt, true
	}
	b := s.buf[:0]
	switch s.mode {
	case watchJSON:
		type sampleJSON struct {
			Time     time.Time          `json:"time"`
			Counters control.Counters   `json:"counters"`
			Rates    map[string]float64 `json:"rates"` // per second, of the counts (not the levels) since the last sample
		}
		js := sampleJSON{Time: now, Counters: l, Rates: map[string]float64{}}
		for _, c := range l {
			if r, ok := rate(c); ok {
				js.Rates[c.Name] = r
			}
		}
		line, err := json.Marshal(&js)
		if err != nil {
			return err
		}
		b = append(append(b, line...), '\n')
	case watchRedraw:
		// The counters at zero are left out, so that the rest fit on a
		// screen: most drop and refusal reasons stay at zero.
		b = append(b, "\x1b[H\x1b[2J"...) // home, clear the screen
		b = fmt.Appendf(b, "softnic stat every %v at %s (Ctrl-C to stop)\n\n", s.interval, now.Format(time.TimeOnly))
		nw, vw, zero := len("COUNTER"), len("VALUE"), 0
		for _, c := range l {
			nw, vw = max(nw, len(c.Name)), max(vw, len(strconv.FormatUint(c.Value, 10)))
		}
		b = fmt.Appendf(b, "%-*s  %*s  %12s\n", nw, "COUNTER", vw, "VALUE", "RATE/s")
		for _, c := range l {
			if c.Value == 0 {
				zero++
				continue
			}
			r := "-"
			if v, ok := rate(c); ok {
				r = formatRate(v)
			}
			b = fmt.Appendf(b, "%-*s  %*d  %12s\n", nw, c.Name, vw, c.Value, r)
		}
		switch {
		case zero == 1:
			b = append(b, "\n(1 counter at 0 not shown)\n"...)
		case zero > 1:
			b = fmt.Appendf(b, "\n(%d counters at 0 not shown)\n", zero)
		}
	default:
		// The first sample has every counter; then those that changed.
		at := now.Format("15:04:05.000")
		for _, c := range l {
			prev, ok := s.prev[c.Name]
			if !first && ok && prev == c.Value {
				continue
			}
			r := "-"
			if v, ok := rate(c); ok {
				r = formatRate(v) + "/s"
			}
			b = fmt.Appendf(b, "%s %s %d %s\n", at, c.Name, c.Value, r)
		}
	}
	s.buf = b
	s.prev, s.prevAt = make(map[string]uint64, len(l)), now
	for _, c := range l {
		s.prev[c.Name] = c.Value
	}
	_, err := s.out.Write(b)
	return err
}

// formatRate writes a rate per second with one decimal below 100, none
// above.
func formatRate(v float64) string {
	if v < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
