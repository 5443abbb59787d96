package simba

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Instrument names, documented for users at WithMeterProvider.
const (
	// metricLeader is 1 while this client holds a term of the election
	// (simba.election), else 0. An up-down counter.
	metricLeader = "simba.election.leader"
	// metricPartitionsHeld is the number of partitions of the group
	// (simba.group) this client holds terms of. An up-down counter.
	metricPartitionsHeld = "simba.group.partitions.held"
	// metricTermsStarted counts terms begun by this client.
	metricTermsStarted = "simba.term.started"
	// metricTermsRevoked counts terms ended, by simba.reason.
	metricTermsRevoked = "simba.term.revoked"
	// metricRuns counts runs of task functions, by simba.result.
	metricRuns = "simba.run.completed"
	// metricRunDuration is the duration of runs, in seconds, by simba.result.
	metricRunDuration = "simba.run.duration"
	// metricHandOffDuration is the time from a term's revocation to the end
	// of its hand-off (run exited, lease released), in seconds.
	metricHandOffDuration = "simba.handoff.duration"
	// metricRenewalDuration is the round trip of session renewals, in
	// seconds.
	metricRenewalDuration = "simba.session.renewal.duration"
	// metricRenewalFailures counts renewals that failed.
	metricRenewalFailures = "simba.session.renewal.failures"
	// metricSessionsLost counts sessions that ended, by simba.reason.
	metricSessionsLost = "simba.session.lost"
	// metricDeadlineHeadroom is the time left before the session deadline,
	// in seconds, observed at collection; 0 without a live session.
	metricDeadlineHeadroom = "simba.session.deadline.headroom"
	// metricMissedStarts counts planned schedule starts that passed during
	// an overrunning run.
	metricMissedStarts = "simba.schedule.missed"
	// metricSkippedStarts counts planned schedule starts skipped, by
	// simba.reason.
	metricSkippedStarts = "simba.schedule.skipped"
	// metricRetries counts the retries of failed runs.
	metricRetries = "simba.run.retries"
	// metricEventsDropped counts events dropped from the event queue.
	metricEventsDropped = "simba.events.dropped"
)

// WithMeterProvider sets where the client's instruments come from (default:
// the global provider from [otel.GetMeterProvider], which records nothing
// until the application installs one). The instruments, under the meter
// "github.com/simba-go/simba":
//
//   - simba.election.leader: 1 while this client holds a term of the
//     election (attribute simba.election), else 0. An up-down counter.
//   - simba.group.partitions.held: the partitions of the group
//     (simba.group) this client holds terms of. An up-down counter.
//   - simba.term.started: terms begun by this client.
//   - simba.term.revoked: terms ended, by simba.reason.
//   - simba.run.completed: runs of task functions, by simba.result.
//   - simba.run.duration: the duration of runs, in seconds, by
//     simba.result.
//   - simba.handoff.duration: the time from a term's revocation to the end
//     of its hand-off (run exited, lease released), in seconds.
//   - simba.session.renewal.duration: the round trip of session renewals,
//     in seconds.
//   - simba.session.renewal.failures: renewals that failed.
//   - simba.session.lost: sessions that ended, by simba.reason.
//   - simba.session.deadline.headroom: the time left before the session
//     deadline, in seconds, observed at collection; 0 without a live
//     session.
//   - simba.schedule.missed: planned schedule starts that passed during an
//     overrunning run.
//   - simba.schedule.skipped: planned schedule starts that did not run, by
//     simba.reason: overlap, misfire, catch_up_window, disabled or paused
//     (see [Skipped]).
//   - simba.run.retries: retries of failed runs (see [RetryPolicy]).
//   - simba.events.dropped: events dropped because the event handlers fell
//     16,384 events behind (see [Event]).
//
// Attributes are low-cardinality only: simba.election (a plain election's
// name) or simba.group (a partition group's name), and small enums
// (simba.reason, simba.result). Never member ids, session ids, tokens or
// partition numbers.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrInvalidArgument)
		}
		o.meterProvider = mp
		return nil
	}
}

// secondsBuckets spans a loopback round trip to a long run.
var secondsBuckets = metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

// metrics holds a client's instruments.
type metrics struct {
	leader      metric.Int64UpDownCounter
	held        metric.Int64UpDownCounter
	started     metric.Int64Counter
	revoked     metric.Int64Counter
	runs        metric.Int64Counter
	runDuration metric.Float64Histogram
	handOff     metric.Float64Histogram
	renewal     metric.Float64Histogram
	renewFails  metric.Int64Counter
	lost        metric.Int64Counter
	missed      metric.Int64Counter
	skippedRuns metric.Int64Counter
	retries     metric.Int64Counter
	dropped     metric.Int64Counter
	headroom    metric.Registration

	mu    sync.Mutex
	names map[metricsKey]*nameMetrics
}

// metricsKey names a plain election or a group.
type metricsKey struct {
	group bool
	name  string
}

// nameMetrics holds the measurement options of one election or group, each
// built the first time it is needed, so that recording allocates nothing
// and an election that never sees a reason or result does not pay for it.
type nameMetrics struct {
	attr    attribute.KeyValue
	base    []metric.AddOption
	record  []metric.RecordOption
	reason  [lastRevokeReason + 1][]metric.AddOption   // guarded by metrics.mu
	skip    [SkipPaused + 1][]metric.AddOption         // guarded by metrics.mu
	result  [ResultCancelled + 1][]metric.AddOption    // guarded by metrics.mu
	resultR [ResultCancelled + 1][]metric.RecordOption // guarded by metrics.mu
}

func newMetrics(mp metric.MeterProvider, headroom func() float64) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter("github.com/simba-go/simba")
	m := &metrics{names: map[metricsKey]*nameMetrics{}}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.leader, err = meter.Int64UpDownCounter(metricLeader, metric.WithDescription("1 while this client leads the election"))
	add(err)
	m.held, err = meter.Int64UpDownCounter(metricPartitionsHeld, metric.WithDescription("partitions of the group this client holds"))
	add(err)
	m.started, err = meter.Int64Counter(metricTermsStarted, metric.WithDescription("terms begun by this client"))
	add(err)
	m.revoked, err = meter.Int64Counter(metricTermsRevoked, metric.WithDescription("terms of this client that ended, by reason"))
	add(err)
	m.runs, err = meter.Int64Counter(metricRuns, metric.WithDescription("runs of task functions, by result"))
	add(err)
	m.runDuration, err = meter.Float64Histogram(metricRunDuration, metric.WithUnit("s"), metric.WithDescription("duration of runs"), secondsBuckets)
	add(err)
	m.handOff, err = meter.Float64Histogram(metricHandOffDuration, metric.WithUnit("s"), metric.WithDescription("time from a term's revocation to the end of its hand-off"), secondsBuckets)
	add(err)
	m.renewal, err = meter.Float64Histogram(metricRenewalDuration, metric.WithUnit("s"), metric.WithDescription("round trip of session renewals"), secondsBuckets)
	add(err)
	m.renewFails, err = meter.Int64Counter(metricRenewalFailures, metric.WithDescription("session renewals that failed"))
	add(err)
	m.lost, err = meter.Int64Counter(metricSessionsLost, metric.WithDescription("sessions that ended, by reason"))
	add(err)
	m.missed, err = meter.Int64Counter(metricMissedStarts, metric.WithDescription("planned schedule starts missed during overruns"))
	add(err)
	m.skippedRuns, err = meter.Int64Counter(metricSkippedStarts, metric.WithDescription("planned schedule starts skipped, by reason"))
	add(err)
	m.retries, err = meter.Int64Counter(metricRetries, metric.WithDescription("retries of failed runs"))
	add(err)
	m.dropped, err = meter.Int64Counter(metricEventsDropped, metric.WithDescription("events dropped because the event handlers fell behind"))
	add(err)
	gauge, err := meter.Float64ObservableGauge(metricDeadlineHeadroom, metric.WithUnit("s"), metric.WithDescription("time left before the session deadline"))
	add(err)
	if err == nil {
		m.headroom, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			o.ObserveFloat64(gauge, headroom())
			return nil
		}, gauge)
		add(err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("simba: creating instruments: %w", err)
	}
	return m, nil
}

// close unregisters the observable instruments.
func (m *metrics) close() {
	if m.headroom != nil {
		m.headroom.Unregister()
	}
}

// of returns the measurement options of the election or group of ref.
func (m *metrics) of(ref TermRef) *nameMetrics {
	key := metricsKey{name: ref.Election}
	if ref.Group != "" {
		key = metricsKey{group: true, name: ref.Group}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, ok := m.names[key]; ok {
		return n
	}
	attr := attribute.String("simba.election", key.name)
	if key.group {
		attr = attribute.String("simba.group", key.name)
	}
	set := attribute.NewSet(attr)
	n := &nameMetrics{
		attr:   attr,
		base:   []metric.AddOption{metric.WithAttributeSet(set)},
		record: []metric.RecordOption{metric.WithAttributeSet(set)},
	}
	m.names[key] = n
	return n
}

// reasonOpts returns the options for a revocation of n for reason.
func (m *metrics) reasonOpts(n *nameMetrics, reason RevokeReason) []metric.AddOption {
	if reason < 0 || int(reason) >= len(n.reason) {
		return n.base
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n.reason[reason] == nil {
		n.reason[reason] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(n.attr, attribute.String("simba.reason", reason.metricName())))}
	}
	return n.reason[reason]
}

// resultOpts returns the options for a run of n with result.
func (m *metrics) resultOpts(n *nameMetrics, result Result) ([]metric.AddOption, []metric.RecordOption) {
	if result < 0 || int(result) >= len(n.result) {
		return n.base, n.record
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n.result[result] == nil {
		s := attribute.NewSet(n.attr, attribute.String("simba.result", result.String()))
		n.result[result] = []metric.AddOption{metric.WithAttributeSet(s)}
		n.resultR[result] = []metric.RecordOption{metric.WithAttributeSet(s)}
	}
	return n.result[result], n.resultR[result]
}

var bg = context.Background()

func (m *metrics) elected(ref TermRef) {
	n := m.of(ref)
	m.started.Add(bg, 1, n.base...)
	if ref.Group != "" {
		m.held.Add(bg, 1, n.base...)
	} else {
		m.leader.Add(bg, 1, n.base...)
	}
}

func (m *metrics) revokedTerm(ref TermRef, reason RevokeReason) {
	n := m.of(ref)
	m.revoked.Add(bg, 1, m.reasonOpts(n, reason)...)
	if ref.Group != "" {
		m.held.Add(bg, -1, n.base...)
	} else {
		m.leader.Add(bg, -1, n.base...)
	}
}

func (m *metrics) ran(ref TermRef, result Result, d time.Duration) {
	add, rec := m.resultOpts(m.of(ref), result)
	m.runs.Add(bg, 1, add...)
	m.runDuration.Record(bg, d.Seconds(), rec...)
}

func (m *metrics) handedOff(ref TermRef, d time.Duration) {
	m.handOff.Record(bg, d.Seconds(), m.of(ref).record...)
}

func (m *metrics) misfired(ref TermRef, missed int) {
	m.missed.Add(bg, int64(missed), m.of(ref).base...)
}

func (m *metrics) skipped(ref TermRef, reason SkipReason, n int) {
	m.skippedRuns.Add(bg, int64(n), m.skipOpts(m.of(ref), reason)...)
}

func (m *metrics) retried(ref TermRef) {
	m.retries.Add(bg, 1, m.of(ref).base...)
}

// skipOpts returns the options for starts of n skipped for reason.
func (m *metrics) skipOpts(n *nameMetrics, reason SkipReason) []metric.AddOption {
	if reason < 0 || int(reason) >= len(n.skip) {
		return n.base
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n.skip[reason] == nil {
		n.skip[reason] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(n.attr, attribute.String("simba.reason", reason.metricName())))}
	}
	return n.skip[reason]
}

// metricName is the reason as a metric attribute value.
func (r SkipReason) metricName() string {
	switch r {
	case SkipOverlap:
		return "overlap"
	case SkipMisfire:
		return "misfire"
	case SkipCatchUpWindow:
		return "catch_up_window"
	case SkipDisabled:
		return "disabled"
	case SkipPaused:
		return "paused"
	}
	return "unknown"
}

func (m *metrics) eventsDropped(n int) { m.dropped.Add(bg, int64(n)) }

func (m *metrics) renewed(d time.Duration, err error) {
	m.renewal.Record(bg, d.Seconds())
	if err != nil {
		m.renewFails.Add(bg, 1)
	}
}

var lostReasons = func() map[RevokeReason][]metric.AddOption {
	out := map[RevokeReason][]metric.AddOption{}
	for r := RevokeStopped; r <= lastRevokeReason; r++ {
		out[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("simba.reason", r.metricName())))}
	}
	return out
}()

func (m *metrics) sessionLost(reason RevokeReason) {
	m.lost.Add(bg, 1, lostReasons[reason]...)
}

// metricName is the reason as a metric attribute value.
func (r RevokeReason) metricName() string {
	switch r {
	case RevokeStopped:
		return "stopped"
	case RevokeClosed:
		return "closed"
	case RevokeYielded:
		return "yielded"
	case RevokeDeadline:
		return "deadline"
	case RevokeSessionLost:
		return "session_lost"
	case RevokeLeaseLost:
		return "lease_lost"
	case RevokeDisabled:
		return "disabled"
	case RevokeResigned:
		return "resigned"
	case RevokeDrained:
		return "drained"
	case RevokePaused:
		return "paused"
	case RevokeStuck:
		return "stuck"
	}
	return "unknown"
}
