// Package kubepeers holds the Kubernetes leader elector that the
// benchmarks of backend/kubernetes (bench_test.go) compare simba with:
// client-go's tools/leaderelection with a resourcelock.LeaseLock, written
// the way controller authors use it (LeaseDuration, RenewDeadline and
// RetryPeriod, ReleaseOnCancel, the work running in OnStartedLeading until
// its ctx ends). Only tests import it, and nothing here is a
// recommendation.
//
// An [Elector] contends for one Lease object: every RetryPeriod (jittered
// by client-go, up to 2.2 times it) a candidate reads the Lease and takes
// it once the holder's record has stayed unchanged for LeaseDuration on
// the candidate's own clock (or at once when the holder released it); the
// leader updates it every RetryPeriod and stops leading when no update
// succeeded for RenewDeadline. With ReleaseOnCancel, the end of Run's ctx
// makes the leader clear the holder in the Lease, so that a candidate
// takes it at its next try.
//
// Each spell of leadership is reported as a [Leadership]: when
// OnStartedLeading ran, and when its ctx ended (where a controller written
// by the book stops its work; client-go ends it when its Run returns, so
// with ReleaseOnCancel only after the release's attempt). It has no
// token: what a deposed leader does after a new one started is not fenced.
package kubepeers
