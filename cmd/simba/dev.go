package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/certs"
)

// devStartTimeout bounds the wait for the embedded etcd to be ready.
const devStartTimeout = 30 * time.Second

var devCommand = &command{
	name: "dev", maxArgs: 0, serves: true,
	summary: "run a local single-node etcd for trying things out",
	doc: `A single-member etcd embedded in the command, serving on 127.0.0.1, with
its data in --data or in a temporary directory removed on exit. It prints
the endpoint to export as SIMBA_ETCD. Ctrl-C stops it cleanly. For
development only: it does not fsync.

With --tls it serves TLS only, with a CA and a server certificate for
127.0.0.1 and localhost that it generates into tls/ in the data
directory; it asks clients for no certificate. With the global --user
NAME:PASSWORD it enables etcd's authentication: a root user, whose
generated password it writes to root-password in the data directory (mode
0600), and the user given, with a role that may read and write the keys
under --prefix (default /simba/). It prints the settings to export.`,
	setup: func(fs *flag.FlagSet) action {
		port := fs.Int("port", 2379, "client `port` on 127.0.0.1 (0: any free port)")
		data := fs.String("data", "", "data `directory`, kept on exit (default: a temporary directory, removed on exit)")
		useTLS := fs.Bool("tls", false, "serve TLS with certificates generated into the data directory")
		return func(ctx context.Context, inv *invocation, _ []string) error {
			if *port < 0 || *port > 65535 {
				return usagef(nil, "--port must be 0–65535, got %d", *port)
			}
			o := devOptions{port: *port, data: *data, tls: *useTLS}
			if inv.explicit["user"] {
				user, password, ok := strings.Cut(inv.g.conn.user, ":")
				if inv.explicit["password"] {
					password, ok = inv.g.conn.password, true
				}
				if user == "" || !ok || password == "" {
					return usagef(nil, "simba dev takes --user NAME:PASSWORD (or --user NAME --password PASSWORD): the user to create")
				}
				o.user, o.password = user, password
			}
			return runDev(ctx, inv, o)
		}
	},
}

// devOptions are the flags of simba dev.
type devOptions struct {
	port           int
	data           string
	tls            bool
	user, password string // enable authentication with this user
}

// devInfo is what simba dev prints with --json once etcd is ready.
type devInfo struct {
	Endpoint string `json:"endpoint"`
	Data     string `json:"data"`
	// Temporary reports a data directory removed on exit.
	Temporary bool   `json:"temporary"`
	Version   string `json:"version"`
	// With --tls: the CA certificate to verify the server with.
	CACert string `json:"cacert,omitempty"`
	// With --user: the user created, and the file holding root's password.
	User             string `json:"user,omitempty"`
	RootPasswordFile string `json:"root_password_file,omitempty"`
}

func runDev(ctx context.Context, inv *invocation, o devOptions) error {
	port, data := o.port, o.data
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
	hostPort := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	info.Endpoint = hostPort
	var files *certs.Files
	if o.tls {
		f, err := certs.Generate(filepath.Join(info.Data, "tls"), "simba")
		if err != nil {
			return fmt.Errorf("generating certificates: %w", err)
		}
		files = &f
		info.Endpoint = "https://" + hostPort
		info.CACert = f.CA
	}
	e, err := startDevEtcd(ctx, info.Data, hostPort, files, inv.stderr)
	if err != nil {
		return err
	}
	if o.user != "" {
		prefix := inv.g.prefix
		if prefix == "" {
			prefix = etcd.DefaultPrefix
		}
		rootFile, err := enableDevAuth(ctx, info.Endpoint, files, info.Data, o.user, o.password, prefix)
		if err != nil {
			e.Close()
			return err
		}
		info.User, info.RootPasswordFile = o.user, rootFile
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
		fmt.Fprintf(inv.stdout, "  export %s=%s\n", envEtcd, info.Endpoint)
		if info.CACert != "" {
			fmt.Fprintf(inv.stdout, "  export %s=%s\n", envCACert, info.CACert)
		}
		if info.User != "" {
			fmt.Fprintf(inv.stdout, "  export %s=%s   # and %s, or be asked for the password\n", envUser, info.User, envPassword)
		}
		fmt.Fprintln(inv.stdout)
		if info.RootPasswordFile != "" {
			fmt.Fprintf(inv.stdout, "etcd's root user's password is in %s\n", info.RootPasswordFile)
		}
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

// enableDevAuth creates etcd's root user, with a generated password
// written to dir/root-password, and user with a role that may read and
// write the keys under prefix, then enables authentication; if it is
// enabled already (a kept data directory), it does nothing. It returns the
// root password's file.
func enableDevAuth(ctx context.Context, endpoint string, files *certs.Files, dir, user, password, prefix string) (string, error) {
	rootFile := filepath.Join(dir, "root-password")
	cfg := clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop(), DialTimeout: devStartTimeout}
	if files != nil {
		cfg.TLS = &tls.Config{RootCAs: files.Authority.Pool(), MinVersion: tls.VersionTLS12}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return "", fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, devStartTimeout)
	defer cancel()
	switch st, err := cli.AuthStatus(ctx); {
	case errors.Is(err, rpctypes.ErrUserEmpty), err == nil && st.Enabled:
		return rootFile, nil // enabled by an earlier run on this data directory
	case err != nil:
		return "", fmt.Errorf("reading etcd's authentication status: %w", err)
	}
	secret := make([]byte, 18)
	if _, err := rand.Read(secret); err != nil {
		return "", err
	}
	rootPassword := base64.RawURLEncoding.EncodeToString(secret)
	if err := os.WriteFile(rootFile, []byte(rootPassword+"\n"), 0o600); err != nil {
		return "", err
	}
	role := user + "-role"
	steps := []struct {
		what string
		do   func() error
	}{
		{"adding root", func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err }},
		{"granting root the root role", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"adding " + user, func() error { _, err := cli.UserAdd(ctx, user, password); return err }},
		{"adding " + role, func() error { _, err := cli.RoleAdd(ctx, role); return err }},
		{"granting " + role + " read and write under " + prefix, func() error {
			_, err := cli.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"granting " + user + " " + role, func() error { _, err := cli.UserGrantRole(ctx, user, role); return err }},
		{"enabling authentication", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return "", fmt.Errorf("etcd authentication: %s: %w", s.what, err)
		}
	}
	return rootFile, nil
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

// devEtcd is simba dev's etcd.
type devEtcd struct {
	*embed.Etcd
	stopping *atomic.Bool // shared with its log (etcdLog)
}

// Close stops etcd, without the errors of its listeners' closing: they
// are how it stops, not failures.
func (e devEtcd) Close() {
	e.stopping.Store(true)
	e.Etcd.Close()
}

// startDevEtcd starts a single-member etcd with its data in dir, serving
// clients on endpoint, and waits until it is ready. Its peer port is any
// free one: a single member never dials it. It logs its errors to stderr.
func startDevEtcd(ctx context.Context, dir, endpoint string, files *certs.Files, stderr io.Writer) (devEtcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "simba-dev"
	cfg.Dir = dir
	// Short ticks: etcd's least lease TTL is 1.5 election timeouts rounded
	// up to a second, so nodes may use a TTL of one second.
	cfg.TickMs = 50
	cfg.ElectionMs = 500
	client := url.URL{Scheme: "http", Host: endpoint}
	if files != nil {
		client.Scheme = "https"
		// No TrustedCAFile: given one, etcd requires client certificates.
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: files.ServerCert, KeyFile: files.ServerKey}
	}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	// The advertised peer URL is recorded in the data directory: keep it
	// the same across runs on the same --data.
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:2380"}}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "simba-dev"
	// Only etcd's errors, on stderr, in the command's format: it ends the
	// process on a fatal one, which must not go unexplained.
	stopping := new(atomic.Bool)
	var mu sync.Mutex
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(&etcdLog{
		h: newLogHandler(func(line string) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintln(stderr, line)
		}, "simba dev: etcd", slog.LevelError),
		stopping: stopping,
	}))
	cfg.LogLevel = "error"
	// A development server: no fsync, so that a busy laptop disk does not
	// stall lease renewals. Data survive a clean stop, not an OS crash.
	cfg.UnsafeNoFsync = true

	emb, err := embed.StartEtcd(cfg)
	if err != nil {
		return devEtcd{}, fmt.Errorf("starting etcd in %s: %w", dir, err)
	}
	e := devEtcd{Etcd: emb, stopping: stopping}
	t := time.NewTimer(devStartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return devEtcd{}, fmt.Errorf("etcd in %s failed to start: %w", dir, err)
	case <-ctx.Done():
		e.Close()
		return devEtcd{}, ctx.Err()
	case <-t.C:
		e.Close()
		return devEtcd{}, errors.New("etcd not ready after " + devStartTimeout.String())
	}
}

// servingFailed is the error etcd logs when one of its listeners stops
// serving: each of them does when it is closed, on every stop.
const servingFailed = "setting up serving from embedded etcd failed."

// etcdLog is a zap core that hands etcd's records to the command's log
// handler (logging.go), and drops the servingFailed records of a stop.
type etcdLog struct {
	h        *logHandler
	fields   []zapcore.Field
	stopping *atomic.Bool
}

func (l *etcdLog) Enabled(lvl zapcore.Level) bool {
	return l.h.Enabled(context.Background(), zapToSlog(lvl))
}

func (l *etcdLog) With(fields []zapcore.Field) zapcore.Core {
	c := *l
	c.fields = append(slices.Clone(l.fields), fields...)
	return &c
}

func (l *etcdLog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !l.Enabled(e.Level) || e.Message == servingFailed && l.stopping.Load() {
		return ce
	}
	return ce.AddCore(e, l)
}

func (l *etcdLog) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(slices.Clone(l.fields), fields...) {
		f.AddTo(enc)
	}
	r := slog.NewRecord(e.Time, zapToSlog(e.Level), strings.TrimSuffix(e.Message, "."), 0)
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		r.AddAttrs(slog.Any(k, enc.Fields[k]))
	}
	return l.h.Handle(context.Background(), r)
}

func (l *etcdLog) Sync() error { return nil }

// zapToSlog is the slog level of a zap level.
func zapToSlog(lvl zapcore.Level) slog.Level {
	switch {
	case lvl >= zapcore.ErrorLevel:
		return slog.LevelError
	case lvl >= zapcore.WarnLevel:
		return slog.LevelWarn
	case lvl >= zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
