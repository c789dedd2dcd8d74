package zapslog

import (
	"errors"
	"log/slog"
	"net/netip"
	"testing"
	"testing/slogtest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestFields: each kind of slog value becomes the zap field of its kind,
// groups flatten into dotted keys, levels map onto zap's and records
// below the core's level are not written.
func TestFields(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	log := New(zap.New(core)).With("dev", netip.MustParseAddrPort("127.0.0.1:4791")).WithGroup("qp")
	log.Debug("not written")
	log.Warn("retry exceeded", slog.Int("num", 17), slog.Uint64("psn", 5), slog.Bool("rc", true),
		slog.Duration("after", time.Second), slog.Any("error", errors.New("boom")), slog.Group("peer", "port", 4791),
		slog.Attr{})
	if logs.Len() != 1 {
		t.Fatalf("%d entries written, want 1", logs.Len())
	}
	e := logs.All()[0]
	if e.Level != zapcore.WarnLevel || e.Message != "retry exceeded" {
		t.Errorf("entry %v %q", e.Level, e.Message)
	}
	want := map[string]any{"dev": "127.0.0.1:4791", "qp.num": int64(17), "qp.psn": uint64(5), "qp.rc": true,
		"qp.after": time.Second, "qp.error": "boom", "qp.peer.port": int64(4791)}
	got := e.ContextMap()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("field %s = %#v, want %#v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("fields %v, want %v", got, want)
	}
}

// TestSlogtest runs the standard library's conformance tests of a
// slog.Handler.
func TestSlogtest(t *testing.T) {
	var logs *observer.ObservedLogs
	slogtest.Run(t, func(*testing.T) slog.Handler {
		var core zapcore.Core
		core, logs = observer.New(zapcore.DebugLevel)
		return New(zap.New(core)).Handler()
	}, func(*testing.T) map[string]any {
		all := logs.All()
		if len(all) == 0 {
			return nil
		}
		e := all[len(all)-1]
		m := map[string]any{slog.LevelKey: e.Level, slog.MessageKey: e.Message}
		if !e.Time.IsZero() {
			m[slog.TimeKey] = e.Time
		}
		for k, v := range e.ContextMap() {
			put(m, k, v)
		}
		return m
	})
}

// put sets the dotted key k in m, as nested maps.
func put(m map[string]any, k string, v any) {
	for i := range len(k) {
		if k[i] == '.' {
			sub, _ := m[k[:i]].(map[string]any)
			if sub == nil {
				sub = map[string]any{}
				m[k[:i]] = sub
			}
			put(sub, k[i+1:], v)
			return
		}
	}
	m[k] = v
}
