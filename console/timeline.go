package console

import (
	"html/template"
	"net/url"
)

// timeline is what the timeline page shows.
type timeline struct{}

// timelineFuncs are the template functions of the timeline page.
var timelineFuncs = template.FuncMap{}

// parseTimelineView returns the view of /timeline with query q.
func parseTimelineView(q url.Values) (view, bool) {
	return view{Kind: "timeline", Name: q.Get("group"), Range: "1h", Part: -1}, true
}

// timelinePath is the path of a timeline view, with its query.
func (v view) timelinePath() string { return "/timeline" }

func (p *page) buildTimeline(l *loader) error {
	p.Timeline = &timeline{}
	return nil
}
