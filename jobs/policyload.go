package jobs

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/simba-go/simba"
)

// Keys of the maps of the policies.
var (
	retryKeys   = []string{"attempts", "backoff", "maxBackoff", "multiplier", "jitter"}
	notifyKeys  = []string{"webhook"}
	webhookKeys = []string{"url", "timeout", "attempts", "headers"}
)

// section reads the keys of one map of a file: a job's, a map nested in
// it (retry, notify, notify.webhook), or the top level's notify. Problems
// name the job (kind "" for the top level) and the key with its prefix:
// retry.attempts, notify.webhook.url.
type section struct {
	l      *loader
	t      *tree  // the map, its keys in their known spelling
	kind   string // the job's kind, "" at the top level
	i      int    // the job's index
	label  string // the job's name in problems
	prefix string // of the keys: "", "retry.", "notify.webhook."
}

// sec is the section of a job's own keys.
func (j *job) sec() section {
	return section{l: j.l, t: j.t, kind: j.kind, i: j.i, label: j.name}
}

// key returns the full name of key k.
func (s section) key(k string) string { return s.prefix + k }

// fail reports a problem of key k (a full name), which checkConfig then
// leaves alone.
func (s section) fail(t *tree, k string, err error) {
	s.l.origin.reported[fieldRef{s.kind, s.i, k}] = true
	s.l.p.add(s.l.pos(t.line), s.kind, s.label, k, err)
}

// get returns the value of key k and records its line, nil when absent.
func (s section) get(k string) *tree {
	t := s.t.get(k)
	if t != nil {
		s.l.origin.lines[fieldRef{s.kind, s.i, s.key(k)}] = s.l.pos(t.line)
	}
	return t
}

// str returns the expanded single value of key k; ok is false when k is
// absent or its value was reported.
func (s section) str(k string) (string, *tree, bool) {
	t := s.get(k)
	if t == nil {
		return "", nil, false
	}
	v, ok := s.l.scalar(t, s.kind, s.label, s.key(k))
	if !ok {
		s.l.origin.reported[fieldRef{s.kind, s.i, s.key(k)}] = true
	}
	return v, t, ok
}

// duration returns the duration under key k, 0 when absent, empty or bad;
// checkConfig checks its range.
func (s section) duration(k string) time.Duration {
	v, t, ok := s.str(k)
	if !ok || strings.TrimSpace(v) == "" {
		return 0
	}
	d, err := ParseDuration(v)
	if err != nil {
		s.fail(t, s.key(k), err)
		return 0
	}
	return d
}

// integer returns the whole number under key k, 0 when absent, empty or
// bad; checkConfig checks its range.
func (s section) integer(k string) int {
	v, t, ok := s.str(k)
	if !ok || strings.TrimSpace(v) == "" {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		s.fail(t, s.key(k), fmt.Errorf("%w: %s is not a whole number", ErrInvalidValue, quote(v)))
		return 0
	}
	return n
}

// number returns the finite number under key k, 0 when absent, empty or
// bad; checkConfig checks its range.
func (s section) number(k string) float64 {
	v, t, ok := s.str(k)
	if !ok || strings.TrimSpace(v) == "" {
		return 0
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		s.fail(t, s.key(k), fmt.Errorf("%w: %s is not a number", ErrInvalidValue, quote(v)))
		return 0
	}
	return f
}

// sub returns the section of the map under key k, its keys relaxed
// against known; ok is false when k is absent or null, or not a map
// (reported, with what the key wants).
func (s section) sub(k string, known []string) (section, bool) {
	t := s.get(k)
	if t == nil || t.kind == nullNode {
		return section{}, false
	}
	if t.kind != mapNode {
		s.fail(t, s.key(k), fmt.Errorf("%w: want a map with the keys %s, not %v", ErrSyntax, strings.Join(known, ", "), t.kind))
		return section{}, false
	}
	m, report := s.l.relax(t, known, s.key(k)+".")
	report(s.kind, s.label)
	return section{l: s.l, t: m, kind: s.kind, i: s.i, label: s.label, prefix: s.key(k) + "."}, true
}

// retry reads the key retry: a map of the policy's fields, or a whole
// number, the attempts.
func (s section) retry() simba.RetryPolicy {
	t := s.get(retryKey)
	if t == nil || t.kind == nullNode {
		return simba.RetryPolicy{}
	}
	if t.kind == scalarNode {
		v, ok := s.l.scalar(t, s.kind, s.label, retryKey)
		if !ok {
			s.l.origin.reported[fieldRef{s.kind, s.i, retryKey}] = true
			return simba.RetryPolicy{}
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			s.fail(t, retryKey, fmt.Errorf("%w: %s is neither a whole number of attempts nor a map with the keys %s", ErrInvalidValue, quote(v), strings.Join(retryKeys, ", ")))
			return simba.RetryPolicy{}
		}
		// Its problems are those of retry.attempts, on this line.
		s.l.origin.lines[fieldRef{s.kind, s.i, retryKey + ".attempts"}] = s.l.pos(t.line)
		return simba.RetryPolicy{Attempts: n}
	}
	r, ok := s.sub(retryKey, retryKeys)
	if !ok {
		return simba.RetryPolicy{}
	}
	return simba.RetryPolicy{
		Attempts:   r.integer("attempts"),
		Backoff:    r.duration("backoff"),
		MaxBackoff: r.duration("maxBackoff"),
		Multiplier: r.number("multiplier"),
		Jitter:     r.number("jitter"),
	}
}

// overlap reads the key overlap: skip, buffer-one, cancel-running or
// allow, in any relaxed spelling.
func (s section) overlap() simba.OverlapPolicy {
	v, t, ok := s.str(overlapKey)
	if !ok || strings.TrimSpace(v) == "" {
		return 0
	}
	p, ok := parseOverlap(v)
	if !ok {
		s.fail(t, overlapKey, fmt.Errorf("%w: %s is not skip, buffer-one, cancel-running or allow", ErrInvalidValue, quote(v)))
	}
	return p
}

// notify reads the key notify. In a job, a notify without a webhook (an
// empty map, or nothing) is a Notify without one: it turns the default
// off; at the top level it is no default.
func (s section) notify() *Notify {
	t := s.get(notifyKey)
	if t == nil || (t.kind == nullNode && s.kind == "") {
		return nil
	}
	n := &Notify{}
	ns, ok := s.sub(notifyKey, notifyKeys)
	if !ok {
		return n
	}
	w, ok := ns.sub("webhook", webhookKeys)
	if !ok {
		return n
	}
	hook := &Webhook{
		Timeout:  w.duration("timeout"),
		Attempts: w.integer("attempts"),
		Headers:  w.headers(),
	}
	if u, _, ok := w.str("url"); ok {
		hook.URL = strings.TrimSpace(u)
	} else if w.t.get("url") == nil {
		// checkConfig reports it missing, on the line of the key webhook.
		s.l.origin.lines[fieldRef{s.kind, s.i, w.key("url")}] = s.l.pos(ns.t.getKey("webhook").line)
	}
	n.Webhook = hook
	return n
}

// headers reads the key headers: a map of header names to values, each
// value expanded. Names are kept as written (HTTP ignores their case).
func (s section) headers() map[string]string {
	const k = "headers"
	t := s.get(k)
	if t == nil || t.kind == nullNode {
		return nil
	}
	if t.kind != mapNode {
		s.fail(t, s.key(k), fmt.Errorf("%w: want a map of header names to values, such as {Authorization: \"Bearer ${TOKEN}\"}, not %v", ErrSyntax, t.kind))
		return nil
	}
	m := make(map[string]string, len(t.keys))
	seen := map[string]*tree{}
	for i, name := range t.keys {
		if prev, dup := seen[strings.ToLower(name.value)]; dup {
			// Added, not failed: checkConfig still checks the others.
			s.l.p.add(s.l.pos(name.line), s.kind, s.label, s.key(k), fmt.Errorf("%w: header %s given twice, as %s (line %d) and as %s (line %d)", ErrSyntax, quote(name.value), quote(prev.value), prev.line, quote(name.value), name.line))
			continue
		}
		seen[strings.ToLower(name.value)] = name
		v, ok := s.l.scalar(t.vals[i], s.kind, s.label, s.key(k))
		if !ok {
			s.l.origin.reported[fieldRef{s.kind, s.i, s.key(k)}] = true
			continue
		}
		if err := checkHeader(name.value, v); err != nil {
			s.fail(name, s.key(k), err) // on its line; checkConfig leaves the headers alone
			continue
		}
		m[name.value] = v
	}
	return m
}
