package simba

// plantedBug selects a deliberate safety bug, for tests only: the invariant
// checkers must catch each one, or they prove nothing. It is set by tests
// (export_test.go) before any client starts, and is always plantNone in
// production.
var plantedBug plant

type plant int

const (
	plantNone plant = iota
	// plantDeadlineFromReply measures the deadline from the reply to a
	// renewal instead of from its request.
	plantDeadlineFromReply
	// plantNoMargin drops the drift margin.
	plantNoMargin
	// plantRequestedTTL uses the requested TTL instead of the granted one.
	plantRequestedTTL
)
