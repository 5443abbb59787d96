package handoffbench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/await"
)

// Notice arms a watcher of the benchmark's own, on a client or connection
// of its own, for the deletion of the holding (name, token) that a session
// acquired: it returns once the watch is in place, and the channel then
// delivers the instant the watcher saw the delete.
type Notice func(ctx context.Context, name string, token uint64) (<-chan time.Time, error)

// SimbaPair is what [SimbaSide] hands over between: two clients, each on a
// backend wrapped by [Wrap] with its probe.
type SimbaPair struct {
	Clients  [2]*simba.Client
	Probes   [2]*Probe
	Election string        // the election's name
	Notice   Notice        // the independent watcher
	Timeout  time.Duration // bounds every wait of a round
}

// SimbaSide hands an election over between the pair's clients: the
// holder's LeaderTask.Stop → the other's task running, with the [Parts]
// from the probes and the independent watcher. Client 0 takes the
// election first, before SimbaSide returns; stop returns once the last
// holder's task has stopped.
func SimbaSide(name string, role Role, p SimbaPair) (side Side, stop func() error, err error) {
	h := &simbaSide{p: p, ch: make(chan time.Time, 1)}
	if h.tasks[0], err = h.start(0); err != nil {
		return Side{}, nil, err
	}
	if _, err := await.Within(h.ch, p.Timeout, "%s: no first term", name); err != nil {
		h.tasks[0].Stop()
		return Side{}, nil, err
	}
	return Side{Name: name, Role: role, Once: h.once}, func() error { return h.tasks[h.holder].Close() }, nil
}

type simbaSide struct {
	p      SimbaPair
	tasks  [2]*simba.LeaderTask
	holder int
	ch     chan time.Time
}

func (h *simbaSide) start(i int) (*simba.LeaderTask, error) {
	return h.p.Clients[i].Election(h.p.Election).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		h.ch <- time.Now()
		<-ctx.Done()
		return nil
	})
}

func (h *simbaSide) once(settle time.Duration) (Round, error) {
	other := 1 - h.holder
	var err error
	if h.tasks[other], err = h.start(other); err != nil {
		return Round{}, err
	}
	time.Sleep(settle)
	_, name, token := h.p.Probes[h.holder].Acquired()
	ctx, cancel := context.WithTimeout(context.Background(), h.p.Timeout)
	defer cancel()
	seen, err := h.p.Notice(ctx, name, token)
	if err != nil {
		return Round{}, fmt.Errorf("arming the watcher: %w", err)
	}
	h.p.Probes[h.holder].Reset()
	t0 := time.Now()
	h.tasks[h.holder].Stop()
	done := h.tasks[h.holder].Done()
	running, err := await.Within(h.ch, h.p.Timeout, "no hand-off")
	if err != nil {
		return Round{}, err
	}
	if _, err := await.Within(done, h.p.Timeout, "the old holder's task did not stop"); err != nil {
		return Round{}, err
	}
	notified, err := await.Within(seen, h.p.Timeout, "the independent watcher saw no delete of %s token %d", name, token)
	if err != nil {
		return Round{}, err
	}
	relStart, relEnd := h.p.Probes[h.holder].Released()
	acquired, _, newToken := h.p.Probes[other].Acquired()
	switch {
	case relStart.IsZero():
		return Round{}, errors.New("the holder made no release call")
	case acquired.Before(t0):
		return Round{}, errors.New("the waiter's Acquire did not return after the Stop")
	case newToken <= token:
		return Round{}, fmt.Errorf("token %d after %d", newToken, token)
	}
	h.tasks[h.holder] = nil
	h.holder = other
	return Round{Total: running.Sub(t0), Parts: &Parts{
		StopToRelease: relStart.Sub(t0),
		Release:       relEnd.Sub(relStart),
		Notify:        notified.Sub(relStart),
		Waiter:        acquired.Sub(notified),
		TaskStart:     running.Sub(acquired),
	}}, nil
}
