package zookeeper

import "github.com/simba-go/simba/backend"

// CandidacyPath returns the path of the candidacy znode of a lease that
// Acquire returned.
func CandidacyPath(l backend.Lease) string { return l.(*lease).path }
