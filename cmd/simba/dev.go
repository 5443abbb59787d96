package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// devStartTimeout bounds the wait for the embedded etcd to be ready.
const devStartTimeout = 30 * time.Second

var devCommand = &command{
	name: "dev", maxArgs: 0, serves: true,
	summary: "run a local single-node etcd for trying things out",
	doc: `A single-member etcd embedded in the command, serving on 127.0.0.1, with
its data in --data or in a temporary directory removed on exit. It prints
the endpoint to export as SIMBA_ETCD. Ctrl-C stops it cleanly. For
development only: it does not fsync.`,
	setup: func(fs *flag.FlagSet) action {
		port := fs.Int("port", 2379, "client `port` on 127.0.0.1 (0: any free port)")
		data := fs.String("data", "", "data `directory`, kept on exit (default: a temporary directory, removed on exit)")
		return func(ctx context.Context, inv *invocation, _ []string) error {
			if *port < 0 || *port > 65535 {
				return usagef(nil, "--port must be 0–65535, got %d", *port)
			}
			return runDev(ctx, inv, *port, *data)
		}
	},
}

// devInfo is what simba dev prints with --json once etcd is ready.
type devInfo struct {
	Endpoint string `json:"endpoint"`
	Data     string `json:"data"`
	// Temporary reports a data directory removed on exit.
	Temporary bool   `json:"temporary"`
	Version   string `json:"version"`
}

func runDev(ctx context.Context, inv *invocation, port int, data string) error {
	info := devInfo{Data: data, Version: version.Version}
	if data == "" {
		dir, err := os.MkdirTemp("", "simba-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		info.Data, info.Temporary = dir, true
	} else if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	port, err := freePort(port)
	if err != nil {
		return err
	}
	info.Endpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	e, err := startDevEtcd(ctx, info.Data, info.Endpoint)
	if err != nil {
		return err
	}
	if inv.g.json {
		if err := writeJSON(inv.stdout, info); err != nil {
			e.Close()
			return err
		}
	} else {
		kept := "kept on exit"
		if info.Temporary {
			kept = "removed on exit"
		}
		fmt.Fprintf(inv.stdout, "simba dev: etcd %s serving on %s, data in %s (%s)\n\n", info.Version, info.Endpoint, info.Data, kept)
		fmt.Fprintf(inv.stdout, "  export %s=%s\n\n", envEtcd, info.Endpoint)
		fmt.Fprintf(inv.stdout, "then run nodes against it, and simba status, simba groups, … Ctrl-C stops it.\n")
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-e.Err():
	}
	fmt.Fprintln(inv.stderr, "simba dev: stopping etcd")
	e.Close()
	if serveErr != nil {
		return fmt.Errorf("etcd failed: %w", serveErr)
	}
	fmt.Fprintln(inv.stderr, "simba dev: stopped")
	return nil
}

// freePort checks that port is free on 127.0.0.1, or picks a free one for
// port 0.
func freePort(port int) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, failf("cannot listen on 127.0.0.1:%d (%v): is another etcd running? pass --port", port, err)
	}
	port = l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// startDevEtcd starts a single-member etcd with its data in dir, serving
// clients on endpoint, and waits until it is ready. Its peer port is any
// free one: a single member never dials it.
func startDevEtcd(ctx context.Context, dir, endpoint string) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "simba-dev"
	cfg.Dir = dir
	// Short ticks: etcd's least lease TTL is 1.5 election timeouts rounded
	// up to a second, so nodes may use a TTL of one second.
	cfg.TickMs = 50
	cfg.ElectionMs = 500
	client := url.URL{Scheme: "http", Host: endpoint}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	// The advertised peer URL is recorded in the data directory: keep it
	// the same across runs on the same --data.
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:2380"}}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "simba-dev"
	// Only etcd's errors, on stderr: it ends the process on a fatal one,
	// which must not go unexplained.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(
		zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.Lock(os.Stderr), zapcore.ErrorLevel),
		zap.AddStacktrace(zapcore.DPanicLevel)).Named("etcd"))
	cfg.LogLevel = "error"
	// A development server: no fsync, so that a busy laptop disk does not
	// stall lease renewals. Data survive a clean stop, not an OS crash.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting etcd in %s: %w", dir, err)
	}
	t := time.NewTimer(devStartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd in %s failed to start: %w", dir, err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	case <-t.C:
		e.Close()
		return nil, errors.New("etcd not ready after " + devStartTimeout.String())
	}
}
