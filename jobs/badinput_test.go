package jobs_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// Bad input found by review: each is refused with a clear, bounded error
// instead of a panic or an error as large as the input.

func TestPartitionsAtMostMaxPartitions(t *testing.T) {
	for _, n := range []string{"1099511627776", fmt.Sprint(simba.MaxPartitions + 1)} {
		in := "partitioned:\n- group: billing\n  partitions: " + n + "\n  fixedDelay: 1s\n"
		_, err := jobs.Load(strings.NewReader(in), jobs.YAML, jobstest.NoEnv)
		checkProblems(t, err, problem{"line 3", part, "billing", "partitions", jobs.ErrInvalidValue, fmt.Sprintf("at most %d, got %s", simba.MaxPartitions, n)})
	}
	cfg, err := jobs.Load(strings.NewReader(fmt.Sprintf("partitioned:\n- group: billing\n  partitions: %d\n  fixedDelay: 1s\n", simba.MaxPartitions)), jobs.YAML, jobstest.NoEnv)
	if err != nil {
		t.Fatalf("MaxPartitions refused: %v", err)
	}

	cfg.Partitioned[0].Partitions = 1 << 40 // in code
	err = jobs.Validate(nil, cfg)
	var found bool
	for _, fe := range fieldErrors(t, err) {
		found = found || fe.Key == "partitions" && strings.Contains(fe.Error(), "at most")
	}
	if !found {
		t.Errorf("Validate of 1<<40 partitions: %v", err)
	}
}

func TestLoadNilReader(t *testing.T) {
	var err error
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("Load(nil) panicked: %v", v)
			}
		}()
		_, err = jobs.Load(nil, jobs.YAML)
	}()
	if !errors.Is(err, jobs.ErrInvalidValue) || !strings.HasPrefix(err.Error(), "simba/jobs: ") {
		t.Errorf("Load(nil): %v, want an error matching ErrInvalidValue", err)
	}
}

// maxMessage bounds an error message about one problem, however large the
// input it quotes.
const maxMessage = 1024

func TestErrorMessagesQuoteBoundedInput(t *testing.T) {
	big := strings.Repeat("a", 1<<20)
	bigRunes := strings.Repeat("日本", 1<<18)
	// Keys longer than 1024 characters are not YAML: those cases are JSON.
	cases := map[string]struct {
		cfg  string
		json bool
		reg  func(*jobs.Registry)
		warn bool // the problem is one of the Warnings
	}{
		"cron":                 {cfg: "scheduled:\n- name: x\n  cron: \"0 " + big + "\"\n"},
		"misfire":              {cfg: "scheduled:\n- name: x\n  fixedDelay: 1s\n  misfire: " + big + "\n"},
		"name":                 {cfg: "scheduled:\n- name: " + big + "\n  fixedDelay: 1s\n"},
		"non-ASCII name":       {cfg: "scheduled:\n- name: " + bigRunes + "\n  fixedDelay: 1s\n"},
		"group":                {cfg: "partitioned:\n- group: " + big + "\n  partitions: 2\n  fixedDelay: 1s\n"},
		"key":                  {cfg: `{"scheduled": [{"name": "x", "fixedDelay": "1s", "` + big + `": 1}]}`, json: true},
		"top-level key":        {cfg: `{"` + big + `": 1}`, json: true},
		"repeated key":         {cfg: `{"scheduled": [{"name": "x", "fixedDelay": "1s", "` + big + `": 1, "` + big + `": 2}]}`, json: true},
		"duration":             {cfg: "scheduled:\n- name: x\n  fixedDelay: " + big + "\n"},
		"duration number":      {cfg: "scheduled:\n- name: x\n  fixedDelay: 1" + big + "\n"},
		"ISO duration":         {cfg: "scheduled:\n- name: x\n  fixedDelay: PT1S" + big + "\n"},
		"duration unit":        {cfg: "scheduled:\n- name: x\n  fixedDelay: 1s" + big + "\n"},
		"partitions":           {cfg: "partitioned:\n- group: g\n  partitions: " + big + "\n  fixedDelay: 1s\n"},
		"enabled":              {cfg: "scheduling:\n  enabled: " + big + "\n"},
		"placeholder":          {cfg: "scheduled:\n- name: ${" + big + "}\n  fixedDelay: 1s\n"},
		"unclosed placeholder": {cfg: "scheduled:\n- name: ${" + big + "\n  fixedDelay: 1s\n"},
		"self reference":       {cfg: `{"properties": {"` + big + `": "${` + big + `}"}, "scheduled": [{"name": "${` + big + `}", "fixedDelay": "1s"}]}`, json: true},
		"sharding items":       {cfg: "partitioned:\n- group: g\n  partitions: 2\n  fixedDelay: 1s\n  shardingItemParameters: " + big + "\n"},
		"sharding item number": {cfg: "partitioned:\n- group: g\n  partitions: 2\n  fixedDelay: 1s\n  shardingItemParameters: " + big + "=x\n"},
		"handler registered twice": {cfg: "",
			reg: func(r *jobs.Registry) { r.Scheduled("h"+big, noop); r.Scheduled("h"+big, noop) }},
		"handler": {cfg: "scheduled:\n- name: x\n  handler: h" + big + "\n  fixedDelay: 1s\n",
			reg: func(r *jobs.Registry) {}},
		"unused handler": {cfg: "", warn: true,
			reg: func(r *jobs.Registry) { r.Scheduled("h"+big, noop) }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			format := jobs.YAML
			if tc.json {
				format = jobs.JSON
			}
			cfg, err := jobs.Load(strings.NewReader(tc.cfg), format, jobstest.NoEnv)
			if tc.reg != nil {
				if err != nil {
					t.Fatalf("Load: %.300v", err)
				}
				reg := new(jobs.Registry)
				tc.reg(reg)
				err = jobs.Validate(reg, cfg)
				if tc.warn {
					if err != nil {
						t.Fatalf("Validate: %.300v", err)
					}
					err = &jobs.ConfigError{Errs: jobs.Warnings(reg, cfg)}
					if len(jobs.Warnings(reg, cfg)) == 0 {
						err = nil
					}
				}
			}
			if err == nil {
				t.Fatal("no error")
			}
			var ce *jobs.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("not a *ConfigError: %.300v", err)
			}
			for _, e := range ce.Errs {
				msg := e.Error()
				if len(msg) > maxMessage {
					t.Errorf("a %d-byte message: %.300s…", len(msg), msg)
				}
				if !strings.Contains(msg, "…") {
					t.Errorf("truncation not shown: %s", msg)
				}
				if !utf8.ValidString(msg) || strings.Contains(msg, `\x`) {
					t.Errorf("a rune split in the message: %s", msg)
				}
			}
		})
	}
}

func TestNonASCIINamesAreReportedByRune(t *testing.T) {
	for name, want := range map[string]string{
		"café":                          `character 'é' at byte 3`,
		"日本":                            `character '日' at byte 0`,
		strings.Repeat("a", 59) + "ééé": `"` + strings.Repeat("a", 59) + `é`, // clipped on a rune
	} {
		in := "scheduled:\n- name: " + name + "\n  fixedDelay: 1s\n"
		_, err := jobs.Load(strings.NewReader(in), jobs.YAML, jobstest.NoEnv)
		if err == nil {
			t.Fatalf("%q accepted", name)
		}
		msg := err.Error()
		if !strings.Contains(msg, want) || strings.Contains(msg, `\x`) || strings.Contains(msg, "Ã") {
			t.Errorf("%q: %s\nwant it to contain %s, and no bytes of split runes", name, msg, want)
		}
	}
}

func TestTooBigSaysAliasesOnlyWhenThereAreAliases(t *testing.T) {
	plain := "x: [" + strings.Repeat("1,", 100001) + "]\n"
	aliased := "a: &a [" + strings.Repeat("1,", 1000) + "]\nb: [" + strings.Repeat("*a,", 200) + "]\n"
	for name, tc := range map[string]struct {
		in      string
		format  jobs.Format
		aliases bool
	}{
		"YAML without aliases": {plain, jobs.YAML, false},
		"JSON":                 {`{"x": [` + strings.Repeat("1,", 100001) + `1]}`, jobs.JSON, false},
		"YAML with aliases":    {aliased, jobs.YAML, true},
	} {
		_, err := jobs.Load(strings.NewReader(tc.in), tc.format, jobstest.NoEnv)
		if !errors.Is(err, jobs.ErrSyntax) || !strings.Contains(err.Error(), "more than 100000 values") {
			t.Errorf("%s: %v, want a syntax error for too many values", name, err)
			continue
		}
		if got := strings.Contains(err.Error(), "alias"); got != tc.aliases {
			t.Errorf("%s: %v: mentions aliases %v, want %v", name, err, got, tc.aliases)
		}
	}
}
