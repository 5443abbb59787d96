package etcdtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
