package stream

import (
	"errors"
	"fmt"

	"github.com/simba-go/simba"
)

// Sentinel errors. They may be wrapped; test them with [errors.Is].
var (
	// ErrFenced reports a checkpoint write refused because the term that
	// made it no longer holds the partition: a newer owner may have moved
	// the checkpoint on, and a deposed one must never move it. A
	// [CheckpointStore] returns an error matching it from Save.
	ErrFenced = errors.New("simba/stream: checkpoint refused: the term no longer holds the partition")

	// ErrTimeout reports a Process or Window call that ran longer than
	// [WithCallTimeout] allows. It fails only its partition.
	ErrTimeout = errors.New("simba/stream: call timed out")

	// ErrOffsetOrder reports a batch from a [Source] that breaks the offset
	// contract: offsets below the one asked for, or not strictly
	// increasing.
	ErrOffsetOrder = errors.New("simba/stream: source broke the offset order")
)

// PartitionError is what a partition's run returns when the partition fails
// on this node: a Process or Window call failed, panicked or timed out, the
// source failed, Init failed, or a checkpoint was refused. It wraps
// [simba.ErrYield], so the partition's lease is given up and the partition is
// taken over (after one lease term, perhaps by this node again) from its last
// checkpoint; the other partitions of the node go on.
type PartitionError struct {
	// Partition is the partition that failed.
	Partition int
	// Token is the fencing token of the term the partition failed in.
	Token uint64
	// Op is what failed: "process", "window", "poll", "init", "load" or
	// "checkpoint".
	Op string
	// Offset is the offset of the message whose Process call failed, or -1.
	Offset int64
	// Err is the underlying error: the handler's or the source's error, a
	// *[simba.PanicError], or one matching [ErrTimeout], [ErrOffsetOrder] or
	// [ErrFenced].
	Err error
}

// Error describes the failure.
func (e *PartitionError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("simba/stream: partition %d (token %d): %s at offset %d: %v", e.Partition, e.Token, e.Op, e.Offset, e.Err)
	}
	return fmt.Sprintf("simba/stream: partition %d (token %d): %s: %v", e.Partition, e.Token, e.Op, e.Err)
}

// Failed returns true: a partition failure yields the partition's lease,
// and the run is published as [simba.WorkCompleted] with result
// [simba.ResultFailed] (not [simba.ResultSucceeded], as a plain yield is), logged at
// Warn, counted in the metrics with simba.result "failed", and recorded as
// a failed run in the status records that `simba status` and the console
// show.
func (e *PartitionError) Failed() bool { return true }

// Unwrap returns [simba.ErrYield] and Err.
func (e *PartitionError) Unwrap() []error { return []error{simba.ErrYield, e.Err} }
