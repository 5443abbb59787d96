package admin

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalidArgs is wrapped by the error of a trigger whose arguments
// break the rules of CheckArgs, and by ParseArgs's errors.
var ErrInvalidArgs = errors.New("simba/admin: invalid trigger arguments")

// The bounds of a trigger's arguments (see CheckArgs).
const (
	MaxArgs      = 32      // arguments per trigger
	MaxArgValue  = 1 << 10 // bytes of one value
	MaxArgsBytes = 8 << 10 // bytes of all keys and values together
	maxArgKey    = 64      // bytes of a key, as argKey says
	argKeyRule   = "a letter or _, then at most 63 letters, digits, _, . or -"
)

// argKey is what an argument's key may be.
var argKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)

// CheckArgs checks the arguments of a trigger: at most MaxArgs of them;
// each key a letter or _, then at most 63 letters, digits, _, . or -; each
// value valid UTF-8 of at most MaxArgValue bytes; keys and values together
// at most MaxArgsBytes. Its error wraps ErrInvalidArgs and names the first
// argument at fault (keys in order). Nil and empty args are valid: a
// trigger without arguments.
func CheckArgs(args map[string]string) error {
	if len(args) > MaxArgs {
		return fmt.Errorf("%w: %d arguments, at most %d", ErrInvalidArgs, len(args), MaxArgs)
	}
	total := 0
	for _, k := range slices.Sorted(mapsKeys(args)) {
		if err := checkArg(k, args[k]); err != nil {
			return err
		}
		total += len(k) + len(args[k])
	}
	if total > MaxArgsBytes {
		return fmt.Errorf("%w: %d bytes of keys and values in all, at most %d", ErrInvalidArgs, total, MaxArgsBytes)
	}
	return nil
}

// checkArg checks one argument.
func checkArg(key, value string) error {
	switch {
	case !argKey.MatchString(key):
		return fmt.Errorf("%w: key %s: a key is %s", ErrInvalidArgs, clipQuote(key, maxArgKey), argKeyRule)
	case len(value) > MaxArgValue:
		return fmt.Errorf("%w: the value of %s is %d bytes, at most %d", ErrInvalidArgs, key, len(value), MaxArgValue)
	case !utf8.ValidString(value):
		return fmt.Errorf("%w: the value of %s is not valid UTF-8", ErrInvalidArgs, key)
	}
	return nil
}

// ParseArgs parses arguments written key=value, one a string (the simba
// command's --arg, the console's lines): the key is what comes before the
// first '=', the value all after it, as it is (an empty value is one). It
// refuses a string without '=', a key given twice, and what CheckArgs
// refuses, with an error wrapping ErrInvalidArgs. No pairs give nil.
func ParseArgs(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	if len(pairs) > MaxArgs {
		return nil, fmt.Errorf("%w: %d arguments, at most %d", ErrInvalidArgs, len(pairs), MaxArgs)
	}
	args := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("%w: %s is not key=value (no '=')", ErrInvalidArgs, clipQuote(p, maxArgKey))
		}
		if _, dup := args[k]; dup {
			return nil, fmt.Errorf("%w: key %s given twice", ErrInvalidArgs, clipQuote(k, maxArgKey))
		}
		if err := checkArg(k, v); err != nil {
			return nil, err
		}
		args[k] = v
	}
	if err := CheckArgs(args); err != nil {
		return nil, err
	}
	return args, nil
}

// FormatArgs writes arguments for a line of text, sorted by key, as
// ParseArgs reads them: `day=2025-03-04 note="two words"`. A value that
// is empty or holds spaces, quotes, backslashes or characters that do not
// print is quoted as a Go string. No arguments give "".
func FormatArgs(args map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(mapsKeys(args)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(argValue(args[k]))
	}
	return b.String()
}

// argValue is a value as FormatArgs writes it.
func argValue(v string) string {
	if v == "" || strings.ContainsFunc(v, func(r rune) bool {
		return r == '"' || r == '\\' || unicode.IsSpace(r) || !unicode.IsPrint(r)
	}) {
		return strconv.Quote(v)
	}
	return v
}

// clipQuote quotes s for an error message, cut to n bytes.
func clipQuote(s string, n int) string {
	if len(s) > n {
		return strconv.Quote(s[:n]) + "…"
	}
	return strconv.Quote(s)
}
