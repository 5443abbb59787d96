package console

import (
	"slices"

	"github.com/simba-go/simba/admin"
)

// electionPage is one election or partition on its own page
// (/elections/{lease}): its state and holder, its recent terms and the
// operations on it.
type electionPage struct {
	electionRow
	// Group is the group of a partition, and Partition its number; ""
	// and -1 for a plain election.
	Group     string
	Partition int
	// Terms are its recent terms (from the term log of its status),
	// newest first; Undrawn counts those without a start time.
	Terms   []termRow
	Undrawn int
	// TimelineHref is the timeline that shows it: the elections', or its
	// partition zoomed.
	TimelineHref string
}

// buildElection fills the page of one election or partition from the
// snapshot: not found when the backend has neither a status nor a held
// lease of that name.
func (p *page) buildElection(l *loader) error {
	snap, err := l.snapshot()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(snap.Elections, func(e admin.Election) bool { return e.Name == p.View.Lease })
	if i < 0 {
		p.NotFound = true
		return nil
	}
	e := snap.Elections[i]
	ep := &electionPage{electionRow: electionRowOf(e, snap.Ops), Partition: -1}
	tl := view{Kind: "timeline", Range: defaultRange, Part: -1}
	_, parts := splitElections(snap.Elections)
	if slices.ContainsFunc(parts, func(x admin.Election) bool { return x.Name == e.Name }) {
		ep.Group, ep.Partition = partitionGroup(e), partitionIndex(e)
		tl.Name, tl.Part = ep.Group, ep.Partition
	}
	ep.TimelineHref = tl.timelinePath()
	ts, skipped := orderedTerms(e.Status.Terms)
	ep.Terms, ep.Undrawn = termRows(laneSrc{e: e, index: ep.Partition, terms: ts}, l.now), skipped
	p.Election = ep
	return p.buildAudit(l, e.Name, auditInline)
}
