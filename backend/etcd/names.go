package etcd

import "fmt"

// validName reports whether s is a valid lease or group name: 1–128
// characters of A–Z a–z 0–9 . _ - starting with a letter or a digit. Such a
// name cannot contain "/", so a group's member keys never mix with those of
// another group.
func validName(s string) bool {
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

// nameError is the error for an invalid lease or group name.
func nameError(what, name string) error {
	return fmt.Errorf("simba/etcd: invalid %s name %q: want 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", what, name)
}
