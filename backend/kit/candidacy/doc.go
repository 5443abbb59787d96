// Package candidacy is queued candidacy (see backend.Session's Acquire)
// for a backend that keeps the queues of candidacies itself, as rows of a
// table (the PostgreSQL backend) or in the annotations of an object (the
// Kubernetes backend), rather than as keys that its server orders and
// watches for it. What such backends share is here: the life of a
// session (its context, Done, the end of every holding with it), the
// holdings it counts as held, their Lost signals and their releases, and
// Acquire itself: watch the name's queue, register a candidacy, wait
// until it is first, withdraw it when the caller gives up, and count the
// holding as held.
//
// What differs between backends is a [Queue]: how a candidacy is
// registered, how the queue is read (and what is done about a dead
// candidacy ahead), how a candidacy is withdrawn and a holding released,
// and how a holding's loss is found. A backend's session embeds the
// [Session] that [New] makes, for Done and Acquire, and gives it its
// Queue:
//
//	type session struct {
//		*candidacy.Session // Done, Acquire
//		...
//	}
//
//	s.Session = candidacy.New(b.ctx, candidacy.Config{
//		Prefix: "simba/mybackend", ID: id, Queue: queue{s}, WaitGroup: &b.wg, TTL: s.TTL,
//	})
//
// The lease that Acquire returns is a [*Holding]: backend.Lease,
// backend.LostNotifier and backend.RecordReleaser, its release done by
// [Queue.Release] while a loss reported meanwhile (maybe the release's own
// write, seen by a watch) waits for the release's outcome. The session's
// monitor, told by [Queue.Changed] that a held name's queue changed, reads
// it and ends the holdings whose candidacy is gone with
// [Session.LoseMissing] (given the [Session.Mark] taken before the read,
// so that a holding granted while the read was on its way is not taken
// for gone), [Session.LoseIf] or [Session.Lose]; when the session is
// over, [Session.End] ends them all.
//
// It is part of simba's kit for backend authors (backend/kit/...): code
// the backends share, importable by a backend of another module or of
// another repository. It follows the module's compatibility promise like
// the rest of its API.
package candidacy
