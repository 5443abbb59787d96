package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Sentinel errors. Every problem found in a configuration is reported as a
// [*FieldError] wrapping one of them, and all the problems of one
// configuration together as a [*ConfigError]; test them with errors.Is.
var (
	// ErrSyntax reports a configuration file that cannot be read: malformed
	// YAML or JSON, a value of the wrong shape (a list where a map is
	// expected, a single value where a command's list of strings is), an
	// unknown or repeated key (also one key given in two spellings, such as
	// fixedDelay and fixed-delay).
	ErrSyntax = errors.New("simba/jobs: syntax error")

	// ErrPlaceholder reports a ${...} placeholder that cannot be resolved:
	// its name is neither in the environment nor in the properties and it
	// has no default, or it refers to itself, or it is malformed.
	ErrPlaceholder = errors.New("simba/jobs: bad placeholder")

	// ErrDuration reports a duration that cannot be parsed (see
	// [ParseDuration]) or is out of range for its key: fixedDelay and
	// fixedRate must be positive; initialDelay, timeout, catchUpWindow,
	// progressTimeout, retry.backoff, retry.maxBackoff and a webhook's
	// timeout must not be negative.
	ErrDuration = errors.New("simba/jobs: invalid duration")

	// ErrTiming reports a job with more than one of fixedDelay, fixedRate
	// and cron, or none: exactly one must be set.
	ErrTiming = errors.New("simba/jobs: exactly one of fixedDelay, fixedRate and cron must be set")

	// ErrInvalidValue reports any other bad value: a missing or malformed
	// name, partitions ≤ 0 or above [simba.MaxPartitions], a malformed
	// boolean, cron expression (the error wraps [simba.ErrInvalidSchedule]
	// too), misfire policy or sharding-item parameter, a nil handler; an
	// empty command list, a command whose program (its first element) is
	// blank or which holds a NUL byte, and a job with both a command and a
	// handler; a run policy out of range (negative retry attempts,
	// pauseAfterFailures or webhook attempts, a retry multiplier below 1 or
	// a jitter outside [0, 1], an unknown overlap policy, maxConcurrent
	// below 1 or without overlap: allow); a webhook URL that is not an
	// absolute http or https URL, and a bad webhook header.
	ErrInvalidValue = errors.New("simba/jobs: invalid value")

	// ErrDuplicateName reports two jobs, or two handlers, with one name.
	// Scheduled jobs and partitioned jobs share one space of lease names:
	// a scheduled job must not be named like another job, nor like a
	// partition "{group}.{p}" of a partitioned one.
	ErrDuplicateName = errors.New("simba/jobs: duplicate name")

	// ErrNoHandler reports a job whose handler is not registered, or is
	// registered for the other kind of job; and, from [Run] without
	// [WithCommandRunner], a job with a command, which nothing would run.
	ErrNoHandler = errors.New("simba/jobs: no such handler")

	// ErrUnusedHandler marks a warning, not a problem: a registered handler
	// that no job uses, usually a job missing from the configuration or a
	// misspelt name (see [Warnings]).
	ErrUnusedHandler = errors.New("simba/jobs: handler not used by any job")
)

// prefix starts every error message of the package.
const prefix = "simba/jobs: "

// FieldError is one problem in a configuration: which job, which key, and
// what is wrong with it.
type FieldError struct {
	// Pos is where the value was read: "jobs.yaml:12" for a file loaded with
	// [LoadFile], "line 12" with [Load], "" for a [Config] built in code or a
	// [Registry] problem.
	Pos string
	// Kind says what Name names: "scheduled job", "partitioned job",
	// "handler", or "" for a setting outside any job (Key then says which).
	Kind string
	// Name is the job's name or group, the handler's name, or "#n" (counted
	// from 1) for a job without a name.
	Name string
	// Key is the configuration key at fault, as written in files:
	// "fixedDelay", "partitions", "scheduling.enabled", …; "" when the problem
	// is the job as a whole.
	Key string
	// Err wraps one of the package's sentinel errors.
	Err error

	line int // the line of Pos, 0 if none: the order of problems
}

// Error describes the problem on one line: position, job, key, what is wrong.
// Values from the input (Name, Key, and those quoted in Err) are shown cut to
// their first 64 characters, followed by "…", so that the message stays
// short however large the input; the fields keep them whole.
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(prefix)
	if e.Pos != "" {
		b.WriteString(e.Pos)
		b.WriteString(": ")
	}
	if e.Kind != "" {
		b.WriteString(e.Kind)
		if strings.HasPrefix(e.Name, "#") {
			b.WriteString(" " + e.Name)
		} else {
			b.WriteString(" " + quote(e.Name))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(clip(e.Key))
		b.WriteString(": ")
	}
	if e.Err != nil {
		b.WriteString(strings.TrimPrefix(e.Err.Error(), prefix))
	}
	return b.String()
}

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// ConfigError is every problem found in one configuration, reported together
// so that one run of the program shows them all. Errs holds them, each
// usually a [*FieldError], in the order of their lines in the file; the
// problems without a line (of a Config built in code, of a Registry) follow,
// in the order they were found.
type ConfigError struct {
	Errs []error // every problem found, in the order above
}

// Error lists the problems, one per line.
func (e *ConfigError) Error() string {
	if len(e.Errs) == 1 {
		return e.Errs[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s%d problems in the job configuration:", prefix, len(e.Errs))
	for _, err := range e.Errs {
		b.WriteString("\n\t")
		b.WriteString(strings.TrimPrefix(err.Error(), prefix))
	}
	return b.String()
}

// Unwrap returns Errs, so that errors.Is and errors.As look into each.
func (e *ConfigError) Unwrap() []error { return e.Errs }

// problems collects FieldErrors.
type problems struct {
	errs []error
}

func (p *problems) add(pos position, kind, name, key string, err error) {
	p.errs = append(p.errs, &FieldError{Pos: pos.text, Kind: kind, Name: name, Key: key, Err: err, line: pos.line})
}

// err returns a *ConfigError with every problem, or nil. The problems are
// in the order of their lines in the file, those without a line last, and
// otherwise in the order found.
func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	errs := slices.Clone(p.errs)
	slices.SortStableFunc(errs, func(a, b error) int {
		return cmp.Compare(lineOf(a), lineOf(b))
	})
	return &ConfigError{Errs: errs}
}

// lineOf returns the line of a problem, or a line after every other.
func lineOf(err error) int {
	if fe, ok := err.(*FieldError); ok && fe.line > 0 {
		return fe.line
	}
	return math.MaxInt
}

// maxQuoted is the most runes of one input value an error message shows.
const maxQuoted = 64

// quote is how every error message shows a value from the input: quoted as
// %q does (so that every rune is shown as itself or escaped whole), cut to
// its first maxQuoted runes and followed by "…" when it is longer, so that
// a message stays short however large the input.
func quote(s string) string {
	head, cut := cutRunes(s)
	if cut {
		return strconv.Quote(head) + "…"
	}
	return strconv.Quote(s)
}

// clip is quote without the quotes, for values shown bare: a key, a
// placeholder's name inside ${…}.
func clip(s string) string {
	head, cut := cutRunes(s)
	if cut {
		return head + "…"
	}
	return s
}

// cutRunes returns the first maxQuoted runes of s, and whether there was
// more. It never splits a rune.
func cutRunes(s string) (head string, cut bool) {
	n := 0
	for i := range s {
		if n == maxQuoted {
			return s[:i], true
		}
		n++
	}
	return s, false
}

// position is where a value was read: "jobs.yaml:12" and 12. The zero
// position is none.
type position struct {
	text string
	line int
}
