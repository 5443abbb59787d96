package backend

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest lease or group name: an election's name, or a
// group's partition lease "{group}.{partition}".
const MaxNameLen = 128

// ErrInvalidName is matched by every error [CheckName] returns, and so by
// the errors of simba, its backends and its tools for a name that breaks
// the rule.
var ErrInvalidName = errors.New("simba/backend: invalid name")

// CheckName is the one rule for lease and group names, the same in simba,
// its backends and its tools: 1–128 characters of A–Z a–z 0–9 . _ -,
// starting with a letter or a digit. Such a name contains no "/", so a
// backend may use it as one path element. It returns nil for a valid name,
// otherwise an error matching [ErrInvalidName] that says what is wrong
// (empty, too long, which character at which byte), without a package
// prefix: callers add theirs and what the name is for,
// fmt.Errorf("simba/etcd: election %w", err) giving
// `simba/etcd: election invalid name "a b": character ' ' at byte 1 (…)`.
func CheckName(name string) error {
	if name == "" {
		return nameError(`invalid name "": empty`)
	}
	if len(name) > MaxNameLen {
		return nameError(fmt.Sprintf("invalid name %.20q…: %d bytes long, at most %d allowed", name, len(name), MaxNameLen))
	}
	for i, c := range name { // runes, so that a bad character is shown whole
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		case c == utf8.RuneError && !strings.HasPrefix(name[i:], string(utf8.RuneError)):
			return nameError(fmt.Sprintf("invalid name %q: invalid UTF-8 at byte %d (allowed: A-Z a-z 0-9 . _ -, first a letter or digit)", name, i))
		default:
			return nameError(fmt.Sprintf("invalid name %q: character %q at byte %d (allowed: A-Z a-z 0-9 . _ -, first a letter or digit)", name, c, i))
		}
	}
	return nil
}

// nameError is an error of CheckName: its message, matching ErrInvalidName.
type nameError string

func (e nameError) Error() string        { return string(e) }
func (e nameError) Is(target error) bool { return target == ErrInvalidName }

// ValidName reports whether s is a valid lease or group name (see
// [CheckName]).
func ValidName(s string) bool {
	if len(s) < 1 || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ { // the fast path of CheckName: bytes, no allocation
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == '-':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// ValidKey reports whether s is a valid record key (see Records): 1–512
// characters of A–Z a–z 0–9 . _ - and /, starting and ending with a letter
// or a digit, without "//".
func ValidKey(s string) bool {
	if s == "" || len(s) > 512 || strings.Contains(s, "//") {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == '-' || c == '/':
			if i == 0 || i == len(s)-1 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// CheckKey returns nil for a valid record key (see [ValidKey]) and an error
// that states the rule otherwise. A backend wraps it with its own package
// prefix ("simba/etcd: %w").
func CheckKey(key string) error {
	if !ValidKey(key) {
		return fmt.Errorf("simba/backend: invalid record key %q: want 1-512 characters of A-Z a-z 0-9 . _ - /, starting and ending with a letter or digit, without //", key)
	}
	return nil
}

// CheckRecord returns nil for a record a backend must accept: a valid key
// (see [CheckKey]) and a value of at most [MaxRecordValue] bytes; otherwise
// an error that says which rule failed. Every backend checks a record with
// it before it sends anything, and wraps the error with its own package
// prefix.
func CheckRecord(key string, value []byte) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if len(value) > MaxRecordValue {
		return fmt.Errorf("simba/backend: record %q: value of %d bytes exceeds %d", key, len(value), MaxRecordValue)
	}
	return nil
}
