package console

import "html/template"

// overview is what the landing page shows.
type overview struct{}

// overviewFuncs are the template functions of the overview and charts.
var overviewFuncs = template.FuncMap{}

func (p *page) buildOverview(l *loader) error {
	p.Overview = &overview{}
	return nil
}
