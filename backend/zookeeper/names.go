package zookeeper

import (
	"fmt"
	"strings"
)

// Znode layout under the root (see the package documentation).
const (
	leaseDir = "/lease"
	groupDir = "/group"
)

// validName reports whether s is a valid lease or group name: 1–128
// characters of A–Z a–z 0–9 . _ - starting with a letter or a digit. Such a
// name is always a valid znode name: it contains no "/" and is never "." or
// "..".
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

// nameError describes an invalid lease or group name.
func nameError(what, name string) error {
	return fmt.Errorf("simba/zookeeper: invalid %s name %q: want 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", what, name)
}

// checkRoot validates a root path: absolute, not "/", no trailing slash, no
// empty, "." or ".." segment, and no character ZooKeeper refuses.
func checkRoot(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("simba/zookeeper: invalid root %q: %s", p, why)
	}
	switch {
	case p == "":
		return bad("empty")
	case p == "/":
		return bad(`"/" is not allowed; use a path of its own such as "/simba"`)
	case !strings.HasPrefix(p, "/"):
		return bad(`must start with "/"`)
	case strings.HasSuffix(p, "/"):
		return bad(`must not end with "/"`)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return bad("empty path segment")
		case ".", "..":
			return bad(`"." and ".." segments are not allowed`)
		}
		if seg == "zookeeper" && strings.Count(p, "/") == 1 {
			return bad("/zookeeper is reserved by the server")
		}
		for _, r := range seg {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
				return bad(fmt.Sprintf("character %U is not allowed in a znode name", r))
			}
		}
	}
	return nil
}

// paths builds the znode paths of one backend.
type paths struct{ root string }

// lease is the ephemeral znode of lease name.
func (p paths) lease(name string) string { return p.root + leaseDir + "/" + name }

// leaseName returns the lease name of a lease znode path.
func (p paths) leaseName(path string) (string, bool) {
	name, ok := strings.CutPrefix(path, p.root+leaseDir+"/")
	return name, ok && validName(name)
}

// group is the container znode of group's members.
func (p paths) group(group string) string { return p.root + groupDir + "/" + group }

// member is the ephemeral znode of one session in group.
func (p paths) member(group, session string) string { return p.group(group) + "/" + session }
