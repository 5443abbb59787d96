// Command simba shows what simba's nodes keep in etcd, ZooKeeper,
// PostgreSQL, MySQL (or MariaDB) or Kubernetes — the elections and who
// holds them, the partition groups, the scheduled jobs and their history —
// and performs the cluster-wide operations every node obeys: disable,
// enable, trigger, resign, drain and undrain. (The sixth backend, memory,
// lives inside one process: no command reaches it.) simba run runs a
// command as a fenced leader task. simba dev runs a single-node etcd on
// 127.0.0.1 for trying things out.
//
//	simba dev                                   # in one terminal
//	export SIMBA_ETCD=127.0.0.1:2379            # in the others
//	simba status
//	simba groups billing
//	simba disable report --reason "maintenance"
//
// Run simba help for the commands and flags, and see docs/OPERATING.md for
// a walk-through.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/simba-go/simba/internal/proc"
)

func main() {
	proc.ShimMain() // simba run's shim, when this process is one
	// Whatever logs to slog's default, warnings and errors, in the
	// command's format (logging.go).
	slog.SetDefault(slog.New(newLogHandler(func(line string) { fmt.Fprintln(os.Stderr, line) }, "simba", slog.LevelWarn)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
