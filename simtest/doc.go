// Package simtest tests your own leader tasks under the faults that break
// them, in virtual time, from your _test.go files.
//
// A simulation is a cluster of nodes, each a real [simba.Client] on a shared
// in-memory backend, running your task functions (elections, groups,
// schedules, jobs, stream handlers) inside a [testing/synctest] bubble: a
// minute of faults takes milliseconds, and a seed draws the same schedule
// every time. Your tasks write to fenced in-memory resources the package
// provides, and the package checks, for every seed:
//
//   - I1: no two valid terms of one lease at any instant;
//   - I2: tokens strictly increasing in the order terms begin;
//   - I3: no stale write accepted: a write with a lower token than one the
//     resource has recorded, or without a token where a fence would have
//     refused it;
//   - lost updates: a write over a value written by another term that the
//     writer had not read (the new leader read before the deposed leader's
//     late write landed, then overwrote it);
//   - late operations: a write or claim sent with a term's token more than
//     Config.LateGrace after the term ended (a task that ignores its ctx);
//   - I4: every term ended, on the client's clock, before the backend freed
//     its holding; I5: every lease held again within Config.Recovery of
//     the faults' heal; I6: nothing left (a session, a holder, a term, a
//     client that would not close, an event) once every client closed;
//   - your own invariants, added with [Cluster.Invariant] (after every
//     fault) and [Cluster.Finally] (at the end).
//
// A failure prints the seed, its schedule, every violation, and a timeline
// of the terms, faults and resource operations around the first one:
//
//	simtest: seed 23: 1 violation(s):
//	  lost-update: hits: n3 (token 13) overwrote 478, written by n2-3 (token 10), which it had not read: that update is lost
//	schedule (22 faults):
//	     16.500s  pause n3 for 2.593s
//	     …
//	timeline around the first violation (lines 466–545 of 629):
//	     16.500s  fault  pause n3 for 2.593s
//	     18.705s  n3     revoked   hits, token 4 (renewal deadline passed)
//	     19.005s  n2     elected   hits, token 6
//	     …
//	replay: go test -run '^TestCounter$' -simtest.seeds=1 -simtest.seed=23
//
// # Use
//
//	func TestCounter(t *testing.T) {
//		simtest.Run(t, simtest.Config{}, func(c *simtest.Cluster) {
//			c.Start(func(n *simtest.Node) error {
//				hits := n.Counter("hits")
//				_, err := n.Client().Election("hits").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
//					if err := hits.Claim(ctx, term.Token()); err != nil { // before reading
//						return err
//					}
//					v, err := hits.Get(ctx)
//					…
//					return hits.Set(ctx, term.Token(), v+1)
//				})
//				return err
//			})
//		})
//	}
//
// [Cluster.Start] sets what each node does when its process starts: the
// first nodes, and each that replaces a crashed or restarted one. A
// resource is shared by name among the nodes ([Node.Counter]); the test
// reads it through the cluster's own handle ([Cluster.Counter]), which is
// never paused and takes no time. The resources are a [Register] (a value
// overwritten), a [Counter] (read-modify-write), a [KV] (one fence for all
// keys) and a [Log] (entries and a checkpoint moved in one step, a
// consumer's output). Give each lease its own resource: the tokens of two
// leases (two partitions of a group) are not ordered against each other.
// Work started with a ctx (jobs.Run) takes [Node.Context], which ends when
// the process stops. The package's own tests (usage_test.go) show a
// partitioned job, a stream handler, a checkpointed consumer and declared
// jobs.
//
// # Faults
//
// A random schedule draws a fault about every Config.FaultEvery (default:
// the TTL) over Config.Duration (default: a minute), of the kinds in
// Config.Kinds (default [DefaultKinds]), or Config.Script gives one:
//
//   - [Pause]: the process freezes, as in a long GC pause, a stopped VM or
//     SIGSTOP. Its link to the backend is cut, and each resource operation
//     it sends waits until it resumes, then goes through, as a write
//     already on its way does. The client's own clock runs on: a term
//     whose deadline passed is over when it resumes, and a task that
//     checked Term.Valid before the pause writes after it. Only resource
//     operations are frozen: the task's own code between them is not.
//   - [Partition]: the link to the backend is cut, not the link to the
//     resources: the split brain fencing is for.
//   - [Slow]: backend requests and replies are delayed (slow renewals).
//   - [Expire]: the backend expires the node's sessions.
//   - [Crash]: the process dies without releasing anything; its resource
//     operations fail with [ErrCrashed]; a new process starts in its slot.
//   - [Restart]: a graceful close (the terms hand off), then a new process.
//   - [HandOff]: an operator resigns a lease's term (admin.Resign).
//   - [Custom]: the test's own, such as stopping one of its tasks.
//
// Everything heals at the end of the schedule; the cluster then has
// Config.Recovery to hold every lease again, and every client is closed.
// A client that has not closed 5×TTL after it began has a task that
// ignores its ctx: simtest reports it and kills the process, so that its
// next resource operation fails and it can return. (A function that never
// returns and touches no resource cannot be stopped, as Go cannot end a
// goroutine from outside: the test then runs until go test's -timeout.)
//
// The negative control: Config.Unfenced turns the fences off, and the same
// correct task then loses updates under the same schedules, which shows
// what the token buys.
//
// # Seeds, time and replay
//
// [Run] runs Config.Seeds seeds (default 100) and fails at the first that
// breaks an invariant, printing the line that replays it; -simtest.seeds
// and -simtest.seed override the seeds, and -simtest.logs logs what the
// clients do. A seed of a minute of faults on three nodes takes a few
// milliseconds (the counter task: about 1,000 seeds in 10 to 15 s on 2
// cores, without the race detector; expect several times that with it).
// 100 seeds on every CI run and a soak of 10,000 now and then is a good
// start; a fault that needs a rare interleaving shows in the soak.
//
// A seed fixes the schedule and every random choice (Node.Rand for the
// task's). It does not fix the order in which goroutines made ready at
// one virtual instant run, which the Go scheduler picks: a replay takes the
// same faults at the same times, but may differ in such a race; when a
// failure does not come back, replay it a few times (-count=10).
//
// simtest needs Go's testing/synctest: every goroutine the tasks start must
// be inside the bubble (no real network, no real files that block), and
// the tasks must use the time package's clock.
package simtest
