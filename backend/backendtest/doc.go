// Package backendtest is the conformance suite that every implementation of
// [backend.Backend] runs against itself, in the manner of
// [testing/fstest.TestFS]: one call, many subtests, every violation
// reported.
//
// A backend's tests call [Run] with a factory that returns a fresh, empty
// backend for each case and registers its clean-up with t.Cleanup:
//
//	func TestConformance(t *testing.T) {
//		srv := startTestServer(t) // one server for every case
//		backendtest.Run(t, func(t *testing.T) backend.Backend {
//			// Fresh and empty: here, a key prefix of its own per case.
//			b, err := mybackend.New(srv.Client(), mybackend.WithPrefix("/"+t.Name()+"/"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { b.Close() })
//			return b
//		}, backendtest.WithTTL(time.Second))
//	}
//
// For the in-memory backend, [WithSynctest] runs every case inside a
// [testing/synctest] bubble, in virtual time:
//
//	backendtest.Run(t, func(t *testing.T) backend.Backend {
//		b := memory.New()
//		t.Cleanup(func() { b.Close() })
//		return b
//	}, backendtest.WithSynctest())
//
// # What it checks
//
// Each case opens its own sessions, requesting the TTL set by [WithTTL]
// (1s by default), and times everything from the TTL the backend granted
// (Session.TTL, KeepAlive's result), so a server that raises small TTLs is
// measured by its own promise. The cases check the rules written in package
// backend:
//
//   - sessions have distinct IDs and a positive TTL, and KeepAlive renews;
//   - tokens of a lease name strictly increase, across sessions and
//     re-acquisitions;
//   - one holder at a time, and a waiting Acquire gets the lease when it is
//     released;
//   - Release compares tokens: a stale Release returns ErrNotHeld and never
//     frees a newer holding;
//   - Close and expiry end the session's leases (Lost closes) and
//     memberships, and later calls return ErrSessionDone;
//   - the server never frees a lease before the granted TTL has passed since
//     the start of the last KeepAlive (less the rate its clock may run fast,
//     WithServerClockRate), and does free it after;
//   - Acquire honours its ctx and leaves nothing behind;
//   - Acquire is queued candidacy (read through backend.CandidateLister,
//     which the cases require): waiters are served oldest first, one
//     hand-off at a time, with increasing tokens; a waiter whose ctx ends
//     or whose session is closed leaves the queue, and a holder whose
//     session is closed hands the lease to the oldest waiter; a re-Acquire
//     by the holder ends its holding (Lost closes) and queues at the back;
//     after a queued hand-off the deposed holder's token fences nothing;
//     HeldLeases lists a lease with waiters once;
//   - membership: records, ordering, member-watch hints, Leave;
//   - invalid names and oversized member data are rejected with an error,
//     never a panic;
//   - a stored entry that is not a record or a member of the backend (see
//     backend.MalformedError) is skipped by the listings, which list the
//     rest, returned by GetRecord, named by SkipReporter, and can be
//     deleted or overwritten. Planting one takes hooks of the backend's
//     own, given with [WithMalformed]; without them the case checks only
//     that SkipReporter agrees with the plain listings.
//
// Against a real server the whole suite takes about ten granted TTLs.
package backendtest
