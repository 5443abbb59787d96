// Package view is the read side of a backend that a session and a
// backend.View share: the checks every read makes before it reaches the
// backend (a valid key or group name, a session not over or a view not
// closed), and a backend.View built on the backend's reads.
//
// A backend implements [Source]: its reads that need no session (a
// record, a listing, a group's members, the held leases, two watches).
// [New] makes a backend.View of it; [NewReader] makes the same reads for
// a session, which embeds the [Reader] for backend.Records' and
// backend.SkipReporter's reads, and for Members, WatchMembers and
// HeldLeases:
//
//	type session struct {
//		*view.Reader // GetRecord, ListRecords, Members, WatchMembers, ...
//		...
//	}
//
//	s.Reader = view.NewReader("simba/mybackend", s.ctx, s.overErr, source{b})
//
// It is part of simba's kit for backend authors (backend/kit/...): code
// the backends share, importable by a backend of another module or of
// another repository. It follows the module's compatibility promise like
// the rest of its API.
package view
