package wake

import (
	"context"
	"strings"
	"sync"
	"time"
)

// Registry holds the subscriptions. Its zero value is ready to use.
type Registry struct {
	mu       sync.Mutex
	topics   map[string]map[*sub]struct{}
	prefixes map[*sub]string
}

type sub struct{ f func() }

// Subscribe adds f to topic's functions until cancel.
func (r *Registry) Subscribe(topic string, f func()) (cancel func()) {
	s := &sub{f: f}
	r.mu.Lock()
	if r.topics == nil {
		r.topics = map[string]map[*sub]struct{}{}
	}
	set := r.topics[topic]
	if set == nil {
		set = map[*sub]struct{}{}
		r.topics[topic] = set
	}
	set[s] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.topics[topic], s)
		if len(r.topics[topic]) == 0 {
			delete(r.topics, topic)
		}
		r.mu.Unlock()
	}
}

// SubscribePrefix adds f to the functions of every key under prefix until
// cancel.
func (r *Registry) SubscribePrefix(prefix string, f func()) (cancel func()) {
	s := &sub{f: f}
	r.mu.Lock()
	if r.prefixes == nil {
		r.prefixes = map[*sub]string{}
	}
	r.prefixes[s] = prefix
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.prefixes, s)
		r.mu.Unlock()
	}
}

// Collect returns the functions subscribed to any of topics, and those
// subscribed to a prefix of any of keys, each once.
func (r *Registry) Collect(topics, keys []string) []func() {
	var fs []func()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[*sub]bool{}
	for _, t := range topics {
		for s := range r.topics[t] {
			if !seen[s] {
				seen[s] = true
				fs = append(fs, s.f)
			}
		}
	}
	for s, prefix := range r.prefixes {
		for _, k := range keys {
			if strings.HasPrefix(k, prefix) {
				fs = append(fs, s.f)
				break
			}
		}
	}
	return fs
}

// All returns every function subscribed.
func (r *Registry) All() []func() {
	var fs []func()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, set := range r.topics {
		for s := range set {
			fs = append(fs, s.f)
		}
	}
	for s := range r.prefixes {
		fs = append(fs, s.f)
	}
	return fs
}

// Call calls each of fs.
func Call(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// Hints returns a channel of hints (a buffer of one coalesces them) fed
// by the subscription that subscribe makes, closed when ctx or stop ends;
// next, if not nil, returns when the next hint is due with no event
// (negative: none), for changes no event tells of (an expiry). Its
// goroutine is counted in wg.
func Hints(ctx, stop context.Context, wg *sync.WaitGroup, subscribe func(func()) (cancel func()), next func(context.Context) time.Duration) <-chan struct{} {
	out := make(chan struct{}, 1)
	woken := make(chan struct{}, 1)
	unsub := subscribe(func() { Poke(woken) })
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(out)
		defer unsub()
		for {
			var timer <-chan time.Time
			var t *time.Timer
			if next != nil {
				if d := next(ctx); d >= 0 {
					t = time.NewTimer(d)
					timer = t.C
				}
			}
			select {
			case <-ctx.Done():
			case <-stop.Done():
			case <-woken:
			case <-timer:
			}
			if t != nil {
				t.Stop()
			}
			if ctx.Err() != nil || stop.Err() != nil {
				return
			}
			Poke(out)
		}
	}()
	return out
}

// Poke sends on ch without blocking: a hint or a wake-up on a channel with
// a buffer of one coalesces with the one still unread, if any.
func Poke(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
