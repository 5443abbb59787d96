package kubernetes

import "time"

// SetBeforeFencedWrite sets the hook b runs between the read of a lease
// name object and a record write to it, and returns a function restoring
// none. Set it before the calls it concerns.
func SetBeforeFencedWrite(b *Backend, f func()) (restore func()) {
	b.beforeFencedWrite = f
	return func() { b.beforeFencedWrite = nil }
}

// Saw makes b's contenders count the object obj as seen at resourceVersion
// rv since the instant since (see observer): a contender that has watched a
// session object unchanged from since, without the test waiting that long.
// A sighting at another resourceVersion replaces it, as usual.
func Saw(b *Backend, obj, rv string, since time.Time) {
	b.obs.mu.Lock()
	defer b.obs.mu.Unlock()
	b.obs.seen[obj] = sighting{rv: rv, since: since}
}
