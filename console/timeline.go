package console

import (
	"cmp"
	"fmt"
	"html/template"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/records"
)

// The time ranges of the timeline page, by the name its query gives
// ("all" is from the earliest term start known), and the default.
var timelineRanges = []timelineRange{
	{"15m", 15 * time.Minute},
	{"1h", time.Hour},
	{"24h", 24 * time.Hour},
	{"all", 0},
}

// timelineRange is a time range of the timeline page: the last D before
// now, or for D zero all the terms known.
type timelineRange struct {
	Name string
	D    time.Duration
}

// defaultRange is the range of /timeline without one.
const defaultRange = "1h"

// maxPartition bounds the partition a timeline may zoom to.
const maxPartition = 1 << 20

// rebalanceWindow is how close in time the moves of one rebalance are:
// a move within it of the previous one belongs to the same rebalance.
const rebalanceWindow = 5 * time.Second

// rebalancesShown is the number of rebalances a group's timeline lists,
// the newest.
const rebalancesShown = 20

// The geometry of the timeline's picture, in SVG user units (the picture
// scales to the page's width).
const (
	tlWidth    = 1200.0 // the whole picture
	tlLabelW   = 170.0  // the lane labels, on the left
	tlRightPad = 8.0
	tlPlotW    = tlWidth - tlLabelW - tlRightPad // the time axis
	tlAxisH    = 26.0                            // the axis labels, on top
	tlBottom   = 6.0
	// compactOver is the number of lanes above which lanes are compact:
	// a few units high, without text, labelled every compactLabelEvery.
	compactOver       = 64
	compactLabelEvery = 4
	// labelRunes bounds a lane label's length; the full name is in its
	// tooltip.
	labelRunes = 24
)

// laneSize is the height of a lane's bars and the distance between lanes.
type laneSize struct{ H, Pitch float64 }

var (
	zoomLane    = laneSize{44, 56}
	normalLane  = laneSize{18, 26}
	compactLane = laneSize{4, 5}
)

// px is a coordinate of the picture, printed to a tenth of a unit.
type px float64

// String prints x to one decimal: short, and enough for the screen.
func (x px) String() string {
	return strconv.FormatFloat(math.Round(float64(x)*10)/10, 'f', -1, 64)
}

// timeline is what the timeline page shows: one lane per election, or per
// partition of a group, with the terms of its term log as bars over the
// range, and for a group the rebalances its term logs show.
type timeline struct {
	Group string // the group shown; "" for the plain elections
	// Part is the partition zoomed to, or -1.
	Part int
	// Lease is the zoomed partition's lease; JobHref the link to its job
	// page, if it has a schedule.
	Lease, JobHref string
	Range          string
	From, To       time.Time // the range: To is the loader's now
	Ranges         []tlLink  // the range selector
	Groups         []tlLink  // the group selector: "elections" and each group
	AllHref        string    // back to the whole group, from a zoom
	Compact        bool      // lanes are compact (many partitions)
	Zoom           bool      // one partition, big
	Width, Height  px
	PlotX, PlotEnd px // where the time axis begins and ends
	PlotW          px
	LabelW         px // the lane labels' column
	AxisY          px // the axis line
	Ticks          []tlTick
	Lanes          []lane
	Members        []string // the members of the bars shown, sorted: the legend
	HasTerms       bool     // some lane has terms
	Undrawn        int      // terms skipped: no start time
	Rebalances     []rebalance
	// MoreRebalances counts the older rebalances in range not listed.
	MoreRebalances int
	// Terms are the zoomed partition's terms, newest first.
	Terms []termRow
}

// tlLink is a link of a selector.
type tlLink struct {
	Label, Href string
	Current     bool
}

// tlTick is a tick of the time axis.
type tlTick struct {
	X     px
	Label string // "" close to now, whose label it would cover
}

// lane is one election's or partition's row of the picture.
type lane struct {
	Lease string
	Label string // the name shown, perhaps shortened
	Title string // the full name, and what the label links to
	Href  string // the label's link, or ""
	Y     px     // the top of its bars
	H     px     // the height of its bars
	Pitch px     // the height of its row
	// ShowLabel is false for the compact lanes not labelled (every
	// compactLabelEvery-th is).
	ShowLabel bool
	Mid       px // the middle of its bars, for text
	HitY      px // the top of its row, relative to its bars
	NoTerms   bool
	Bars      []bar
	Gaps      []gap
	Marks     []mark
}

// bar is one term drawn.
type bar struct {
	X, W   px
	Color  string // the member's colour class
	State  string // "open", "ended" or "unseen" (it ended, nobody saw when)
	Token  uint64
	Member string
	// Start and End are Unix milliseconds: the term's start, and its end,
	// now for an open term, the end drawn for one that ended unseen.
	Start, End int64
	Ended      string // records.Term.Ended
	Title      string
	Text       string // the token, when the bar is wide enough
	TextX      px
}

// gap is a time nobody held a lease, between terms.
type gap struct {
	X, W       px
	Start, End int64 // Unix milliseconds
	Title      string
}

// mark is the end of a term: a hand-off, or a fail-over.
type mark struct {
	Kind       string // "handoff" or "failover"
	X, Y, W, H px     // the hand-off's tick
	Points     string // the fail-over's triangle
	Token      uint64
	Title      string
}

// termRow is one term of the zoomed partition, as its table shows it.
type termRow struct {
	admin.Term
	Open    bool
	Unseen  bool
	Took    string
	Failure bool
}

// rebalance is moves of a group's partitions from member to member close
// in time (within rebalanceWindow of each other).
type rebalance struct {
	At    time.Time // the first move's end of term
	Last  time.Time // the last one's
	Kind  string    // the kinds of its moves, sorted, space-separated
	Label string    // the same in words
	Span  string    // from its first move to its last, "" if at once
	// Moves are the moves listed: the first movesShown, or for a zoom the
	// zoomed partition's; Count counts them all, Pairs by members.
	Moves []move
	Count int
	Pairs []movePair
}

// movePair counts the moves of a rebalance from one member to another.
type movePair struct {
	From, To string
	N        int
}

// movesShown bounds the moves a rebalance lists (its pairs count all).
const movesShown = 32

// move is a partition's term ending and the next beginning on another
// member.
type move struct {
	Partition int
	Lease     string
	From, To  string
	Token     uint64    // the new term's token
	At        time.Time // the old term's end (the new one's start if unseen)
	Reason    string    // how the old term ended (records.Term.Ended)
	Kind      string    // the kind of move, from Reason
	// Ms is the time between the old term's end and the new one's start,
	// in milliseconds; -1 when unknown (the old term ended unseen). For a
	// fail-over the end is its successor's start: the holder ended up to
	// a TTL (MaxMs) earlier.
	Ms, MaxMs int64
}

// timelineFuncs are the template functions of the timeline page.
var timelineFuncs = template.FuncMap{
	"ms":              fmtMs,
	"unixms":          func(t time.Time) int64 { return t.UnixMilli() },
	"clockUTC":        func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"termsLen":        func() int { return records.TermsLen },
	"rebalanceWindow": func() string { return rebalanceWindow.String() },
	"zoom":            zoomHref,
	"sub":             func(a, b int) int { return a - b },
}

// zoomHref is the link of tl's partition part, zoomed, in the same range.
func zoomHref(tl *timeline, part int) string {
	return view{Kind: "timeline", Name: tl.Group, Part: part, Range: tl.Range}.timelinePath()
}

// parseTimelineView returns the view of /timeline with query q: group
// (a group's partitions; none for the plain elections), p (one partition
// of the group) and range (15m, 1h, 24h or all; 1h if not given). A value
// that is not one of these is no view: not found, as parseView answers a
// bad audit filter.
func parseTimelineView(q url.Values) (view, bool) {
	v := view{Kind: "timeline", Range: defaultRange, Part: -1}
	if r := q.Get("range"); r != "" {
		if !slices.ContainsFunc(timelineRanges, func(x timelineRange) bool { return x.Name == r }) {
			return view{}, false
		}
		v.Range = r
	}
	if g := q.Get("group"); g != "" {
		if backend.CheckName(g) != nil {
			return view{}, false
		}
		v.Name = g
	}
	if ps, ok := q["p"]; ok {
		n, err := strconv.Atoi(ps[0])
		if err != nil || n < 0 || n > maxPartition || v.Name == "" || strconv.Itoa(n) != ps[0] {
			return view{}, false
		}
		v.Part = n
	}
	return v, true
}

// timelinePath is the path of a timeline view, with its query: the
// canonical one (defaults left out), that parseTimelineView reads back.
func (v view) timelinePath() string {
	q := url.Values{}
	if v.Name != "" {
		q.Set("group", v.Name)
		if v.Part >= 0 {
			q.Set("p", strconv.Itoa(v.Part))
		}
	}
	if v.Range != "" && v.Range != defaultRange {
		q.Set("range", v.Range)
	}
	if len(q) == 0 {
		return "/timeline"
	}
	return "/timeline?" + q.Encode()
}

// laneSrc is an election or partition to draw, with its terms in order.
type laneSrc struct {
	e     admin.Election
	index int // the partition, or -1
	terms []admin.Term
}

// partitionIndex returns the partition of a group's election: from its
// status, or else its name.
func partitionIndex(e admin.Election) int {
	if e.Status.Lease != "" {
		return e.Status.Partition
	}
	if m := partitionName.FindStringSubmatch(e.Name); m != nil {
		if n, err := strconv.Atoi(m[2]); err == nil {
			return n
		}
	}
	return -1
}

// partitionGroup returns the group of a partition: from its status, or
// else its name.
func partitionGroup(e admin.Election) string {
	if e.Status.Group != "" {
		return e.Status.Group
	}
	if m := partitionName.FindStringSubmatch(e.Name); m != nil {
		return m[1]
	}
	return ""
}

// orderedTerms returns the terms that have a start, sorted by start (then
// token), and how many have none.
func orderedTerms(ts []admin.Term) ([]admin.Term, int) {
	out := make([]admin.Term, 0, len(ts))
	skipped := 0
	for _, t := range ts {
		if t.Start.IsZero() {
			skipped++
			continue
		}
		out = append(out, t)
	}
	slices.SortStableFunc(out, func(a, b admin.Term) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	return out, skipped
}

// buildTimeline fills the timeline of the view: its selectors, its lanes
// over the range, and for a group its rebalances.
func (p *page) buildTimeline(l *loader) error {
	snap, err := l.snapshot()
	if err != nil {
		return err
	}
	v := p.View
	now := l.now
	tl := &timeline{Group: v.Name, Part: v.Part, Range: v.Range, To: now, Zoom: v.Part >= 0}
	p.Timeline = tl
	plain, parts := splitElections(snap.Elections)
	groups := timelineGroups(snap.Groups, parts)
	tl.selectors(v, groups)
	if v.Name != "" && !groups[v.Name] {
		p.NotFound = true
		return nil
	}
	all := tl.laneSources(v, plain, parts)
	srcs := all
	if tl.Zoom {
		i := slices.IndexFunc(all, func(s laneSrc) bool { return s.index == v.Part })
		if i < 0 {
			p.NotFound = true
			return nil
		}
		srcs = all[i : i+1]
		tl.Lease = srcs[0].e.Name
		if srcs[0].e.Status.Schedule != "" {
			tl.JobHref = "/jobs/" + tl.Lease
		}
	}
	tl.From = rangeStart(v.Range, now, srcs)
	tl.draw(srcs, now)
	if v.Name != "" {
		tl.Rebalances, tl.MoreRebalances = shownRebalances(rebalances(all, v.Name), tl.From, tl.Zoom, v.Part)
	}
	if tl.Zoom {
		tl.Terms = termRows(srcs[0], now)
	}
	return nil
}

// timelineGroups returns the groups the timeline can show: those known,
// and those of the partitions in parts.
func timelineGroups(known []admin.Group, parts []admin.Election) map[string]bool {
	groups := map[string]bool{}
	for _, g := range known {
		groups[g.Name] = true
	}
	for _, e := range parts {
		if g := partitionGroup(e); g != "" {
			groups[g] = true
		}
	}
	return groups
}

// selectors fills the group selector ("elections", then groups) and the
// range selector of view v.
func (tl *timeline) selectors(v view, groups map[string]bool) {
	withRange := func(w view) string { w.Kind, w.Range = "timeline", v.Range; return w.timelinePath() }
	tl.Groups = append(tl.Groups, tlLink{Label: "elections", Href: withRange(view{Part: -1}), Current: v.Name == ""})
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		tl.Groups = append(tl.Groups, tlLink{Label: g, Href: withRange(view{Name: g, Part: -1}), Current: v.Name == g})
	}
	for _, r := range timelineRanges {
		w := v
		w.Range = r.Name
		tl.Ranges = append(tl.Ranges, tlLink{Label: r.Name, Href: w.timelinePath(), Current: v.Range == r.Name})
	}
}

// laneSources returns the lanes of view v: the plain elections, or the
// partitions of its group by index (counting in tl.Undrawn the terms
// without a start of those shown, and linking back to the whole group).
func (tl *timeline) laneSources(v view, plain, parts []admin.Election) []laneSrc {
	var srcs []laneSrc
	if v.Name == "" {
		for _, e := range plain {
			ts, skipped := orderedTerms(e.Status.Terms)
			tl.Undrawn += skipped
			srcs = append(srcs, laneSrc{e: e, index: -1, terms: ts})
		}
		return srcs
	}
	for _, e := range parts {
		if partitionGroup(e) != v.Name {
			continue
		}
		ts, skipped := orderedTerms(e.Status.Terms)
		srcs = append(srcs, laneSrc{e: e, index: partitionIndex(e), terms: ts})
		if v.Part < 0 || partitionIndex(e) == v.Part {
			tl.Undrawn += skipped
		}
	}
	slices.SortStableFunc(srcs, func(a, b laneSrc) int { return cmp.Compare(a.index, b.index) })
	w := v
	w.Part = -1
	tl.AllHref = w.timelinePath()
	return srcs
}

// rangeStart returns the start of the range named name, ending now: for
// "all", the earliest start of the terms of srcs, at least a minute ago.
func rangeStart(name string, now time.Time, srcs []laneSrc) time.Time {
	from := now.Add(-time.Hour)
	for _, r := range timelineRanges {
		if r.Name == name && r.D > 0 {
			from = now.Add(-r.D)
		}
	}
	if name == "all" {
		first := now
		for _, s := range srcs {
			if len(s.terms) > 0 && s.terms[0].Start.Before(first) {
				first = s.terms[0].Start
			}
		}
		from = earlier(first, now.Add(-time.Minute))
	}
	return from
}

// draw lays srcs out as lanes from tl.From to now, with the axis and the
// legend of the members.
func (tl *timeline) draw(srcs []laneSrc, now time.Time) {
	size := normalLane
	switch {
	case tl.Zoom:
		size = zoomLane
	case len(srcs) > compactOver:
		size = compactLane
		tl.Compact = true
	}
	d := &drawing{from: tl.From, now: now, span: now.Sub(tl.From), size: size, text: !tl.Compact, titles: !tl.Compact, handoffs: !tl.Compact}
	members := map[string]bool{}
	y := tlAxisH + 4
	for i, s := range srcs {
		ln := d.lane(s, px(y))
		ln.ShowLabel = !tl.Compact || i%compactLabelEvery == 0
		tl.link(&ln, s)
		if len(s.terms) > 0 {
			tl.HasTerms = true
		}
		for _, b := range ln.Bars {
			if b.Member != "" {
				members[b.Member] = true
			}
		}
		tl.Lanes = append(tl.Lanes, ln)
		y += size.Pitch
	}
	tl.Members = slices.Sorted(maps.Keys(members))
	tl.Width, tl.Height = tlWidth, px(y+tlBottom)
	tl.PlotX, tl.PlotEnd, tl.PlotW, tl.LabelW, tl.AxisY = tlLabelW, tlLabelW+tlPlotW, tlPlotW, tlLabelW, tlAxisH
	tl.Ticks = d.ticks(tl.Range)
}

// link sets the link of lane ln of s: a partition's zoom, else a job's
// page, else a plain election's page.
func (tl *timeline) link(ln *lane, s laneSrc) {
	switch {
	case s.index >= 0 && !tl.Zoom:
		ln.Href = zoomHref(tl, s.index)
		ln.Title = s.e.Name + ": zoom in"
	case s.e.Status.Schedule != "":
		ln.Href = "/jobs/" + s.e.Name
		ln.Title = s.e.Name + ": its job page"
	case s.index < 0:
		ln.Href = "/elections/" + s.e.Name
		ln.Title = s.e.Name + ": its page"
	}
}

// shownRebalances returns the rebalances of rbs (oldest first) to list,
// newest first: those that ended after from, at most rebalancesShown,
// each with its first movesShown moves, or with a zoom (zoom true) only
// those that moved partition part, with only its moves; and how many
// more there are.
func shownRebalances(rbs []rebalance, from time.Time, zoom bool, part int) ([]rebalance, int) {
	var shown []rebalance
	for i := len(rbs) - 1; i >= 0; i-- { // newest first
		r := rbs[i]
		if r.Last.Before(from) {
			break
		}
		if zoom && !slices.ContainsFunc(r.Moves, func(m move) bool { return m.Partition == part }) {
			continue
		}
		if zoom {
			r.Moves = slices.DeleteFunc(slices.Clone(r.Moves), func(m move) bool { return m.Partition != part })
		} else {
			r.Moves = r.Moves[:min(len(r.Moves), movesShown)]
		}
		shown = append(shown, r)
	}
	if len(shown) > rebalancesShown {
		return shown[:rebalancesShown], len(shown) - rebalancesShown
	}
	return shown, 0
}

// drawing places terms on the picture: times from..now across the plot.
type drawing struct {
	from, now time.Time
	span      time.Duration
	size      laneSize
	text      bool // bars get token labels when wide enough
	titles    bool // bars, gaps and marks get tooltips
	handoffs  bool // hand-offs get marks (fail-overs always do)
}

// x returns the position of t, clamped to the plot.
func (d *drawing) x(t time.Time) float64 {
	// In milliseconds, as floats: a Duration ends at 292 years, and
	// records may hold any time.
	span := float64(d.now.UnixMilli() - d.from.UnixMilli())
	if span <= 0 {
		return tlLabelW + tlPlotW
	}
	f := float64(t.UnixMilli()-d.from.UnixMilli()) / span
	f = max(0, min(1, f))
	return tlLabelW + f*tlPlotW
}

// The least width of a bar: a term too short to see is still drawn.
// A gap narrower than minGapW is not drawn (a hand-off's few
// milliseconds, at the scale of an hour): there would be nothing to see.
const (
	minBarW = 0.5
	minGapW = 0.5
)

// isOpen reports whether term t of election e is its current holder's
// open term.
func isOpen(e admin.Election, t admin.Term) bool {
	h := e.Status.Holder
	return t.End.IsZero() && e.Held && h != nil && h.Token == t.Token && h.Member == t.Member
}

// termEnd returns the end of the i-th of terms (of election e) as the
// picture draws it, and its state: "open" (to now), "ended", or "unseen"
// (ended, nobody saw when: up to the next term's start, or a TTL).
func termEnd(e admin.Election, terms []admin.Term, i int, now time.Time) (time.Time, string) {
	t := terms[i]
	switch {
	case !t.End.IsZero():
		return later(t.End, t.Start), "ended"
	case isOpen(e, t):
		return later(now, t.Start), "open"
	}
	var end time.Time
	if i+1 < len(terms) {
		end = terms[i+1].Start
	} else {
		ttl := time.Duration(t.TTLms) * time.Millisecond
		if ttl <= 0 {
			ttl = time.Second
		}
		end = t.Start.Add(ttl)
		if h := e.Status.Holder; h != nil && h.Token == t.Token && e.Status.Updated.After(t.Start) {
			end = e.Status.Updated.Add(ttl) // it was alive when it last wrote
		}
		end = earlier(end, later(now, t.Start))
	}
	return later(end, t.Start), "unseen"
}

// lane draws one election or partition at y.
func (d *drawing) lane(s laneSrc, y px) lane {
	name := s.e.Name
	ln := lane{Lease: name, Label: shorten(name, labelRunes), Title: name, Y: y, H: px(d.size.H), Pitch: px(d.size.Pitch),
		Mid: px(d.size.H / 2), HitY: px(-(d.size.Pitch - d.size.H) / 2), NoTerms: len(s.terms) == 0}
	var covered time.Time // the latest end drawn so far
	h := d.size.H
	for i, t := range s.terms {
		end, state := termEnd(s.e, s.terms, i, d.now)
		if i > 0 && t.Start.After(covered) {
			d.addGap(&ln, covered, t.Start)
		}
		if end.After(covered) {
			covered = end
		}
		if end.Before(d.from) || (t.Start.After(d.now) && state != "open") {
			continue
		}
		x1, x2 := d.x(later(t.Start, d.from)), d.x(earlier(end, d.now))
		w := max(x2-x1, minBarW)
		if x1+w > tlLabelW+tlPlotW {
			x1 = tlLabelW + tlPlotW - w
		}
		b := bar{X: px(x1), W: px(w), Color: color(t.Member), State: state, Token: t.Token, Member: t.Member,
			Start: t.Start.UnixMilli(), End: end.UnixMilli(), Ended: t.Ended}
		if d.titles {
			b.Title = termTitle(t, end, state)
		}
		tok := strconv.FormatUint(t.Token, 10)
		if d.text && w >= float64(len(tok))*7+6 {
			b.Text, b.TextX = tok, px(x1+w/2)
		}
		ln.Bars = append(ln.Bars, b)
		if state == "ended" && !end.After(d.now) && (d.handoffs || t.Ended == records.EndedFailOver) {
			m := mark{Kind: "handoff", X: px(x2 - 0.75), Y: -2, W: 1.5, H: px(h + 4), Token: t.Token}
			if t.Ended == records.EndedFailOver {
				m.Kind = "failover"
				r := max(3, min(6, h/3))
				m.Points = fmt.Sprintf("%s,%s %s,%s %s,%s", px(x2-r), px(-1), px(x2+r), px(-1), px(x2), px(r*1.4-1))
			}
			if d.titles {
				m.Title = markTitle(t)
			}
			ln.Marks = append(ln.Marks, m)
		}
	}
	if n := len(s.terms); n > 0 && !s.e.Held && covered.Before(d.now) {
		d.addGap(&ln, covered, d.now) // nobody holds it now
	}
	return ln
}

// addGap adds to ln the time from a to b nobody held it, clipped to the
// range, if any of it shows.
func (d *drawing) addGap(ln *lane, a, b time.Time) {
	if !b.After(d.from) || !a.Before(d.now) {
		return
	}
	x1, x2 := d.x(later(a, d.from)), d.x(earlier(b, d.now))
	if x2-x1 < minGapW {
		return
	}
	g := gap{X: px(x1), W: px(x2 - x1), Start: a.UnixMilli(), End: b.UnixMilli()}
	if d.titles {
		g.Title = fmt.Sprintf("%s: nobody held it from %s to %s (%s)", ln.Lease, tlTime(a), tlTime(b), fmtDur(b.Sub(a)))
	}
	ln.Gaps = append(ln.Gaps, g)
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// tlTime prints a time of a tooltip, in UTC to the millisecond.
func tlTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") + " UTC" }

// termTitle is a bar's tooltip.
func termTitle(t admin.Term, end time.Time, state string) string {
	var how string
	switch state {
	case "open":
		how = "holding now"
	case "unseen":
		how = "it ended unseen (nobody recorded its end): drawn up to its successor's start, or a TTL"
	default:
		how = endedWords(t)
	}
	endS := tlTime(end)
	if state == "open" {
		endS = "now"
	}
	return fmt.Sprintf("%s · token %d\n%s – %s (%s)\n%s", t.Member, t.Token, tlTime(t.Start), endS, fmtDur(end.Sub(t.Start)), how)
}

// endedWords says how a term ended.
func endedWords(t admin.Term) string {
	switch t.Ended {
	case records.EndedFailOver:
		return "fail-over: it ended without a hand-off; its successor recorded the end at its own start, so it ended no later"
	case records.EndedMoved:
		return "moved: the group's assignment gave the partition to another member"
	case "":
		return "ended (no reason recorded)"
	}
	return "hand-off: " + t.Ended
}

// markTitle is an end mark's tooltip.
func markTitle(t admin.Term) string {
	return fmt.Sprintf("token %d of %s ended at %s\n%s", t.Token, t.Member, tlTime(t.End), endedWords(t))
}

// shorten cuts s to n runes, with an ellipsis.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// fmtDur prints a duration shortly: "850ms", "2.4s", "3m10s", "5h2m".
func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDur(-d)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}

// tickSteps are the steps the time axis may use.
var tickSteps = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 28 * 24 * time.Hour,
	91 * 24 * time.Hour, 182 * 24 * time.Hour, 364 * 24 * time.Hour,
}

// maxTicks bounds the ticks of the axis.
const maxTicks = 10

// ticks returns the time axis's ticks, in UTC: at most maxTicks, at
// round times, labelled HH:MM (with seconds for a short span, the date
// where it changes for a long one).
func (d *drawing) ticks(rng string) []tlTick {
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if d.span/s <= maxTicks {
			step = s
			break
		}
	}
	for d.span/step > maxTicks { // a span of centuries
		step *= 2
	}
	long := rng == "24h" || rng == "all" && d.span >= 24*time.Hour
	var out []tlTick
	lastDay := ""
	for t := d.from.UTC().Truncate(step); !t.After(d.now) && len(out) <= maxTicks; t = t.Add(step) {
		if t.Before(d.from) {
			continue
		}
		day := t.Format("2006-01-02")
		var label string
		switch {
		case step >= 24*time.Hour:
			label = day
		case step < time.Minute:
			label = t.Format("15:04:05")
		case long && day != lastDay:
			label = t.Format("Jan 2 15:04")
		default:
			label = t.Format("15:04")
		}
		lastDay = day
		x := d.x(t)
		if x > tlLabelW+tlPlotW-30 {
			label = ""
		}
		out = append(out, tlTick{X: px(x), Label: label})
	}
	return out
}

// rebalances derives the rebalances of a group from its partitions' term
// logs (each in order): every move (a term ending, the next starting on
// another member), grouped with those within rebalanceWindow of the
// previous one, oldest first.
func rebalances(srcs []laneSrc, group string) []rebalance {
	var moves []move
	for _, s := range srcs {
		for i := 0; i+1 < len(s.terms); i++ {
			t, next := s.terms[i], s.terms[i+1]
			if t.Member == next.Member {
				continue
			}
			m := move{Partition: s.index, Lease: s.e.Name, From: t.Member, To: next.Member, Token: next.Token,
				At: t.End, Reason: t.Ended, Kind: moveKind(t.Ended), Ms: -1}
			if t.End.IsZero() {
				m.At, m.Kind = next.Start, "unseen"
			} else {
				m.Ms = max(0, next.Start.Sub(t.End).Milliseconds())
			}
			if t.Ended == records.EndedFailOver {
				m.MaxMs = t.TTLms
			}
			moves = append(moves, m)
		}
	}
	slices.SortFunc(moves, func(a, b move) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	var out []rebalance
	for _, m := range moves {
		if n := len(out); n > 0 && m.At.Sub(out[n-1].Last) <= rebalanceWindow {
			out[n-1].Moves = append(out[n-1].Moves, m)
			out[n-1].Last = m.At
			continue
		}
		out = append(out, rebalance{At: m.At, Last: m.At, Moves: []move{m}})
	}
	for i := range out {
		r := &out[i]
		r.Kind, r.Label = rebalanceKind(r.Moves)
		r.Count = len(r.Moves)
		for _, m := range r.Moves {
			j := slices.IndexFunc(r.Pairs, func(p movePair) bool { return p.From == m.From && p.To == m.To })
			if j < 0 {
				r.Pairs = append(r.Pairs, movePair{From: m.From, To: m.To})
				j = len(r.Pairs) - 1
			}
			r.Pairs[j].N++
		}
		slices.SortStableFunc(r.Pairs, func(a, b movePair) int { return cmp.Compare(b.N, a.N) })
		if d := out[i].Last.Sub(out[i].At); d > 0 {
			out[i].Span = fmtDur(d)
		}
	}
	return out
}

// The kinds of moves, and of rebalances, in words.
var kindWords = map[string]string{
	"drain":       "drain",
	"view-change": "join or view change",
	"leave":       "leave",
	"crash":       "crash (fail-over)",
	"resign":      "resign",
	"disable":     "disable",
	"yield":       "yield",
	"unseen":      "ended unseen",
	"other":       "other",
}

// moveKind is the kind of a move whose old term ended for reason.
func moveKind(reason string) string {
	switch reason {
	case "member drained":
		return "drain"
	case records.EndedMoved:
		return "view-change"
	case "client closed", "stopped":
		return "leave"
	case records.EndedFailOver:
		return "crash"
	case "resigned":
		return "resign"
	case "disabled":
		return "disable"
	case "yielded":
		return "yield"
	case "":
		return "unseen"
	}
	return "other"
}

// rebalanceKind returns the kinds of moves, sorted and space-separated,
// and in words ("mixed: crash, drain" when more than one).
func rebalanceKind(moves []move) (string, string) {
	var kinds []string
	for _, m := range moves {
		if !slices.Contains(kinds, m.Kind) {
			kinds = append(kinds, m.Kind)
		}
	}
	slices.Sort(kinds)
	words := make([]string, len(kinds))
	for i, k := range kinds {
		words[i] = kindWords[k]
	}
	label := strings.Join(words, ", ")
	if len(kinds) > 1 {
		label = "mixed: " + label
	}
	return strings.Join(kinds, " "), label
}

// termRows are the terms of a zoomed partition, newest first.
func termRows(s laneSrc, now time.Time) []termRow {
	out := make([]termRow, 0, len(s.terms))
	for i, t := range s.terms {
		end, state := termEnd(s.e, s.terms, i, now)
		r := termRow{Term: t, Open: state == "open", Unseen: state == "unseen", Failure: t.Ended == records.EndedFailOver}
		r.Took = fmtDur(end.Sub(t.Start))
		if state == "unseen" {
			r.Took = "≈ " + r.Took
		}
		out = append(out, r)
	}
	slices.Reverse(out)
	return out
}

// LanesSVG renders the lanes of the picture: its bulk, thousands of
// elements for a big group, written here rather than by the template,
// which takes seconds for them. Every string is escaped for HTML (text
// and double-quoted attributes); links are the console's own paths.
func (tl *timeline) LanesSVG() template.HTML {
	n := 0
	for _, ln := range tl.Lanes {
		n += 200 + len(ln.Bars)*220 + len(ln.Gaps)*120 + len(ln.Marks)*100
	}
	w := &svgWriter{b: make([]byte, 0, n)}
	for i := range tl.Lanes {
		w.lane(tl, &tl.Lanes[i])
	}
	return template.HTML(w.b)
}

// svgWriter appends SVG to b.
type svgWriter struct{ b []byte }

func (w *svgWriter) s(s string) { w.b = append(w.b, s...) }

// esc appends s escaped for HTML text and double-quoted attributes.
func (w *svgWriter) esc(s string) {
	if !strings.ContainsAny(s, "<>&'\"\x00") {
		w.b = append(w.b, s...)
		return
	}
	w.b = append(w.b, template.HTMLEscapeString(s)...)
}

func (w *svgWriter) px(x px) {
	w.b = strconv.AppendFloat(w.b, math.Round(float64(x)*10)/10, 'f', -1, 64)
}

func (w *svgWriter) int(n int64)   { w.b = strconv.AppendInt(w.b, n, 10) }
func (w *svgWriter) uint(n uint64) { w.b = strconv.AppendUint(w.b, n, 10) }

// attr appends ` name="value"`, value escaped.
func (w *svgWriter) attr(name, value string) {
	w.s(" " + name + `="`)
	w.esc(value)
	w.s(`"`)
}

// pxAttr appends ` name="x"`.
func (w *svgWriter) pxAttr(name string, x px) {
	w.s(" " + name + `="`)
	w.px(x)
	w.s(`"`)
}

// title appends a tooltip, if any.
func (w *svgWriter) title(t string) {
	if t != "" {
		w.s("<title>")
		w.esc(t)
		w.s("</title>")
	}
}

// lane appends one lane: its label, track, gaps, bars and marks.
func (w *svgWriter) lane(tl *timeline, ln *lane) {
	w.s("\n<g class=\"lane")
	if ln.NoTerms {
		w.s(" noterms")
	}
	w.s(`"`)
	w.attr("data-lane", ln.Lease)
	w.s(` transform="translate(0,`)
	w.px(ln.Y)
	w.s(`)">`)
	label := func() {
		w.s(`<text class="label" x="4"`)
		w.pxAttr("y", ln.Mid)
		w.s(">")
		if ln.Href == "" {
			w.title(ln.Title)
		}
		w.esc(ln.Label)
		w.s("</text>")
	}
	if ln.Href != "" {
		w.s("<a")
		w.attr("href", ln.Href)
		w.s(">")
		w.title(ln.Title)
		w.s(`<rect class="hit"`)
		w.pxAttr("y", ln.HitY)
		w.pxAttr("width", tl.LabelW)
		w.pxAttr("height", ln.Pitch)
		w.s("/>")
		if ln.ShowLabel {
			label()
		}
		w.s("</a>")
	} else if ln.ShowLabel {
		label()
	}
	w.s(`<rect class="track"`)
	w.pxAttr("x", tl.PlotX)
	w.pxAttr("width", tl.PlotW)
	w.pxAttr("height", ln.H)
	w.s("/>")
	if ln.NoTerms && !tl.Compact {
		w.s(`<text class="none" dx="6"`)
		w.pxAttr("x", tl.PlotX)
		w.pxAttr("y", ln.Mid)
		w.s(">no terms recorded</text>")
	}
	for _, g := range ln.Gaps {
		w.s("\n" + `<rect class="gap"`)
		w.pxAttr("x", g.X)
		w.pxAttr("width", g.W)
		w.pxAttr("height", ln.H)
		w.s(` fill="url(#tl-hatch)" data-start="`)
		w.int(g.Start)
		w.s(`" data-end="`)
		w.int(g.End)
		w.s(`"`)
		w.closeWith("rect", g.Title)
	}
	for _, b := range ln.Bars {
		w.s("\n" + `<rect class="bar `)
		w.esc(b.Color)
		w.s(" " + b.State + `"`)
		w.pxAttr("x", b.X)
		w.pxAttr("width", b.W)
		w.pxAttr("height", ln.H)
		w.s(` data-token="`)
		w.uint(b.Token)
		w.s(`"`)
		w.attr("data-member", b.Member)
		w.s(` data-start="`)
		w.int(b.Start)
		w.s(`" data-end="`)
		w.int(b.End)
		w.s(`"`)
		w.attr("data-ended", b.Ended)
		w.closeWith("rect", b.Title)
		if b.Text != "" {
			w.s(`<text class="tok"`)
			w.pxAttr("x", b.TextX)
			w.pxAttr("y", ln.Mid)
			w.s(">")
			w.esc(b.Text)
			w.s("</text>")
		}
	}
	for _, m := range ln.Marks {
		if m.Kind == "failover" {
			w.s("\n" + `<polygon class="mark failover"`)
			w.attr("points", m.Points)
		} else {
			w.s("\n" + `<rect class="mark handoff"`)
			w.pxAttr("x", m.X)
			w.pxAttr("y", m.Y)
			w.pxAttr("width", m.W)
			w.pxAttr("height", m.H)
		}
		w.s(` data-token="`)
		w.uint(m.Token)
		w.s(`"`)
		if m.Kind == "failover" {
			w.closeWith("polygon", m.Title)
		} else {
			w.closeWith("rect", m.Title)
		}
	}
	w.s("\n</g>")
}

// closeWith ends an element's start tag: with its tooltip and end tag if
// it has one, else as an empty element.
func (w *svgWriter) closeWith(name, title string) {
	if title == "" {
		w.s("/>")
		return
	}
	w.s(">")
	w.title(title)
	w.s("</" + name + ">")
}
