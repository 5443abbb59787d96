// Package wake is the registry of wake-up functions that the PostgreSQL
// and Kubernetes backends' notification hubs keep: functions subscribed to
// a topic (a lease name's object, a group) or to the record keys under a
// prefix. A hub collects the functions an event concerns under the
// registry's lock and calls them outside it; they must not block. Hints
// turns a subscription into the hint channel of a backend's watches.
package wake
