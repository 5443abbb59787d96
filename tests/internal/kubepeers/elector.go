package kubepeers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/simba-go/simba/tests/internal/peerkit"
)

// Leadership is one spell of leadership as a client-go elector believes
// it: from OnStartedLeading to the end of its ctx (see package peerkit;
// its TTLEnd is its End).
type Leadership = peerkit.Leadership

func newLeadership(start time.Time) *Leadership { return peerkit.NewLeadership(start) }

// Config configures an [Elector].
type Config struct {
	// Client is the elector's clientset: one per process, as a
	// controller's manager makes.
	Client kubernetes.Interface
	// Namespace and Name name the Lease object of the election.
	Namespace, Name string
	// Identity is the elector's holder identity (unique per contender).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's (its
	// core components use 15 s, 10 s and 2 s). LeaseDuration is written
	// into the Lease in whole seconds.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ReleaseOnCancel clears the holder in the Lease when Run's ctx ends.
	ReleaseOnCancel bool
	// OnLead, if not nil, is called with each spell of leadership when it
	// starts, on the goroutine of OnStartedLeading.
	OnLead func(*Leadership)
}

// Elector is client-go's LeaderElector on a LeaseLock.
type Elector struct {
	cfg Config
	le  *leaderelection.LeaderElector

	mu      sync.Mutex
	current *Leadership
	// acquired is closed when client-go records "became leader", before
	// it starts OnStartedLeading; exited when OnStartedLeading returns.
	acquired, exited chan struct{}
	acquireOnce      sync.Once
}

// New returns an elector; client-go checks the durations (LeaseDuration >
// RenewDeadline > 1.2 × RetryPeriod > 0).
func New(cfg Config) (*Elector, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubepeers: nil Client")
	}
	if cfg.LeaseDuration%time.Second != 0 {
		return nil, fmt.Errorf("kubepeers: LeaseDuration %v is not whole seconds (the Lease holds whole seconds)", cfg.LeaseDuration)
	}
	e := &Elector{cfg: cfg, acquired: make(chan struct{}), exited: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &lock{Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
			Client:     cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
		}, e: e},
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: cfg.ReleaseOnCancel,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: e.started,
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("kubepeers: %w", err)
	}
	e.le = le
	return e, nil
}

// started is OnStartedLeading: the work of a controller runs here until
// ctx ends. client-go runs it on a goroutine of its own; Run waits for it.
func (e *Elector) started(ctx context.Context) {
	defer close(e.exited)
	l := newLeadership(time.Now())
	e.mu.Lock()
	e.current = l
	e.mu.Unlock()
	if e.cfg.OnLead != nil {
		e.cfg.OnLead(l)
	}
	<-ctx.Done()
	l.Finish(time.Now(), time.Time{})
}

// lock is the LeaseLock, telling the elector when client-go acquired it.
type lock struct {
	resourcelock.Interface
	e *Elector
}

func (l *lock) RecordEvent(s string) {
	if s == "became leader" {
		l.e.acquireOnce.Do(func() { close(l.e.acquired) })
	}
	l.Interface.RecordEvent(s)
}

// Run contends until ctx ends or the elector stops leading (client-go's
// LeaderElector.Run: an elector that lost its leadership does not
// contend again; make a new one, as a controller's process exits), then
// waits for OnStartedLeading to return. With ReleaseOnCancel, Run returns
// after the release's update (bounded by RenewDeadline). client-go's log
// lines are discarded. Run may be called once.
func (e *Elector) Run(ctx context.Context) {
	e.le.Run(klog.NewContext(ctx, logr.Discard()))
	select {
	case <-e.acquired:
		// client-go started OnStartedLeading, whose ctx has ended.
		<-e.exited
	default:
	}
}

// Leading returns the current spell of leadership, or nil if the elector
// has not led.
func (e *Elector) Leading() *Leadership {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.current
}
