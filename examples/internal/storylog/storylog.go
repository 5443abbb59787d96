// Package storylog prints what simba's client and backends log as lines of
// an example's own story, so that an example's output has one format.
//
//	say := func(format string, args ...any) { fmt.Fprintf(w, "[%4.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...)) }
//	client, err := simba.New(b, simba.WithLogger(storylog.New(say, slog.LevelWarn)))
//
// prints "[ 3.2s] warning: session lost: ... (session=first-1 reason=...)".
package storylog

import (
	"context"
	"log/slog"
	"strings"
)

// New returns a logger that passes each record at level or above to say,
// as one line: "warning: MESSAGE[: ERR] [(KEY=VALUE ...)]" ("error: " for
// errors, nothing for lower levels).
func New(say func(format string, args ...any), level slog.Level) *slog.Logger {
	return slog.New(handler{say: say, level: level})
}

type handler struct {
	say   func(format string, args ...any)
	level slog.Level
	attrs []slog.Attr
}

func (h handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h handler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	var rest []string
	add := func(a slog.Attr) bool {
		switch {
		case a.Equal(slog.Attr{}):
		case a.Key == "err" || a.Key == "error":
			b.WriteString(": " + a.Value.String())
		default:
			rest = append(rest, a.String())
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	if len(rest) > 0 {
		b.WriteString(" (" + strings.Join(rest, " ") + ")")
	}
	h.say("%s", b.String())
	return nil
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], as...)
	return h
}

func (h handler) WithGroup(string) slog.Handler { return h }
