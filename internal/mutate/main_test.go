package main

import (
	"os"
	"testing"
	"time"
)

// TestMutants plants each mutant of a small package and runs its test: the
// changed boundary of Less is killed, Sum's operator survives (no test
// looks at it), and a mutant that does not compile is unviable.
func TestMutants(t *testing.T) {
	tg := &target{name: "cmp", dir: "testdata/cmp", files: []string{"cmp.go"}, timeout: 2 * time.Minute}
	ms, err := mutants(tg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]mutant{}
	for _, m := range ms {
		got[m.from+"→"+m.to] = m
	}
	if len(ms) != 2 {
		t.Fatalf("mutants of cmp.go: got %d (%v), want 2: < to <= and + to -", len(ms), got)
	}
	tmp := t.TempDir()
	if r := test(tmp, tg, nil); r.status != "survived" {
		t.Fatalf("the unmutated package: %s (%s), want its tests to pass", r.status, r.why)
	}
	for want, status := range map[string]string{"<→<=": "killed", "+→-": "survived"} {
		m, ok := got[want]
		if !ok {
			t.Fatalf("no mutant %s among %v", want, got)
		}
		if r := test(tmp, tg, &m); r.status != status {
			t.Errorf("mutant %s: %s (%s), want %s", m.id(), r.status, r.why, status)
		}
	}
	bad := got["<→<="]
	bad.to = "<<<"
	if r := test(tmp, tg, &bad); r.status != "unviable" {
		t.Errorf("a mutant that does not compile: %s (%s), want unviable", r.status, r.why)
	}
	if _, err := os.Stat("testdata/cmp/cmp.go"); err != nil {
		t.Fatal(err)
	}
}

// TestIDs reads the mutants of an -only file, as listed by hand or copied
// from a report's survivors; an operator's own characters are kept.
func TestIDs(t *testing.T) {
	got := ids("a.go:1:2:||\n- `b.go:3:4:&&` \"&&\" → \"||\"\n\n c.go:5:6:call extra\n")
	for _, id := range []string{"a.go:1:2:||", "b.go:3:4:&&", "c.go:5:6:call"} {
		if !got[id] {
			t.Errorf("ids: %s missing from %v", id, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("ids: got %v, want 3", got)
	}
}
