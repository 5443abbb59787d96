package check

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestTermsAcceptsDisjointIncreasing(t *testing.T) {
	terms := []Term{
		{Name: "a", Token: 1, Start: at(0), End: at(5)},
		{Name: "a", Token: 3, Start: at(5), End: at(9)},
		{Name: "b", Token: 2, Start: at(1), End: at(20)},
	}
	if errs := Terms(terms); len(errs) != 0 {
		t.Fatalf("want no violations, got %v", errs)
	}
}

func TestTermsCatchesOverlap(t *testing.T) {
	terms := []Term{
		{Name: "a", Token: 1, Start: at(0), End: at(5)},
		{Name: "a", Token: 2, Start: at(4.9), End: at(9)},
	}
	if errs := Terms(terms); len(errs) != 1 {
		t.Fatalf("want one I1 violation, got %v", errs)
	}
}

func TestTermsCatchesDecreasingToken(t *testing.T) {
	terms := []Term{
		{Name: "a", Token: 5, Start: at(0), End: at(1)},
		{Name: "a", Token: 4, Start: at(2), End: at(3)},
		{Name: "a", Token: 4, Start: at(4), End: at(5)},
	}
	errs := Terms(terms)
	if len(errs) != 3 { // 4 after 5, 4 after 4, 4 twice
		t.Fatalf("want three I2 violations, got %v", errs)
	}
}

func TestAgainstGrants(t *testing.T) {
	grants := []Grant{
		{Name: "a", Token: 1, Start: at(0), End: at(10), Ended: true, Expired: true},
		{Name: "a", Token: 2, Start: at(10), End: at(11), Ended: true},
		{Name: "a", Token: 3, Start: at(11)},
	}
	good := []Term{
		{Name: "a", Token: 1, Start: at(0), End: at(9)},
		{Name: "a", Token: 2, Start: at(10), End: at(11)}, // revoked as it released
		{Name: "a", Token: 3, Start: at(11), End: at(12)},
	}
	gap, errs := AgainstGrants(good, grants)
	if len(errs) != 0 || gap != time.Second {
		t.Fatalf("good history: gap %v, errors %v", gap, errs)
	}
	bad := []Term{
		{Name: "a", Token: 1, Start: at(0), End: at(10)},   // ends as the backend frees it
		{Name: "a", Token: 2, Start: at(9), End: at(10.5)}, // begins before its grant
		{Name: "a", Token: 9, Start: at(11), End: at(12)},  // no grant
	}
	if _, errs := AgainstGrants(bad, grants); len(errs) != 3 {
		t.Fatalf("bad history: want 3 violations, got %v", errs)
	}
}

func TestRegisterAndStaleWrites(t *testing.T) {
	fenced := NewRegister(true)
	if !fenced.Write("a", 2, "x") || fenced.Write("a", 1, "y") || !fenced.Write("a", 2, "x") || !fenced.Write("b", 1, "y") {
		t.Fatal("the fenced register accepts exactly the tokens at least as high as the highest")
	}
	if errs := StaleWrites(fenced.Writes()); len(errs) != 0 {
		t.Fatalf("fenced: %v", errs)
	}
	open := NewRegister(false)
	open.Write("a", 2, "x")
	open.Write("a", 1, "y") // accepted: the negative control
	if errs := StaleWrites(open.Writes()); len(errs) != 1 {
		t.Fatalf("unfenced: want one I3 violation, got %v", errs)
	}
}

func TestCovered(t *testing.T) {
	terms := []Term{{Name: "a", Token: 1, Start: at(0), End: at(5)}, {Name: "b", Token: 2, Start: at(6), End: at(9)}}
	if errs := Covered(terms, []string{"a"}, at(4)); len(errs) != 0 {
		t.Fatal(errs)
	}
	if errs := Covered(terms, []string{"a", "b"}, at(5)); len(errs) != 2 { // a ended at 5, b starts at 6
		t.Fatalf("want two I5 violations, got %v", errs)
	}
}

// A term granted and lost at one instant, and the next granted at that
// instant: recorded in either order, they are in their tokens' order.
func TestTermsAtOneInstant(t *testing.T) {
	terms := []Term{
		{Name: "a", Token: 11, Start: at(2), End: at(3)},
		{Name: "a", Token: 10, Start: at(2), End: at(2)},
	}
	if errs := Terms(terms); len(errs) != 0 {
		t.Fatalf("two terms of one instant, the first empty: %v", errs)
	}
	terms[1].End = at(2.5)
	if errs := Terms(terms); len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "I1:") {
		t.Fatalf("want the overlap, got %v", errs)
	}
}
