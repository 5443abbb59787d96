package mysql

import (
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba/backend/kit/candidacy"
	"github.com/simba-go/simba/backend/kit/wake"
)

// hub wakes the backend's waiters and watchers. MySQL has no LISTEN/NOTIFY,
// so what it hears of is:
//
//   - the changes made through this Backend (a registration, a
//     withdrawal, a release, a session's end, a member's join or leave, a
//     record's write), at once;
//   - the holder's bell, for a waiter of a lease held by another process
//     (bells.go): a hand-off between processes wakes the next waiter on
//     the release, with no poll;
//   - for watches of members and records only, a hint every poll
//     interval (WithPollInterval): a change made by another process is
//     seen at the next one.
//
// Topics are "c <lease>" (queues), "m <group>" (members); record watches
// subscribe by key prefix. A subscriber's function must not block.
type hub struct {
	b *Backend

	queues  wake.Registry // "c <lease>"
	watches wake.Registry // "m <group>", and record keys by prefix

	once  sync.Once
	bells *bells
}

func newHub(b *Backend) *hub {
	h := &hub{b: b}
	if !b.noBells {
		h.bells = newBells(b)
	}
	return h
}

// subscribe calls f on each change of topic until cancel.
func (h *hub) subscribe(topic string, f func()) (cancel func()) {
	if strings.HasPrefix(topic, "c ") {
		return h.queues.Subscribe(topic, f)
	}
	return h.watches.Subscribe(topic, f)
}

// subscribeRecords calls f on each change of a record under prefix.
func (h *hub) subscribeRecords(prefix string, f func()) (cancel func()) {
	return h.watches.SubscribePrefix(prefix, f)
}

// start starts the watches' ticker, once.
func (h *hub) start() {
	h.once.Do(func() { h.b.wg.Go(h.tick) })
}

// tick wakes every watch every poll interval.
func (h *hub) tick() {
	t := time.NewTicker(h.b.poll)
	defer t.Stop()
	for {
		select {
		case <-h.b.ctx.Done():
			return
		case <-t.C:
			wake.Call(h.watches.All())
		}
	}
}

// changed wakes the waiters of lease name.
func (h *hub) changed(name string) { wake.Call(h.queues.Collect([]string{"c " + name}, nil)) }

// memberChanged wakes the watches of group.
func (h *hub) memberChanged(group string) { wake.Call(h.watches.Collect([]string{"m " + group}, nil)) }

// recordChanged wakes the watches of key.
func (h *hub) recordChanged(key string) { wake.Call(h.watches.Collect(nil, []string{key})) }

// changedSession wakes every waiter and watch: a session's row was
// deleted, with its candidacies and memberships.
func (h *hub) changedSession(*session) {
	wake.Call(h.queues.All())
	wake.Call(h.watches.All())
}

// granted rings the bell of name for the holding (s, token) (bells.go).
func (h *hub) granted(s *session, name string, token uint64) {
	if h.bells != nil {
		h.bells.hold(s, name, token)
	}
}

// released notes the end of the holding (s, name, token): the waiters of
// name in this process wake now, those of other processes by its bell.
func (h *hub) released(s *session, name string, token uint64) {
	if h.bells != nil {
		h.bells.free(s, name, token)
	}
	h.changed(name)
}

// sessionEnded frees the bells of s's holdings.
func (h *hub) sessionEnded(s *session) {
	if h.bells != nil {
		h.bells.freeSession(s)
	}
}

// follow has w, a waiter of s, also wake on the bell of its lease's
// holder, when it rings (bells.go).
func (h *hub) follow(w *candidacy.Waiter, s *session) {
	if h.bells != nil {
		h.bells.follow(w, s)
	}
}
