package zookeeper

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/simba-go/simba/backend"
)

// Znode layout under the root (see the package documentation).
const (
	leaseDir  = "/lease"
	groupDir  = "/group"
	recordDir = "/rec"
	// recordLeaf is the name of the znode that holds a record, under the
	// directory of its key. No key segment is encoded to it.
	recordLeaf = "="
)

// checkName is [backend.CheckName] with the package prefix and what the
// name is for ("lease", "group"). A valid name is always a valid znode
// name: it contains no "/" and is never "." or "..".
func checkName(what, name string) error {
	if err := backend.CheckName(name); err != nil {
		return fmt.Errorf("simba/zookeeper: %s %w", what, err)
	}
	return nil
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

// lease is the container znode of lease name's candidacies.
func (p paths) lease(name string) string { return p.root + leaseDir + "/" + name }

// candidacyPrefix is the path of a candidacy of session sid for lease name,
// made by the attempt nonce, without the sequence number the server
// appends: <root>/lease/<name>/<sid>-<nonce>-.
func (p paths) candidacyPrefix(name, sid string, nonce uint64) string {
	return fmt.Sprintf("%s/%s-%016x-", p.lease(name), sid, nonce)
}

// leaseContainer returns the lease name of the path of a lease's
// container.
func (p paths) leaseContainer(path string) (name string, ok bool) {
	name, ok = strings.CutPrefix(path, p.root+leaseDir+"/")
	return name, ok && backend.ValidName(name)
}

// leaseChild splits the path of a candidacy znode into its lease name and
// its own name.
func (p paths) leaseChild(path string) (name, child string, ok bool) {
	rest, ok := strings.CutPrefix(path, p.root+leaseDir+"/")
	if !ok {
		return "", "", false
	}
	name, child, ok = strings.Cut(rest, "/")
	return name, child, ok && backend.ValidName(name) && !strings.Contains(child, "/")
}

// candidacy is the name of a candidacy znode, split: <sid>-<nonce>-<seq>,
// the session ID and the attempt's nonce as 16 hexadecimal digits each, and
// the server's sequence number (10 digits, or a sign and 10 digits once the
// container's counter has wrapped past 2^31).
type candidacy struct {
	name, sid, nonce string
	seq              int64
}

// parseCandidacy splits a candidacy znode's name; false for a name that is
// not one (a znode made by hand).
func parseCandidacy(child string) (candidacy, bool) {
	const hex = 16
	if len(child) < hex+1+hex+1+10 || child[hex] != '-' || child[2*hex+1] != '-' {
		return candidacy{}, false
	}
	seq, err := strconv.ParseInt(child[2*hex+2:], 10, 32)
	if err != nil {
		return candidacy{}, false
	}
	c := candidacy{name: child, sid: child[:hex], nonce: child[hex+1 : 2*hex+1], seq: seq}
	for _, r := range c.sid + c.nonce {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return candidacy{}, false
		}
	}
	return c, true
}

// queue returns the candidacies among children, oldest (lowest sequence
// number) first; names that are not candidacies are left out.
func queue(children []string) []candidacy {
	var q []candidacy
	for _, ch := range children {
		if c, ok := parseCandidacy(ch); ok {
			q = append(q, c)
		}
	}
	slices.SortFunc(q, func(x, y candidacy) int { return cmp.Compare(x.seq, y.seq) })
	return q
}

// group is the container znode of group's members.
func (p paths) group(group string) string { return p.root + groupDir + "/" + group }

// member is the ephemeral znode of one session in group.
func (p paths) member(group, session string) string { return p.group(group) + "/" + session }

// checkRecord is [backend.CheckRecord] with the package prefix.
func checkRecord(key string, value []byte) error {
	if err := backend.CheckRecord(key, value); err != nil {
		return fmt.Errorf("simba/zookeeper: %w", err)
	}
	return nil
}

// checkKey is [backend.CheckKey] with the package prefix.
func checkKey(key string) error {
	if err := backend.CheckKey(key); err != nil {
		return fmt.Errorf("simba/zookeeper: %w", err)
	}
	return nil
}

// validSegment reports whether seg can be a segment of a record key.
func validSegment(seg string) bool {
	if seg == "" {
		return false
	}
	for i := 0; i < len(seg); i++ {
		switch c := seg[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// encodeSegment returns the znode name of a key segment: the segment
// itself, but for "." and "..", which ZooKeeper refuses as names and which
// become "%2E" and "%2E%2E" ('%' is not a key character).
func encodeSegment(seg string) string {
	if seg == "." || seg == ".." {
		return strings.ReplaceAll(seg, ".", "%2E")
	}
	return seg
}

// decodeSegment returns the key segment of a znode name, and false for a
// name that no key segment is encoded to.
func decodeSegment(name string) (string, bool) {
	switch name {
	case "%2E":
		return ".", true
	case "%2E%2E":
		return "..", true
	}
	return name, validSegment(name)
}

// recordDir is the directory znode of the record key (or of the complete
// key segments prefix): <root>/rec/<segment>/.../<segment>.
func (p paths) recordDir(key string) string {
	var b strings.Builder
	b.WriteString(p.root + recordDir)
	for seg := range strings.SplitSeq(key, "/") {
		b.WriteByte('/')
		b.WriteString(encodeSegment(seg))
	}
	return b.String()
}

// record is the znode that holds the record at key.
func (p paths) record(key string) string { return p.recordDir(key) + "/" + recordLeaf }

// recordMark is the name of the marker of the life of a record's
// directory whose czxid is dirCzxid: "=" and the czxid in base 36. No key
// segment is encoded to it ("=" is not a segment's character).
func recordMark(dirCzxid int64) string { return recordLeaf + strconv.FormatInt(dirCzxid, 36) }

// isRecordMark reports whether a child of a record's directory is a
// marker, of this life of the directory or not.
func isRecordMark(name string) bool {
	return len(name) > len(recordLeaf) && strings.HasPrefix(name, recordLeaf)
}

// recordTop is the directory of key's first segment, whose data version
// every write under it increases (see WatchRecords).
func (p paths) recordTop(key string) string {
	first, _, _ := strings.Cut(key, "/")
	return p.root + recordDir + "/" + encodeSegment(first)
}
