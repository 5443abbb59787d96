package jobs_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{
		"region":     "eu",
		"empty":      "",
		"app.region": "${region}-west",
		"env":        "prod",
		"db.prod":    "pg://prod",
		"colon":      "a:b",
		"twice":      "${region}${region}",
	}
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"", ""},
		{"${region}", "eu"},
		{"x-${region}-y", "x-eu-y"},
		{"${region}${region}", "eueu"},
		{"${missing:fallback}", "fallback"},
		{"${missing:}", ""},
		{"${empty:unused}", ""},
		{"${region:unused}", "eu"},
		{"${app.region}", "eu-west"},
		{"${missing:${region}}", "eu"},
		{"${missing:${other:deep}}", "deep"},
		{"${db.${env}}", "pg://prod"},
		{"${colon}", "a:b"},
		{"${missing:a:b}", "a:b"},
		{"${missing:{x}}", "{x}"},
		{`\${region}`, "${region}"},
		{`a\${b`, "a${b"},
		{"$", "$"},
		{"$region", "$region"},
		{"}{", "}{"},
		{"cost: $5 {ok}", "cost: $5 {ok}"},
		{"${twice}", "eueu"},
	} {
		got, err := jobs.Expand(tc.in, jobstest.LookupIn(vars))
		if err != nil || got != tc.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestExpandRefuses(t *testing.T) {
	vars := map[string]string{
		"a":    "${b}",
		"b":    "${c}",
		"c":    "${a}",
		"self": "x${self}",
		"bad":  "${unclosed",
	}
	// A value doubling at every level grows past the limit.
	for i := range 30 {
		vars[fmt.Sprint("grow", i)] = fmt.Sprintf("${grow%d}${grow%d}", i+1, i+1)
	}
	vars["grow30"] = strings.Repeat("x", 64)
	for _, tc := range []struct{ in, msg string }{
		{"${missing}", "${missing} is not set"},
		{"${a}", "a -> b -> c -> a"},
		{"${self}", "self -> self"},
		{"${unclosed", "has no closing }"},
		{"x ${a:{b}", "has no closing }"},
		{"${}", "empty name"},
		{"${:default}", "empty name"},
		{"${${empty:}}", "empty name"},
		{"${bad}", "has no closing }"},
		{"${grow0}", "longer than"},
		{"${missing:${also-missing}}", "${also-missing} is not set"},
	} {
		got, err := jobs.Expand(tc.in, jobstest.LookupIn(vars))
		if err == nil {
			t.Errorf("Expand(%q) = %q, want an error", tc.in, got)
			continue
		}
		if !errors.Is(err, jobs.ErrPlaceholder) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Expand(%q): %v; want ErrPlaceholder saying %q", tc.in, err, tc.msg)
		}
	}
}

func TestExpandDepthLimit(t *testing.T) {
	vars := map[string]string{}
	for i := range 100 {
		vars["v"+strings.Repeat("x", i)] = "${v" + strings.Repeat("x", i+1) + "}"
	}
	_, err := jobs.Expand("${v}", jobstest.LookupIn(vars))
	if !errors.Is(err, jobs.ErrPlaceholder) || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("deep chain: %v", err)
	}
	// Nesting in the text itself is bounded too, so a long run of "${"
	// costs little.
	deep := strings.Repeat("${x:", 100000) + strings.Repeat("}", 100000)
	start := time.Now()
	_, err = jobs.Expand(deep, jobstest.LookupIn(vars))
	if !errors.Is(err, jobs.ErrPlaceholder) || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("deep text: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("deep text took %v", d)
	}
}
