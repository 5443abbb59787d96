package check

import "github.com/simba-go/simba/backend/memory"

// MemoryGrants converts the memory backend's record of its grants
// (memory.Backend.History) to the Grants the checkers compare terms with.
func MemoryGrants(history []memory.Grant) []Grant {
	out := make([]Grant, 0, len(history))
	for _, g := range history {
		out = append(out, Grant{Name: g.Name, Token: g.Token, Start: g.Start, End: g.End, Ended: g.Ended,
			Expired: g.Reason == "expired", Evicted: g.Reason == "evicted"})
	}
	return out
}
