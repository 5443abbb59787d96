package simba

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest lease name: an election name, or a group's
// partition lease "{group}.{partition}".
const MaxNameLen = 128

// checkName reports whether s is a valid lease name: 1–128 characters of
// A–Z a–z 0–9 . _ -, starting with a letter or a digit.
func checkName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s name is empty", ErrInvalidName, what)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%w: %s name %.20q… is %d bytes long, at most %d allowed", ErrInvalidName, what, s, len(s), MaxNameLen)
	}
	for i, c := range s { // runes, so that a bad character is shown whole
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		case c == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)):
			return fmt.Errorf("%w: %s name %q: invalid UTF-8 at %d (allowed: A-Z a-z 0-9 . _ -, first a letter or digit)", ErrInvalidName, what, s, i)
		default:
			return fmt.Errorf("%w: %s name %q: character %q at %d (allowed: A-Z a-z 0-9 . _ -, first a letter or digit)", ErrInvalidName, what, s, c, i)
		}
	}
	return nil
}

// CheckName reports whether name may name an election, a group or a lease:
// 1–128 characters of A–Z a–z 0–9 . _ -, starting with a letter or a digit.
// The error matches [ErrInvalidName].
func CheckName(name string) error { return checkName("lease", name) }
