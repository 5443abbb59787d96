// Package frame is the stored form of a record for a backend that keeps a
// record as one opaque value (an etcd key's value, a ZooKeeper znode's
// data): the token of the write that stored it, 8 bytes big-endian (0 for
// an unfenced write), followed by the record's value.
//
// Big-endian makes the byte order of stored values follow the order of
// their tokens: a store that compares values byte by byte (etcd's
// transactions) can compare a record's token with a fence (see [Encode]).
// A stored value shorter than the token was not written by a backend (an
// operator's put, say): [Decode] reports it as a *backend.MalformedError,
// quoting its start with [Quote], which also serves a backend's other
// malformed entries (members).
//
// The etcd and ZooKeeper backends store their records in this form; it
// never changes, as records outlive the versions of simba that wrote them.
//
// It is part of simba's kit for backend authors (backend/kit/...): code the
// backends share, importable by a backend of another module or of another
// repository. It follows the module's compatibility promise like the rest
// of its API.
package frame
