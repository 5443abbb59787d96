package jobs

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
	"unicode/utf8"
)

// ParseDuration parses a duration written in any of three syntaxes:
//
//   - Go's, as time.ParseDuration reads it, with a day unit added: a sequence
//     of decimal numbers, each with an optional fraction and a unit, such as
//     "1m30s", "1.5h", "300ms", "2h45m", "1d12h". Units are ns, us (or µs),
//     ms, s, m, h and d (24 hours); the case of units does not matter.
//     Spring Boot's simple style ("10s", "500ms", "1d", "2h") is the
//     one-number case of it.
//   - A plain integer, in milliseconds: "5000" is 5s, as in Spring's
//     @Scheduled(fixedDelayString = "5000") and Spring Boot's default unit.
//   - ISO-8601 as java.time.Duration reads it: "PT1M", "PT0.5S", "P1D",
//     "P1DT2H30M", with days, hours, minutes and seconds (a fraction of up to
//     nine digits, after "." or ",", only on seconds); letters in either case.
//     Years, months and weeks have no fixed length and are refused.
//
// A leading "+" or "-" is allowed in each syntax (and on each ISO-8601
// component, as Java allows). Surrounding white space is ignored. Values
// beyond the range of time.Duration (about 292 years) are refused. Errors
// wrap [ErrDuration].
//
// ParseDuration accepts every string that time.Duration's String method
// returns, and gives back the same duration.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("%w: empty", ErrDuration)
	}
	body, neg := t, false
	if body[0] == '+' || body[0] == '-' {
		neg = body[0] == '-'
		body = body[1:]
	}
	var (
		v   *big.Int
		err error
	)
	switch {
	case body == "":
		err = fmt.Errorf("a sign alone")
	case body[0] == 'P' || body[0] == 'p':
		v, err = parseISO(body[1:])
	case allDigits(body) && len(body) > maxDigits:
		err = fmt.Errorf("out of range")
	case allDigits(body):
		v, _ = new(big.Int).SetString(body, 10)
		v.Mul(v, big.NewInt(int64(time.Millisecond)))
	default:
		v, err = parseUnits(body)
	}
	if err != nil {
		return 0, fmt.Errorf("%w %s: %v", ErrDuration, quote(s), err)
	}
	if neg {
		v.Neg(v)
	}
	if !v.IsInt64() {
		return 0, fmt.Errorf("%w %s: out of range (at most %v)", ErrDuration, quote(s), time.Duration(math.MaxInt64))
	}
	return time.Duration(v.Int64()), nil
}

// unitNanos holds the units of the Go-style syntax, in lower case.
var unitNanos = map[string]int64{
	"ns": int64(time.Nanosecond),
	"us": int64(time.Microsecond),
	"µs": int64(time.Microsecond), // U+00B5 micro sign
	"μs": int64(time.Microsecond), // U+03BC Greek small letter mu
	"ms": int64(time.Millisecond),
	"s":  int64(time.Second),
	"m":  int64(time.Minute),
	"h":  int64(time.Hour),
	"d":  24 * int64(time.Hour),
}

// maxDigits bounds the digits read in one number, so that a huge input does
// not turn into a huge computation; longer fractions are cut (they are far
// below a nanosecond), longer integers are out of range anyway.
const maxDigits = 40

// parseUnits reads the Go-style syntax without its sign: one or more
// number-unit pairs.
func parseUnits(s string) (*big.Int, error) {
	if s == "0" {
		return new(big.Int), nil
	}
	total := new(big.Int)
	for s != "" {
		var whole, frac string
		whole, s = leadingDigits(s)
		hasDot := s != "" && s[0] == '.'
		if hasDot {
			frac, s = leadingDigits(s[1:])
		}
		if whole == "" && frac == "" {
			return nil, fmt.Errorf("expected a number at %s", quote(s))
		}
		i := 0
		for i < len(s) && s[i] != '.' && !isDigit(s[i]) {
			i++
		}
		unit := s[:i]
		s = s[i:]
		if unit == "" {
			return nil, fmt.Errorf("missing unit after %s (units: ns, us, ms, s, m, h, d; a plain integer is milliseconds)", clip(whole+dotIf(hasDot)+frac))
		}
		mult, ok := unitNanos[strings.ToLower(unit)]
		if !ok {
			return nil, fmt.Errorf("unknown unit %s (units: ns, us, ms, s, m, h, d)", quote(unit))
		}
		if len(whole) > maxDigits {
			return nil, fmt.Errorf("out of range")
		}
		total.Add(total, scaled(whole, frac, mult))
	}
	return total, nil
}

// isoWant describes the ISO-8601 syntax in errors.
const isoWant = `want P[nD][T[nH][nM][n[.f]S]], such as PT1M, PT0.5S or P1DT2H`

// parseISO reads ISO-8601 after its "P": [nD][T[nH][nM][n[.f]S]].
func parseISO(s string) (*big.Int, error) {
	total := new(big.Int)
	found := false
	// Days, then after a T hours, minutes and seconds, each letter only
	// after the ones before it.
	for _, part := range []struct {
		prefix string
		units  string
	}{{"", "D"}, {"T", "HMS"}} {
		if part.prefix != "" {
			if s == "" || upper(s[0]) != part.prefix[0] {
				break
			}
			s = s[1:]
		}
		inPart := false
		for units := part.units; units != ""; {
			rest, u, v, err := isoComponent(s, units)
			if err != nil {
				return nil, err
			}
			if v == nil {
				break
			}
			total.Add(total, v)
			s, found, inPart = rest, true, true
			units = units[strings.IndexByte(units, u)+1:]
		}
		if part.prefix != "" && !inPart {
			return nil, fmt.Errorf("nothing after %s: %s", part.prefix, isoWant)
		}
	}
	if s != "" {
		return nil, fmt.Errorf("unexpected %s: %s", quote(s), isoWant)
	}
	if !found {
		return nil, fmt.Errorf("no component: %s", isoWant)
	}
	return total, nil
}

// isoNanos are the nanoseconds of the ISO-8601 letters.
var isoNanos = map[byte]int64{'D': unitNanos["d"], 'H': unitNanos["h"], 'M': unitNanos["m"], 'S': unitNanos["s"]}

// isoComponent reads a signed integer (with a fraction, for seconds) and one
// of the letters in units at the start of s. It returns a nil v when s does
// not start with a number.
func isoComponent(s, units string) (rest string, unit byte, v *big.Int, err error) {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	whole, s := leadingDigits(s)
	if whole == "" {
		return "", 0, nil, nil
	}
	var frac string
	if s != "" && (s[0] == '.' || s[0] == ',') {
		frac, s = leadingDigits(s[1:])
		if len(frac) > 9 {
			return "", 0, nil, fmt.Errorf("more than nine digits of fraction")
		}
	}
	if s == "" {
		return "", 0, nil, fmt.Errorf("number without a unit letter: %s", isoWant)
	}
	u := upper(s[0])
	if frac != "" && u != 'S' {
		return "", 0, nil, fmt.Errorf("a fraction is allowed only on seconds: %s", isoWant)
	}
	if !strings.ContainsRune(units, rune(u)) {
		if u == 'Y' || u == 'W' || (u == 'M' && units == "D") {
			return "", 0, nil, fmt.Errorf("years, months and weeks have no fixed length: %s", isoWant)
		}
		return "", 0, nil, fmt.Errorf("unexpected %q: %s", firstRune(s), isoWant)
	}
	if len(whole) > maxDigits {
		return "", 0, nil, fmt.Errorf("out of range")
	}
	v = scaled(whole, frac, isoNanos[u])
	if neg {
		v.Neg(v)
	}
	return s[1:], u, v, nil
}

// scaled returns whole.frac × mult, truncated to an integer.
func scaled(whole, frac string, mult int64) *big.Int {
	if len(frac) > maxDigits {
		frac = frac[:maxDigits]
	}
	m := big.NewInt(mult)
	v := new(big.Int)
	if whole != "" {
		v.SetString(whole, 10)
	}
	v.Mul(v, m)
	if frac != "" {
		f, _ := new(big.Int).SetString(frac, 10)
		f.Mul(f, m)
		f.Quo(f, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil))
		v.Add(v, f)
	}
	return v
}

func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func allDigits(s string) bool {
	d, rest := leadingDigits(s)
	return d != "" && rest == ""
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

func dotIf(b bool) string {
	if b {
		return "."
	}
	return ""
}

// firstRune is the first character of s, for an error that shows a
// character, not a byte of one.
func firstRune(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	return r
}
