// Package stream runs a partition group whose per-partition work is an event
// loop over a source, with the guarantees of Samza's event loop and
// checkpoints that a deposed owner can never move.
//
//	task, err := stream.Start(client.Group("orders", 8), source,
//		func(partition int) stream.Handler { return &orderHandler{partition: partition} },
//		stream.WithMaxConcurrency(4), stream.WithWindow(time.Minute))
//	if err != nil { ... }
//	defer task.Close()
//
// For every partition this client holds (see [simba.Group]), the loop loads
// the partition's checkpoint, gets a [Handler] from the handler function,
// polls the [Source] from the checkpoint, and calls [Handler.Process] for
// every message, until the partition's term ends.
//
// # Offsets and checkpoints
//
// Offsets are ordered int64 positions: within a partition they strictly
// increase, gaps allowed. A partition's checkpoint is an offset with
// every message below it processed: the highest contiguous completed
// offset, plus one. A message counts as processed when its Process call
// returned nil; with several calls in flight, the checkpoint moves past a
// message only once it and every message before it are processed.
//
// The checkpoint is saved through a [CheckpointStore] every
// [WithCommitInterval] (when it moved) and once more at hand-off. The default
// [RecordStore] keeps it as a record of the backend, written through
// [simba.Term.PutRecord]: the backend accepts the write only while the
// writing term holds the partition's lease, and never over a record written
// by a later term. So a deposed owner (paused, partitioned, or just late)
// can never move a partition's checkpoint, and checkpoints never move
// backwards.
//
// Delivery is at least once. A new owner resumes from the last checkpoint,
// so it processes again the messages its predecessor processed after its
// last checkpoint: after a crash, up to one commit interval of them; after
// [Task.Stop], none. When the core ends a term first, the final checkpoint
// is written after the term's revocation, and whether it counts depends on
// how the term ended:
//
//   - The client ended it itself (the partition moved to another member in
//     a rebalance; also a yield, or an operator's disable, drain or
//     resign): the client still holds the lease until the hand-off
//     releases it, at most until the deadline the term had when it ended,
//     and [simba.Term.PutRecord] accepts the term's writes until then,
//     fenced by the backend. The final checkpoint is accepted, and the next
//     owner resumes exactly there: after a rebalance, no message is
//     processed again.
//   - The term was lost (its deadline passed without a confirmed renewal,
//     the session expired or was evicted): PutRecord refuses its writes
//     with an error matching [simba.ErrTermExpired], and the next owner
//     resumes from the last periodic checkpoint.
//
// A client closed before its Task ends every term the first way, but its
// session may end before the loops' final checkpoints are written: close
// the Task first ([Task.Close]).
//
// Process must therefore tolerate seeing a message twice, for example by
// writing with the term's token to a sink that rejects tokens lower than it
// has seen, or by keying its writes on the offset.
//
// # Concurrency, windows and checkpoints
//
// The loop keeps these guarantees, which are Samza's:
//
//   - With [WithMaxConcurrency] 1 (the default), messages are processed in
//     offset order, and every Process call returns before the next one
//     begins.
//   - With n > 1, messages are handed to Process calls in offset order and
//     up to n calls run at once; they may begin and complete out of order;
//     never more than n run.
//   - [Windower.Window] is called every [WithWindow] interval, only when no
//     Process call is pending, and no Process call starts until it returns.
//   - A checkpoint is written only when no Process or Window call is
//     pending, and none starts until it is written.
//
// So Process, Window and the checkpoint never overlap, and each happens
// before the next: a handler's fields need no locks with concurrency 1, and
// with n > 1 only the state shared by Process calls does. The exceptions are
// calls abandoned at the end of a hand-off, below.
//
// # Failures
//
// A Process call that returns an error or panics, or runs longer than
// [WithCallTimeout], fails its partition on this node, and only that
// partition: the loop stops taking messages, waits for the other calls in
// flight, writes the final checkpoint (which stops before the failed
// message), and returns a [*PartitionError], which wraps [simba.ErrYield].
// The partition's lease is given up for one lease term, and the partition's
// next owner (perhaps this node again) retries the message. The node's other
// partitions go on. The same goes for Window, for a failing [Source] or
// Init, and for a checkpoint refused with [ErrFenced].
//
// Use [OnError] to skip or dead-letter a message instead, and [Retry] to try
// again in place.
//
// # Hand-off
//
// When a partition's term ends (the partition moved to another member, the
// client's session was lost, the client closed) or the task stops, the loop
// hands off:
//
//  1. it stops the intake: from the moment the term ends ([simba.Term.Revoked]
//     is closed) or the task stops, no
//     Process or Window call starts, not for the rest of the current batch,
//     nor for the batch fetched ahead, nor, with concurrency 1, after a call
//     that failed because the term ended (every call's start checks it);
//  2. it waits for the calls in flight to return, at most until the term's
//     deadline as it stood when the hand-off began (the last deadline seen
//     while it was valid, if it has ended); calls still running then are
//     abandoned: their ctx is cancelled, the loop goes on without them, and
//     [Task.Close] waits for them;
//  3. it writes the final checkpoint;
//  4. it calls [Closer.Close];
//  5. it returns, and the core releases the partition's lease.
//
// [Task.Stop] hands every partition off this way while its term is still
// valid, and stops the group afterwards.
//
// # Handlers and wrappers
//
// The handler function returns a new [Handler] for every term of every
// partition, so per-partition state lives in the handler. A handler may
// also implement [Initializer] (called before the first message),
// [Windower] and [Closer] (called at hand-off). A [Wrapper] wraps Process
// with shared logic (middleware): [OnError], [Retry] and [Observe] are
// provided; give them with [WithWrappers].
package stream
