package etcdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Perm is what a [User]'s role may do with the keys under its prefix.
type Perm int

// The permissions of etcd's roles (its authpb.Permission types).
const (
	// Read allows reading the keys (ranges and watches).
	Read Perm = iota + 1
	// Write allows writing them (puts and deletes).
	Write
	// ReadWrite allows both.
	ReadWrite
)

// String returns the name etcd gives the permission: READ, WRITE or
// READWRITE.
func (p Perm) String() string {
	switch p {
	case Read:
		return "READ"
	case Write:
		return "WRITE"
	case ReadWrite:
		return "READWRITE"
	}
	return fmt.Sprintf("Perm(%d)", int(p))
}

// User is a user that [Server.EnableAuth] creates, with a role of its own
// (named after it, "-role" appended) granted Perm on the keys under
// Prefix.
type User struct {
	Name, Password string
	Prefix         string // no permission at all when empty
	Perm           Perm   // required when Prefix is set
}

// EnableAuth creates the root user (password rootPassword, granted the
// root role) and the users given, with their roles, and turns on
// authentication, through etcd's JSON gateway. From then on [Server.Root]
// returns the root user and its password. It stops the test on failure,
// saying which step failed and etcd's reply.
func (s *Server) EnableAuth(tb testing.TB, rootPassword string, users ...User) {
	tb.Helper()
	if rootPassword == "" {
		tb.Fatal("etcdtest: EnableAuth: empty root password")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	step := func(what, path string, req any) {
		tb.Helper()
		if err := s.gateway(ctx, path, req); err != nil {
			tb.Fatalf("etcdtest: EnableAuth: %s: %v", what, err)
		}
	}
	step("adding root", "/v3/auth/user/add", map[string]string{"name": "root", "password": rootPassword})
	step("granting root the root role", "/v3/auth/user/grant", map[string]string{"user": "root", "role": "root"})
	for _, u := range users {
		role := u.Name + "-role"
		step("adding "+u.Name, "/v3/auth/user/add", map[string]string{"name": u.Name, "password": u.Password})
		step("adding "+role, "/v3/auth/role/add", map[string]string{"name": role})
		if u.Prefix != "" {
			if u.Perm < Read || u.Perm > ReadWrite {
				tb.Fatalf("etcdtest: EnableAuth: user %s: %v is no permission (Read, Write or ReadWrite)", u.Name, u.Perm)
			}
			step("granting "+role+" "+u.Perm.String()+" on "+u.Prefix, "/v3/auth/role/grant", map[string]any{
				"name": role,
				"perm": map[string]any{
					"permType":  u.Perm.String(),
					"key":       []byte(u.Prefix), // base64, as JSON has []byte
					"range_end": []byte(prefixEnd(u.Prefix)),
				},
			})
		}
		step("granting "+u.Name+" "+role, "/v3/auth/user/grant", map[string]string{"user": u.Name, "role": role})
	}
	step("enabling authentication", "/v3/auth/enable", map[string]string{})
	s.mu.Lock()
	s.root = rootPassword
	s.mu.Unlock()
}

// Root returns the root user and its password once [Server.EnableAuth]
// has run, and two empty strings before.
func (s *Server) Root() (user, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root == "" {
		return "", ""
	}
	return "root", s.root
}

// prefixEnd returns the end of the range of the keys that start with
// prefix, as etcd's clientv3.GetPrefixRangeEnd: the prefix with its last
// byte below 0xff incremented and what follows dropped, or "\x00" (every
// key from the prefix on) when there is none.
func prefixEnd(prefix string) string {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return string(end[:i+1])
		}
	}
	return "\x00"
}

// gateway posts req as JSON to path on etcd's JSON gateway, through the
// proxy, and checks that etcd accepted it: a 200 reply holding a JSON
// object. Otherwise the error holds the status and etcd's reply.
func (s *Server) gateway(ctx context.Context, path string, req any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.scheme()+"://"+s.Endpoints()[0]+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := s.httpClient(10 * time.Second).Do(hreq)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("POST %s: reading the reply: %w", path, err)
	}
	var obj map[string]json.RawMessage
	if resp.StatusCode != http.StatusOK || json.Unmarshal(reply, &obj) != nil {
		return fmt.Errorf("POST %s %s: %s: %s", path, body, resp.Status, strings.TrimSpace(string(reply)))
	}
	if _, ok := obj["header"]; !ok {
		return fmt.Errorf("POST %s %s: a reply without a header: %s", path, body, strings.TrimSpace(string(reply)))
	}
	return nil
}
