package simba

import (
	"context"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/records"
)

// healthStale is the age past which a health record is of a client gone
// without closing: the next client to start deletes it.
const healthStale = time.Hour

// renewalLog keeps a client's recent confirmed renewals, for its health
// record: how much of its term was left when each was confirmed.
type renewalLog struct {
	mu       sync.Mutex
	renewals []records.Renewal // the last records.HealthLen, oldest first
	failed   uint64            // renewals that failed since the client started
	fresh    bool              // changed since the record was last written
	reaped   bool              // stale records have been looked for
	key      string            // the key of the record last written, "" before

	// writing is held (a buffer of one) by the record's write or deletion
	// under way: nothing is written after the deletion at Close. A channel,
	// not a mutex, so that a wait for it is one synctest sees as durable.
	writing chan struct{}
	closed  bool // the client is closing: the record is deleted; guarded by writing
}

func newRenewalLog() renewalLog { return renewalLog{writing: make(chan struct{}, 1)} }

// confirmed records a renewal confirmed at, with left of the term before
// it and a round trip of rtt.
func (l *renewalLog) confirmed(at time.Time, left, rtt time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewals = append(l.renewals, records.Renewal{At: at, LeftMs: max(left, 0).Milliseconds(), RTTms: rtt.Milliseconds()})
	if n := len(l.renewals) - records.HealthLen; n > 0 {
		l.renewals = append(l.renewals[:0], l.renewals[n:]...)
	}
	l.fresh = true
}

// failedOne counts a renewal that failed.
func (l *renewalLog) failedOne() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed++
	l.fresh = true
}

// take returns the health record of member on g, if the log changed since
// the last one.
func (l *renewalLog) take(member string, g *generation) (records.Health, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.fresh {
		return records.Health{}, false
	}
	l.fresh = false
	return records.Health{
		Member: member, Session: g.sess.ID(), TTLms: g.ttl.Milliseconds(), Updated: time.Now(),
		Renewals: append([]records.Renewal(nil), l.renewals...), Failed: l.failed,
	}, true
}

// publishHealth writes the client's health record on g every records.HealthEvery
// while there are renewals it does not show, until g ends. It first
// deletes the health records older than healthStale, once per client, and
// the record of the previous session when the member id was that
// session's. Nothing is published with status records off
// (WithStatus(false)) or on a backend without records.
func (c *Client) publishHealth(g *generation) {
	rec, ok := g.sess.(backend.Records)
	if !ok || c.opts.noStatus {
		return
	}
	member := c.memberID(g)
	key := records.HealthKey(member)
	c.reapHealth(g, rec, key)
	tick := time.NewTicker(records.HealthEvery)
	defer tick.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-tick.C:
		}
		if !c.writeHealth(g, rec, member, key) {
			return
		}
	}
}

// writeHealth writes member's health record at key if there are renewals it
// does not show yet, within what is left of g's deadline. It reports
// false once the client is closing.
func (c *Client) writeHealth(g *generation, rec backend.Records, member, key string) bool {
	l := &c.renewals
	select {
	case l.writing <- struct{}{}:
		defer func() { <-l.writing }()
	case <-g.ctx.Done():
		return true
	}
	if l.closed {
		return false
	}
	h, ok := l.take(member, g)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(g.ctx, min(g.ttl, max(g.left(), 0)))
	defer cancel()
	if _, err := rec.PutRecord(ctx, key, records.Encode(h), backend.Condition{}); err != nil && g.ctx.Err() == nil {
		c.log.Debug("writing the health record failed", "key", key, "err", err)
	}
	return true
}

// deleteHealth deletes the client's health record as it closes, within
// what is left of its session's deadline, after any write under way; no
// record is written after it. A record left behind (a client cut off from
// the backend) is stale, and reaped by another client.
func (c *Client) deleteHealth() {
	l := &c.renewals
	l.writing <- struct{}{} // a write holds it at most until its session's deadline
	defer func() { <-l.writing }()
	l.closed = true
	c.mu.Lock()
	g := c.gen
	c.mu.Unlock()
	rec, ok := backend.Records(nil), false
	if g != nil {
		rec, ok = g.sess.(backend.Records)
	}
	if !ok || l.key == "" || !g.valid() {
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.left())
	defer cancel()
	if err := rec.DeleteRecord(ctx, l.key, backend.Condition{}); err != nil {
		c.log.Debug("deleting the health record failed", "key", l.key, "err", err)
	}
}

// reapHealth notes key as the client's record on g. It deletes the
// previous one if it had another key, and the health records older than
// healthStale (of clients gone without closing), once per client.
func (c *Client) reapHealth(g *generation, rec backend.Records, key string) {
	l := &c.renewals
	select {
	case l.writing <- struct{}{}:
	case <-g.ctx.Done():
		return
	}
	prev := l.key
	l.key = key
	<-l.writing
	ctx, cancel := context.WithTimeout(g.ctx, g.ttl)
	defer cancel()
	if prev != "" && prev != key {
		// The member id was the previous session's: that member is gone.
		if err := rec.DeleteRecord(ctx, prev, backend.Condition{}); err != nil {
			c.log.Debug("deleting the previous session's health record failed", "key", prev, "err", err)
		}
	}
	l.mu.Lock()
	done := l.reaped
	l.reaped = true
	l.mu.Unlock()
	if done {
		return
	}
	list, err := rec.ListRecords(ctx, records.HealthPrefix)
	if err != nil {
		c.log.Debug("listing the health records failed", "err", err)
		return
	}
	for _, r := range list {
		var h records.Health
		if records.Decode(r.Value, &h) != nil || time.Since(h.Updated) < healthStale {
			continue
		}
		if err := rec.DeleteRecord(ctx, r.Key, backend.Condition{IfVersion: true, Version: r.Version}); err != nil {
			c.log.Debug("deleting a stale health record failed", "key", r.Key, "err", err)
		}
	}
}
