// Package consumers is the project's own check of what a Go user pays for
// importing simba (issue 38, docs/DEPENDENCIES.md). Its tests build scratch
// consumer modules in temporary directories, each with a main.go importing
// a set of simba's packages and a go.mod whose replace directives (the only
// ones anywhere: the repository's go.mod files have none) put every module
// of the checkout in place of a release, and run go mod tidy, go list -m all
// and go list -deps in them with GOWORK=off, as a user's module would be
// built.
//
//   - TestCoreConsumerBuildList fails when a consumer of the core and the
//     memory backend has a heavy client or server in its build list
//     (client-go, grpc, etcd, pgx, chromedp, SQLite, ZooKeeper, Redis,
//     zap, klog, the Prometheus client), naming each with the chain of
//     requirements that brings it and what go mod why -m says.
//   - TestPinnedVersionsStay fails when that consumer, pinned to an older
//     client-go, grpc or etcd client, is moved off its pin by go mod tidy
//     (minimal version selection).
//   - TestConsumersTable (SIMBA_CONSUMERS_TABLE=1 only) prints the markdown
//     tables of docs/DEPENDENCIES.md: per set of packages, the requirements,
//     go.sum lines, build list, packages compiled and what a fresh go mod
//     tidy downloads into an empty module cache; the pinned versions after
//     tidy; and the size of the root module's zip.
//
// They need the Go module proxy (GOPROXY) and skip unless SIMBA_CONSUMERS=1
// or SIMBA_REQUIRE_SERVERS=1 (which CI sets). They use the machine's module
// cache; on a warm cache the checks take well under a minute. By default
// they check the checkout they are in; SIMBA_CONSUMERS_ROOT names another
// (an older commit's worktree, say). From the tests directory:
//
//	SIMBA_CONSUMERS=1 go test -count=1 -v ./consumers
//	SIMBA_CONSUMERS_TABLE=1 go test -count=1 -v -timeout=60m -run TestConsumersTable ./consumers
//	SIMBA_CONSUMERS=1 SIMBA_CONSUMERS_ROOT=/tmp/before go test -count=1 -v ./consumers
package consumers
