package main

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The command's logging: what the library and the backends log reaches the
// operator in the command's own format, one line a record, beside the
// command's own lines:
//
//	simba run: error: run failed: exit status 3 (election=x token=3 duration=112ms)
//
// simba run gives its logger (Warn and above) to its client and its
// backend; the commands that show and operate give their backends none
// (they report what they skip themselves, see problems.go); main makes the
// command's format slog's default, for whatever is left.

// logHandler is a slog.Handler that writes each record as one line:
// "PREFIX: [warning: |error: ]MESSAGE[: ERR] [(KEY=VALUE ...)]", without
// the package prefixes of the module's messages ("simba/etcd: ").
type logHandler struct {
	write  func(line string) // writes one line; safe for concurrent use
	prefix string            // "simba", "simba run"
	level  slog.Leveler
	attrs  []slog.Attr // from WithAttrs, keys qualified by their groups
	group  string      // from WithGroup: "g." qualifies the keys that follow
}

func newLogHandler(write func(line string), prefix string, level slog.Leveler) *logHandler {
	return &logHandler{write: write, prefix: prefix, level: level}
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.prefix)
	b.WriteString(": ")
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(message(r.Message))
	var errs, kv []string
	var add func(prefix string, a slog.Attr)
	add = func(prefix string, a slog.Attr) {
		v := a.Value.Resolve()
		switch {
		case a.Equal(slog.Attr{}):
		case v.Kind() == slog.KindGroup:
			p := prefix
			if a.Key != "" {
				p += a.Key + "."
			}
			for _, g := range v.Group() {
				add(p, g)
			}
		case prefix == "" && (a.Key == "err" || a.Key == "error"):
			errs = append(errs, message(v.String()))
		default:
			kv = append(kv, prefix+a.Key+"="+logValue(v))
		}
	}
	for _, a := range h.attrs {
		add("", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		add(h.group, a)
		return true
	})
	for _, e := range errs {
		b.WriteString(": ")
		b.WriteString(e)
	}
	if len(kv) > 0 {
		b.WriteString(" (")
		b.WriteString(strings.Join(kv, " "))
		b.WriteString(")")
	}
	h.write(b.String())
	return nil
}

// logValue formats a value of a record: a duration to the millisecond, a
// string quoted when it would not read as one word.
func logValue(v slog.Value) string {
	switch v.Kind() {
	case slog.KindDuration:
		return v.Duration().Round(time.Millisecond).String()
	case slog.KindTime:
		return v.Time().Format(time.RFC3339Nano)
	}
	s := v.String()
	if s == "" || strings.ContainsAny(s, " =\"()") || strconv.Quote(s) != `"`+s+`"` {
		return strconv.Quote(s)
	}
	return s
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = slices.Clone(h.attrs)
	for _, a := range as {
		if h.group != "" {
			a = slog.Attr{Key: strings.TrimSuffix(h.group, "."), Value: slog.GroupValue(a)}
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}
