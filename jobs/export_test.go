package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/simba-go/simba"
)

// NewNotifier returns the failure handler that a job with the webhook w
// installs with simba.WithFailureHandler, and a function that does what
// Jobs does at its end: no more retries, then a wait for the notifications
// in flight.
func NewNotifier(job string, w Webhook, log *slog.Logger) (handle func(context.Context, simba.RunFailure), stop func()) {
	stopping := make(chan struct{})
	ns := newNotifications(stopping)
	n := newNotifier(job, w, log, ns)
	return n.handle, func() {
		close(stopping)
		ns.close()
	}
}

// SetNotifyBackoff sets the first wait and the cap of the webhooks'
// backoff until the returned function restores them.
func SetNotifyBackoff(first, limit time.Duration) (restore func()) {
	oldFirst, oldLimit := notifyBackoff, notifyMaxBackoff
	notifyBackoff, notifyMaxBackoff = first, limit
	return func() { notifyBackoff, notifyMaxBackoff = oldFirst, oldLimit }
}

// MaxInFlight is how many notifications of one job may be in flight.
const MaxInFlight = maxInFlight
