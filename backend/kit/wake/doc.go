// Package wake is the registry of wake-up functions that the PostgreSQL
// and Kubernetes backends' notification hubs keep: functions subscribed to
// a topic (a lease name's object, a group) or to the record keys under a
// prefix. A hub collects the functions an event concerns under the
// registry's lock and calls them outside it; they must not block. Hints
// turns a subscription into the hint channel of a backend's watches.
//
// It is part of simba's kit for backend authors (backend/kit/...): code the
// backends share, importable by a backend of another module or of another
// repository. It follows the module's compatibility promise like the rest
// of its API.
package wake
