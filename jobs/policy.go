package jobs

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba"
)

// policies are what a job says happens to each run: the options of
// [simba.Schedule] beyond its timing, and the progress watchdog.
type policies struct {
	retry         simba.RetryPolicy
	timeout       time.Duration
	overlap       simba.OverlapPolicy
	maxConcurrent int
	catchUp       time.Duration
	pauseAfter    int
	progress      time.Duration
}

// apply returns s with the policies set. Zero values are the defaults,
// so they are left out and s is the schedule it was.
func (p policies) apply(s simba.Schedule) simba.Schedule {
	if r := p.retry; r.Attempts != 0 || r.Backoff != 0 || r.MaxBackoff != 0 || r.Multiplier != 0 || r.Jitter != 0 || r.RetryIf != nil {
		s = s.WithRetry(r)
	}
	if p.timeout != 0 {
		s = s.WithTimeout(p.timeout)
	}
	if p.overlap != 0 {
		s = s.WithOverlap(p.overlap)
	}
	if p.maxConcurrent != 0 {
		s = s.WithMaxConcurrent(p.maxConcurrent)
	}
	if p.catchUp != 0 {
		s = s.WithCatchUpWindow(p.catchUp)
	}
	if p.pauseAfter != 0 {
		s = s.WithPauseAfter(p.pauseAfter)
	}
	return s
}

// Keys of the policies, as errors name them.
const (
	retryKey         = "retry"
	timeoutKey       = "timeout"
	overlapKey       = "overlap"
	maxConcurrentKey = "maxConcurrent"
	catchUpKey       = "catchUpWindow"
	pauseAfterKey    = "pauseAfterFailures"
	progressKey      = "progressTimeout"
	notifyKey        = "notify"
)

// overlapNames are the file spellings of the overlap policies.
var overlapNames = []simba.OverlapPolicy{simba.OverlapSkip, simba.OverlapBufferOne, simba.OverlapCancelRunning, simba.OverlapAllow}

// parseOverlap reads an overlap policy in any relaxed spelling
// (buffer-one, bufferOne, BUFFER_ONE).
func parseOverlap(v string) (simba.OverlapPolicy, bool) {
	for _, p := range overlapNames {
		if normalKey(p.String()) == normalKey(strings.TrimSpace(v)) {
			return p, true
		}
	}
	return 0, false
}

// policies adds the problems of a job's policies: each value on its own,
// maxConcurrent without overlap allow, and whatever else simba refuses.
func (c jobChecker) policies(p policies) {
	before := len(c.p.errs)
	r := p.retry
	if r.Attempts < 0 {
		c.add(retryKey+".attempts", fmt.Errorf("%w: must not be negative, got %d", ErrInvalidValue, r.Attempts))
	}
	if r.Backoff < 0 {
		c.add(retryKey+".backoff", fmt.Errorf("%w: must not be negative, got %v", ErrDuration, r.Backoff))
	}
	if r.MaxBackoff < 0 {
		c.add(retryKey+".maxBackoff", fmt.Errorf("%w: must not be negative, got %v", ErrDuration, r.MaxBackoff))
	}
	if r.Multiplier != 0 && !(r.Multiplier >= 1) {
		c.add(retryKey+".multiplier", fmt.Errorf("%w: must be at least 1, got %v", ErrInvalidValue, r.Multiplier))
	}
	if !(r.Jitter >= 0 && r.Jitter <= 1) {
		c.add(retryKey+".jitter", fmt.Errorf("%w: must be from 0 to 1, got %v", ErrInvalidValue, r.Jitter))
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{timeoutKey, p.timeout}, {catchUpKey, p.catchUp}, {progressKey, p.progress}} {
		if d.v < 0 {
			c.add(d.key, fmt.Errorf("%w: must not be negative, got %v", ErrDuration, d.v))
		}
	}
	if p.overlap < 0 || p.overlap > simba.OverlapAllow {
		c.add(overlapKey, fmt.Errorf("%w: unknown overlap policy %d", ErrInvalidValue, int(p.overlap)))
	}
	switch {
	case p.maxConcurrent < 0:
		c.add(maxConcurrentKey, fmt.Errorf("%w: must be at least 1, got %d", ErrInvalidValue, p.maxConcurrent))
	case p.maxConcurrent > 0 && p.overlap != simba.OverlapAllow:
		c.add(maxConcurrentKey, fmt.Errorf("%w: %d runs at once needs overlap: allow, not %s", ErrInvalidValue, p.maxConcurrent, overlapShown(p.overlap)))
	}
	if p.pauseAfter < 0 {
		c.add(pauseAfterKey, fmt.Errorf("%w: must not be negative, got %d", ErrInvalidValue, p.pauseAfter))
	}
	if len(c.p.errs) > before || c.o.wasReported(c.kind, c.i, retryKey) {
		return
	}
	// Whatever simba refuses besides, on a timing known to be good.
	if err := p.apply(simba.FixedDelay(time.Second)).Err(); err != nil {
		c.add("", fmt.Errorf("%w: %w", ErrInvalidValue, err))
	}
}

// overlapShown names an overlap policy in errors: as files spell it, or
// "the default".
func overlapShown(p simba.OverlapPolicy) string {
	if p == 0 {
		return "the default (per misfire)"
	}
	return p.String()
}

// Notify says whom a job tells of its failed runs (key notify, in a job or
// at the top level of a file for every job without one of its own). Today
// it is a webhook; a Notify without one notifies nothing, which turns the
// Config's default off for a job.
//
// Notifications are sent by the node that ran the failed run, once per
// failed run (a run whose last attempt failed; see [simba.RetryPolicy]):
// [simba.WithFailureHandler] calls the notifier. In code, a function of
// your own can be given to every job with [WithTaskOptions] and
// simba.WithFailureHandler instead.
type Notify struct {
	// Webhook, when set, is sent a JSON POST per failed run (key webhook).
	Webhook *Webhook
}

// Webhook is an HTTP endpoint told of every failed run of a job with a
// POST of a JSON body (the package documentation shows it, under
// "Failure notifications"), with Content-Type application/json. An answer
// other than 2xx (redirects are not followed) and a request that fails or
// outlasts Timeout are failed attempts, retried after a jittered
// exponential backoff (from 1s, doubling, at most 30s) up to Attempts in
// all. A notification that still fails is logged at Warn with the job and
// the last error; it never holds the job up. At most 4 notifications of
// one job are in flight at once: a failed run past them is logged and not
// notified. [Jobs.Shutdown] waits for the notifications in flight, each at
// most until its attempt under way ends (Timeout), and makes no more
// retries.
type Webhook struct {
	// URL is where the notifications are sent: an absolute http or https
	// URL (key url). Placeholders make it secret-free in files:
	// url: ${ALERT_URL}.
	URL string
	// Timeout bounds each attempt (key timeout, default 5s). It must not
	// be negative.
	Timeout time.Duration
	// Attempts is the most attempts per notification, the first included
	// (key attempts, default 3). It must not be negative.
	Attempts int
	// Headers are sent with each request (key headers, a map of header
	// names to values), such as Authorization: "Bearer ${TOKEN}". Names
	// must be HTTP header names; Content-Type and Content-Length are set
	// by the notifier and refused here.
	Headers map[string]string
}

// Defaults of a webhook, and its bounds.
const (
	defaultWebhookTimeout  = 5 * time.Second
	defaultWebhookAttempts = 3
	maxInFlight            = 4 // notifications of one job in flight at once
)

// withDefaults returns w with its zero values set to the defaults.
func (w Webhook) withDefaults() Webhook {
	if w.Timeout == 0 {
		w.Timeout = defaultWebhookTimeout
	}
	if w.Attempts == 0 {
		w.Attempts = defaultWebhookAttempts
	}
	return w
}

// notify adds the problems of a notifier under key (notify).
func (c jobChecker) notify(n *Notify) {
	if n == nil || n.Webhook == nil {
		return
	}
	w := n.Webhook
	const key = notifyKey + ".webhook."
	if w.URL == "" {
		if !c.o.wasReported(c.kind, c.i, key+"url") {
			c.add(key+"url", fmt.Errorf("%w: missing; want an http or https URL", ErrInvalidValue))
		}
	} else if err := checkWebhookURL(w.URL); err != nil {
		c.add(key+"url", err)
	}
	if w.Timeout < 0 {
		c.add(key+"timeout", fmt.Errorf("%w: must not be negative, got %v", ErrDuration, w.Timeout))
	}
	if w.Attempts < 0 {
		c.add(key+"attempts", fmt.Errorf("%w: must not be negative, got %d", ErrInvalidValue, w.Attempts))
	}
	seen := map[string]string{}
	for _, name := range sortedNames(w.Headers) {
		if err := checkHeader(name, w.Headers[name]); err != nil {
			c.add(key+"headers", err)
		}
		if prev, dup := seen[strings.ToLower(name)]; dup {
			c.add(key+"headers", fmt.Errorf("%w: header %s given twice, as %s and as %s", ErrInvalidValue, quote(name), quote(prev), quote(name)))
		}
		seen[strings.ToLower(name)] = name
	}
}

// checkWebhookURL refuses what is not an absolute http or https URL with
// a host. The error shows the URL without its user information.
func checkWebhookURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%w: not a URL: %s", ErrInvalidValue, quote(redactURLString(s)))
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%w: %s is not an absolute http or https URL", ErrInvalidValue, quote(u.Redacted()))
	}
	return nil
}

// redactURLString is s without what may be a password, for a string that
// does not parse as a URL.
func redactURLString(s string) string {
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			return s[:i+3] + "…@" + s[at+1:]
		}
	}
	return s
}

// checkHeader refuses a header name that is not an HTTP token, one the
// notifier sets itself, and a value holding a line break or a NUL byte.
func checkHeader(name, value string) error {
	if name == "" || strings.IndexFunc(name, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
		return fmt.Errorf("%w: %s is not an HTTP header name", ErrInvalidValue, quote(name))
	}
	switch strings.ToLower(name) {
	case "content-type", "content-length":
		return fmt.Errorf("%w: %s is set by the notifier (application/json)", ErrInvalidValue, quote(name))
	}
	if strings.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("%w: the value of header %s holds a line break or a NUL byte", ErrInvalidValue, quote(name))
	}
	return nil
}

// isTokenChar reports whether r may appear in an HTTP header name (RFC
// 9110's tchar).
func isTokenChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return r < 0x80 && strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// effectiveNotify is the notifier of a job: its own, or the default.
func effectiveNotify(own, dflt *Notify) *Notify {
	if own != nil {
		return own
	}
	return dflt
}

// sortedNames returns the keys of m in order.
func sortedNames(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
