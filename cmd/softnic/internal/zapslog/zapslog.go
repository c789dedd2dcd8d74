// Package zapslog lets a zap logger hear the library's logs: package nic
// and package mr log through a *slog.Logger, and softnic serve, which logs
// through zap, hands them New(its logger), so that the daemon's log lines
// keep one format and one level switch.
package zapslog

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a slog logger whose records go to l's core, at the zap
// level of their slog level, with their attributes as zap fields (a
// group's as "group.key").
func New(l *zap.Logger) *slog.Logger { return slog.New(&handler{core: l.Core()}) }

type handler struct {
	core   zapcore.Core
	prefix string // the open groups, each followed by '.'
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool { return h.core.Enabled(level(l)) }

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	ce := h.core.Check(zapcore.Entry{Level: level(r.Level), Time: r.Time, Message: r.Message}, nil)
	if ce == nil {
		return nil
	}
	fields := make([]zapcore.Field, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		fields = appendAttr(fields, h.prefix, a)
		return true
	})
	ce.Write(fields...)
	return nil
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var fields []zapcore.Field
	for _, a := range attrs {
		fields = appendAttr(fields, h.prefix, a)
	}
	return &handler{core: h.core.With(fields), prefix: h.prefix}
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &handler{core: h.core, prefix: h.prefix + name + "."}
}

// appendAttr appends a as zap fields, its key after prefix; an empty
// attribute is left out, and a group's attributes are flattened, as
// slog's handlers do.
func appendAttr(fields []zapcore.Field, prefix string, a slog.Attr) []zapcore.Field {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return fields
	}
	key, v := prefix+a.Key, a.Value
	switch v.Kind() {
	case slog.KindGroup:
		if a.Key != "" {
			prefix = key + "."
		}
		for _, g := range v.Group() {
			fields = appendAttr(fields, prefix, g)
		}
		return fields
	case slog.KindString:
		return append(fields, zap.String(key, v.String()))
	case slog.KindInt64:
		return append(fields, zap.Int64(key, v.Int64()))
	case slog.KindUint64:
		return append(fields, zap.Uint64(key, v.Uint64()))
	case slog.KindFloat64:
		return append(fields, zap.Float64(key, v.Float64()))
	case slog.KindBool:
		return append(fields, zap.Bool(key, v.Bool()))
	case slog.KindDuration:
		return append(fields, zap.Duration(key, v.Duration()))
	case slog.KindTime:
		return append(fields, zap.Time(key, v.Time()))
	}
	if err, ok := v.Any().(error); ok {
		return append(fields, zap.NamedError(key, err))
	}
	return append(fields, zap.Any(key, v.Any()))
}

// level is the zap level of a slog level: slog's levels between two of
// its named ones count as the lower.
func level(l slog.Level) zapcore.Level {
	switch {
	case l >= slog.LevelError:
		return zapcore.ErrorLevel
	case l >= slog.LevelWarn:
		return zapcore.WarnLevel
	case l >= slog.LevelInfo:
		return zapcore.InfoLevel
	}
	return zapcore.DebugLevel
}
