// Package option applies a backend's options, in the one shape every
// simba backend gives them:
//
//	type Option func(*config) error
//
// An option refuses a bad value with an error prefixed like its package
// ("simba/etcd: max requests must be positive, got 0") instead of
// correcting it, and the backend's constructor returns the first such
// error: [Apply] is that loop, with the error for a nil option.
//
// It is part of simba's kit for backend authors (backend/kit/...): code the
// backends share, importable by a backend of another module or of another
// repository. It follows the module's compatibility promise like the rest
// of its API.
package option
