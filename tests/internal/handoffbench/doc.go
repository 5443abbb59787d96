// Package handoffbench is the measuring kit of the side-by-side hand-off
// benchmarks of the backends (tests/bench/...): only tests import it.
//
// It has these parts, one of each:
//
//   - [Run] plays hand-off rounds of several [Side]s in one run, the sides
//     taking turns round by round at each settle time (the pause between
//     the waiter starting to wait and the hand-off), so that the server's
//     warming up and the machine's load weigh on each side alike; its
//     [Results] print the quantiles, the ratio of simba's side to the best
//     peer, and the breakdown of simba's hand-offs as Markdown tables.
//   - [Wrap] is a backend.Backend that times its sessions' Acquire and
//     Release calls in a [Probe], forwarding every optional capability the
//     core looks for by type assertion, so that the core takes the same
//     paths as on the bare backend. [SimbaSide] uses it, with an
//     independent watcher of the benchmark's (a [Notice]) to split
//     simba's hand-off into its parts ([Parts]).
//   - [Overlap] counts, over blackhole rounds, those in which the old
//     holder still believed it led after the new one started, and keeps
//     the fail-over times (cut → new leader) of the same rounds.
//   - [Cost] is what each round cost the benchmark's process (CPU time,
//     allocations, context switches, read and write system calls), which
//     [Run] records round by round and the report gives per side: the
//     client-side work of a hand-off, simba's against the peers'.
//   - [Busy] starts the busy loops $SIMBA_BENCH_BUSY asks for, so that
//     every benchmark can also be run on a loaded machine, and
//     [LoadAverage] reports the load.
//   - [Quantile], [Summary] and [Ms] format durations.
package handoffbench
