package consoletest

import (
	"fmt"
	"regexp"
	"strconv"
)

// GridCell is one partition as a page shows it.
type GridCell struct {
	Partition     int
	Owner, Holder string
	Token         uint64
	State         string
}

var cellPattern = regexp.MustCompile(`<li class="cell [a-z]+(?: c[0-9])?" data-partition="([0-9]+)" data-owner="([^"]*)" data-holder="([^"]*)" data-token="([0-9]*)" data-state="([a-z]+)">`)

// ParseGrid returns the partitions of the grids in a page.
func ParseGrid(html string) []GridCell {
	var out []GridCell
	for _, m := range cellPattern.FindAllStringSubmatch(html, -1) {
		p, _ := strconv.Atoi(m[1])
		tok, _ := strconv.ParseUint(m[4], 10, 64)
		out = append(out, GridCell{Partition: p, Owner: m[2], Holder: m[3], Token: tok, State: m[5]})
	}
	return out
}

// GridMatches reports whether the grid shows every partition held by its
// true holder with its token, and owned by it; or says what differs.
func (f *Fleet) GridMatches(cells []GridCell) error {
	if len(cells) != f.Partitions {
		return fmt.Errorf("the grid shows %d partitions, want %d", len(cells), f.Partitions)
	}
	for p, h := range f.PartitionHolders() {
		c := cells[p]
		switch {
		case c.Partition != p:
			return fmt.Errorf("cell %d shows partition %d", p, c.Partition)
		case h.Member == "":
			return fmt.Errorf("partition %d: no node holds it", p)
		case c.Holder != h.Member || c.Token != h.Token:
			return fmt.Errorf("partition %d: the grid shows holder %q token %d, the nodes say %q token %d", p, c.Holder, c.Token, h.Member, h.Token)
		case c.Owner != h.Member || c.State != "held":
			return fmt.Errorf("partition %d: owner %q, state %q, held by %q", p, c.Owner, c.State, h.Member)
		}
	}
	return nil
}

var electionRowPattern = regexp.MustCompile(`<tr data-election="([^"]+)" data-holder="([^"]*)" data-token="([0-9]*)">`)

// ElectionRows returns the holder and token of each election row of a
// page, by election.
func ElectionRows(html string) map[string]Holding {
	out := map[string]Holding{}
	for _, m := range electionRowPattern.FindAllStringSubmatch(html, -1) {
		tok, _ := strconv.ParseUint(m[3], 10, 64)
		out[m[1]] = Holding{Member: m[2], Token: tok}
	}
	return out
}
