package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/kit/backoff"
)

// Backoff of a webhook's retries: the wait before retry n is drawn from
// [d/2, d], d = notifyBackoff·2^(n-1) capped at notifyMaxBackoff (see
// backend/kit/backoff). Variables, so that tests make them short.
var (
	notifyBackoff    = time.Second
	notifyMaxBackoff = 30 * time.Second
)

// FailureNotice is the JSON body a [Webhook] is sent for a failed run.
// The package documentation shows one, under "Failure notifications".
type FailureNotice struct {
	// Job is the scheduled job's name, or the partitioned job's group.
	Job string `json:"job"`
	// Lease is the term's lease: the job's name, or "{group}.{p}".
	Lease string `json:"lease"`
	// Group and Partition are a partitioned job's; absent for a
	// scheduled job.
	Group     string `json:"group,omitempty"`
	Partition *int   `json:"partition,omitempty"`
	// Token is the fencing token of the term the run ran in.
	Token uint64 `json:"token"`
	// Member is the member that ran it.
	Member string `json:"member"`
	// Source says why the run started: normal, misfire, trigger or
	// fail-over (see [simba.RunSource]).
	Source string `json:"source"`
	// Args are a trigger's arguments, absent without.
	Args map[string]string `json:"args,omitempty"`
	// Attempts is how many attempts the run made (see [simba.RetryPolicy]).
	Attempts int `json:"attempts"`
	// Start is when its first attempt started, RFC 3339 with nanoseconds.
	Start time.Time `json:"start"`
	// Duration is from then to the end of its last attempt, in Go's
	// syntax ("1.5s"), and DurationMs the same in milliseconds.
	Duration   string `json:"duration"`
	DurationMs int64  `json:"durationMs"`
	// Error is the last attempt's error.
	Error string `json:"error"`
	// Failures is the number of failed runs in a row, this one included.
	Failures int `json:"failures"`
}

// noticeOf is the notice of job's failed run f.
func noticeOf(job string, f simba.RunFailure) FailureNotice {
	n := FailureNotice{
		Job: job, Lease: f.Election, Group: f.Group, Token: f.Token, Member: f.Member,
		Source: string(f.Source), Args: f.Args, Attempts: f.Attempts, Start: f.Start,
		Duration: f.Duration.String(), DurationMs: f.Duration.Milliseconds(), Failures: f.Failures,
	}
	if f.Group != "" {
		p := f.Partition
		n.Partition = &p
	}
	if f.Err != nil {
		n.Error = f.Err.Error()
	}
	return n
}

// notifications are the notifications of one [Jobs] in flight: their
// goroutines, which [Jobs.Shutdown] waits for, and what they share.
type notifications struct {
	client   *http.Client
	stopping <-chan struct{} // closed when the jobs stop: no more retries

	mu      sync.Mutex
	closed  bool // no notification starts any more
	pending int  // notifications in flight
	wg      sync.WaitGroup
}

func newNotifications(stopping <-chan struct{}) *notifications {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &notifications{
		client: &http.Client{
			Transport: tr,
			// A redirect is an answer other than 2xx: a failure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		stopping: stopping,
	}
}

// begin counts a notification in, unless they are closed.
func (ns *notifications) begin() bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.closed {
		return false
	}
	ns.wg.Add(1)
	ns.pending++
	return true
}

// end counts a notification out.
func (ns *notifications) end() {
	ns.mu.Lock()
	ns.pending--
	ns.mu.Unlock()
	ns.wg.Done()
}

// inFlight returns how many notifications are in flight.
func (ns *notifications) inFlight() int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.pending
}

// close refuses new notifications, waits for those in flight (the jobs
// have stopped, so none retries again), and closes the idle connections.
func (ns *notifications) close() {
	ns.mu.Lock()
	ns.closed = true
	ns.mu.Unlock()
	ns.wg.Wait()
	ns.client.CloseIdleConnections()
}

// notifier sends the notifications of one job to its webhook.
type notifier struct {
	job   string
	hook  Webhook // defaults applied
	log   *slog.Logger
	ns    *notifications
	slots chan struct{} // one per notification in flight
}

func newNotifier(job string, hook Webhook, log *slog.Logger, ns *notifications) *notifier {
	return &notifier{job: job, hook: hook.withDefaults(), log: log, ns: ns, slots: make(chan struct{}, maxInFlight)}
}

// handle is the job's failure handler (simba.WithFailureHandler): it
// starts the notification of f and returns at once. The notification ends
// with ctx (the client's closing) too.
func (n *notifier) handle(ctx context.Context, f simba.RunFailure) {
	select {
	case n.slots <- struct{}{}:
	default:
		n.log.Warn("failure notification dropped: too many in flight", "job", n.job, "lease", f.Election, "token", f.Token, "in_flight", maxInFlight)
		return
	}
	if !n.ns.begin() {
		<-n.slots
		n.log.Warn("failure notification dropped: the jobs have stopped", "job", n.job, "lease", f.Election, "token", f.Token)
		return
	}
	body, err := json.Marshal(noticeOf(n.job, f))
	if err != nil { // a FailureNotice always marshals
		n.ns.end()
		<-n.slots
		n.log.Warn("failure notification not sent", "job", n.job, "err", err)
		return
	}
	go func() {
		defer n.ns.end()
		defer func() { <-n.slots }()
		n.deliver(ctx, body)
	}()
}

// deliver posts body until an attempt succeeds, the attempts are spent,
// the jobs stop or ctx ends; it logs a notification that was not
// delivered at Warn.
func (n *notifier) deliver(ctx context.Context, body []byte) {
	var last error
	attempt := 0
	for attempt < n.hook.Attempts {
		if attempt > 0 {
			wait := backoff.Jitter(backoff.Step(attempt, notifyBackoff, notifyMaxBackoff))
			if !n.sleep(ctx, wait) {
				break
			}
		}
		attempt++
		last = n.post(ctx, body)
		if last == nil {
			n.log.Debug("failure notification delivered", "job", n.job, "webhook", n.where(), "attempt", attempt)
			return
		}
		n.log.Debug("failure notification attempt failed", "job", n.job, "webhook", n.where(), "attempt", attempt, "err", last)
	}
	why := "attempts spent"
	switch {
	case ctx.Err() != nil:
		why = "the client closed"
	case attempt < n.hook.Attempts:
		why = "the jobs stopped"
	}
	n.log.Warn("failure notification not delivered", "job", n.job, "webhook", n.where(), "attempts", attempt, "why", why, "err", last)
}

// sleep waits for d; it reports false, at once, when the jobs stop or ctx
// ends first.
func (n *notifier) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-n.ns.stopping:
	}
	return false
}

// post makes one attempt, bounded by the webhook's timeout: nil for a 2xx
// answer.
func (n *notifier) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, n.hook.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.hook.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%snotification to %s: %w", prefix, n.where(), err)
	}
	for k, v := range n.hook.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.ns.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = n.where() // no query, no password in logs
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return fmt.Errorf("%snotification: no answer within %v: %w", prefix, n.hook.Timeout, err)
		}
		return fmt.Errorf("%snotification: %w", prefix, err)
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so that the connection is reused
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(head))
		if msg != "" {
			msg = ": " + quote(msg)
		}
		return fmt.Errorf("%snotification to %s: answered %s%s", prefix, n.where(), resp.Status, msg)
	}
	return nil
}

// where is the webhook's URL as logs show it: without its user
// information, query and fragment, which may hold secrets.
func (n *notifier) where() string {
	u, err := url.Parse(n.hook.URL)
	if err != nil {
		return "the webhook"
	}
	return u.Scheme + "://" + u.Host + u.Path
}
