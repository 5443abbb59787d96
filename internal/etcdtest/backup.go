package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// errRunning is the error of a copy of the data of a running server.
var errRunning = errors.New("etcdtest: the server is running: stop it before copying its data")

// Backup copies the data directory of the stopped server to dst, which
// must not exist: a backup taken while nothing writes, as an operator's
// snapshot is.
func (s *Server) Backup(dst string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errRunning
	}
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(s.dir, dataName))); err != nil {
		return fmt.Errorf("etcdtest: backup to %s: %w", dst, err)
	}
	return nil
}

// RestoreBackup replaces the data directory of the stopped server with a
// copy of src, a directory written by [Server.Backup]: a restore without
// etcdutl's --bump-revision, so that, once restarted with
// [Server.Restart], the server is the same cluster (the same cluster and
// member IDs) at the backup's revision, below the revisions it reached
// since.
func (s *Server) RestoreBackup(src string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errRunning
	}
	data := filepath.Join(s.dir, dataName)
	if err := os.RemoveAll(data); err != nil {
		return fmt.Errorf("etcdtest: restore from %s: %w", src, err)
	}
	if err := os.CopyFS(data, os.DirFS(src)); err != nil {
		return fmt.Errorf("etcdtest: restore from %s: %w", src, err)
	}
	// etcd wants its data directory private, as it made it.
	if err := os.Chmod(data, 0o700); err != nil {
		return fmt.Errorf("etcdtest: restore from %s: %w", src, err)
	}
	return nil
}

// restoreTimeout bounds etcdutl's restore.
const restoreTimeout = 2 * time.Minute

// RestoreSnapshot replaces the data directory of the stopped server with
// a restore of src, a directory written by [Server.Backup], the way an
// operator restores etcd from a snapshot: etcdutl snapshot restore, with
// --bump-revision bump --mark-compacted when bump is positive (as etcd's
// documentation asks, so that revisions never go back), and the
// server's own name, peer URL and cluster token. Once restarted with
// [Server.Restart], the server serves the backup's keys.
func (s *Server) RestoreSnapshot(src string, bump int64) error {
	util, err := utilBinary()
	if err != nil {
		return fmt.Errorf("etcdtest: restore from %s: %w", src, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errRunning
	}
	data := filepath.Join(s.dir, dataName)
	restored := data + ".restore"
	os.RemoveAll(restored)
	args := []string{"snapshot", "restore", filepath.Join(src, "member", "snap", "db"),
		// A db file copied from a data directory has no snapshot's hash.
		"--skip-hash-check",
		"--data-dir", restored,
		"--name", memberName,
		"--initial-cluster", memberName + "=http://127.0.0.1:2380",
		"--initial-cluster-token", "simba-test",
		"--initial-advertise-peer-urls", "http://127.0.0.1:2380",
	}
	if bump > 0 {
		args = append(args, "--bump-revision", strconv.FormatInt(bump, 10), "--mark-compacted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, util, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("etcdtest: etcdutl %s: %v:\n%s", strings.Join(args, " "), err, tail(out, 20))
	}
	if err := os.RemoveAll(data); err != nil {
		return fmt.Errorf("etcdtest: restore from %s: %w", src, err)
	}
	if err := os.Rename(restored, data); err != nil {
		return fmt.Errorf("etcdtest: restore from %s: %w", src, err)
	}
	return nil
}
