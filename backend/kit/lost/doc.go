// Package lost is the Lost signal of a holding, as every backend keeps it
// (etcd, ZooKeeper and memory directly; PostgreSQL and Kubernetes through
// backend/kit/candidacy): a channel closed once when the holding is
// lost, functions run then (backend.LostNotifier's OnLost), nothing once
// its owner released it, and a loss seen while the owner's release is in
// flight held back until the release's outcome is known (the release's
// own write, seen by the backend's watch or monitor before the release
// returns, is no loss).
//
// It is part of simba's kit for backend authors (backend/kit/...): code the
// backends share, importable by a backend of another module or of another
// repository. It follows the module's compatibility promise like the rest
// of its API.
package lost
