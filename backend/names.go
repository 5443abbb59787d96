package backend

import (
	"fmt"
	"strings"
)

// ValidName reports whether s is a valid lease or group name: 1–128
// characters of A–Z a–z 0–9 . _ -, starting with a letter or a digit. Such a
// name contains no "/", so backends may use it as one path element.
func ValidName(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
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
