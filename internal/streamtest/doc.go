// Package streamtest holds what the tests of package stream share, whatever
// the backend: a [Recorder] of every call of the loops (Process, Window,
// Init, Close, and the checkpoint store's Load and Save) as [Event]s, the
// recording [Handler] and [Store], a [Numbered] source, and the checkers
// that run over a recorded history ([CheckCalls], [CheckCheckpoints],
// [CheckAtLeastOnce], [CheckResume]). It imports no backend: stream's own
// tests run on the memory backend, the tests module's (tests/stream) on
// etcd. Only tests import this package.
package streamtest
