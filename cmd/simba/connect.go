package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/zookeeper"
)

// closeGrace is the least time given to closing the admin's session when
// the command has used up its --timeout: past it the session is abandoned
// and expires on the server by itself.
const closeGrace = 300 * time.Millisecond

// target is the backend the global flags name.
type target struct {
	kind     string // "etcd", "zookeeper", "postgres", "mysql" or "kubernetes"
	addrs    []string
	dsn      string      // PostgreSQL's or MySQL's DSN, as given (it may hold a password)
	noListen bool        // PostgreSQL: never LISTEN (--postgres-no-listen)
	kube     *kubeTarget // Kubernetes' configuration and namespace
	prefix   string      // "" for the backend's default; PostgreSQL's schema, MySQL's table prefix
	sec      *security   // TLS and credentials; never nil
	// log is the backend's logger (logging.go): simba run's; nil for the
	// commands that show and operate, which report what the backend
	// skips themselves (problems.go).
	log *slog.Logger
}

// logger is the backend's logger: t.log, else one that discards.
func (t target) logger() *slog.Logger {
	if t.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return t.log
}

func (t target) String() string {
	if t.kind == "kubernetes" && t.kube != nil {
		return t.kube.String()
	}
	if t.kind == "postgres" {
		s := "postgres at " + describeDSN(t.dsn)
		if t.prefix != "" {
			s += " (schema " + schemaOf(t.prefix) + ")"
		}
		return s
	}
	if t.kind == "mysql" {
		s := "mysql at " + describeMySQLDSN(t.dsn)
		if t.prefix != "" {
			s += " (tables " + tablePrefixOf(t.prefix) + "*)"
		}
		return s
	}
	s := t.kind + " at " + strings.Join(t.addrs, ",")
	if t.prefix != "" {
		s += " (prefix " + t.prefix + ")"
	}
	return s
}

// backendFlags are the flags that each name a backend, in the order
// messages list them, with their environment variables and kinds.
var backendFlags = []struct{ flag, env, kind string }{
	{"etcd", envEtcd, "etcd"},
	{"zk", envZK, "zookeeper"},
	{"postgres", envPostgres, "postgres"},
	{"mysql", envMySQL, "mysql"},
	{"kubernetes", envKubernetes, "kubernetes"},
}

// target picks the backend from the flags, which the environment
// defaults: a flag given on the command line wins over the environment.
// --etcd, --zk, --postgres, --mysql and --kubernetes exclude each other; any of
// --kubeconfig, --context and --namespace counts as --kubernetes.
func (g globals) target(explicit map[string]bool) (target, error) {
	vals := map[string]string{"etcd": g.etcd, "zk": g.zk, "postgres": strings.TrimSpace(g.postgres), "mysql": strings.TrimSpace(g.mysql)}
	kube := kubeExplicit(explicit)
	set := func(flag string) bool {
		switch flag {
		case "postgres", "mysql":
			return vals[flag] != ""
		case "kubernetes":
			return g.kube.on || kube != "" && kube != "kubernetes"
		}
		return len(splitList(vals[flag])) > 0
	}
	var given, fromEnv []string
	for _, b := range backendFlags {
		switch {
		case !set(b.flag):
		case b.flag == "kubernetes" && kube != "":
			given = append(given, kube)
		case explicit[b.flag]:
			given = append(given, b.flag)
		default:
			fromEnv = append(fromEnv, b.flag)
		}
	}
	var chosen string
	switch {
	case len(given) > 1:
		return target{}, usagef(nil, "%s both given: name one backend", joinFlags(given, "--", " and "))
	case len(given) == 1:
		chosen = given[0]
	case len(fromEnv) > 1:
		var envs []string
		for _, b := range backendFlags {
			if slices.Contains(fromEnv, b.flag) {
				envs = append(envs, b.env)
			}
		}
		return target{}, usagef(nil, "both %s are set: pass %s to choose", joinFlags(envs, "$", " and "), joinFlags(fromEnv, "--", " or "))
	case len(fromEnv) == 1:
		chosen = fromEnv[0]
	}
	sec := g.conn.sec
	if sec == nil {
		sec = &security{}
	}
	switch chosen {
	case "etcd":
		return target{kind: "etcd", addrs: splitList(g.etcd), prefix: g.prefix, sec: sec}, nil
	case "zk":
		return target{kind: "zookeeper", addrs: splitList(g.zk), prefix: g.prefix, sec: sec}, nil
	case "postgres":
		return target{kind: "postgres", dsn: vals["postgres"], noListen: g.pgNoListen, prefix: g.prefix, sec: sec}, nil
	case "mysql":
		return target{kind: "mysql", dsn: vals["mysql"], prefix: g.prefix, sec: sec}, nil
	case "kubernetes", "kubeconfig", "context", "namespace", "n":
		kt := g.conn.kube
		if kt == nil {
			var err error
			if kt, err = g.kube.resolve(explicit); err != nil {
				return target{}, err
			}
		}
		return target{kind: "kubernetes", kube: kt, prefix: g.prefix, sec: kt.sec}, nil
	}
	return target{}, usagef(nil, "no backend: pass --etcd ENDPOINTS, --zk SERVERS, --postgres DSN, --mysql DSN or --kubernetes, set $%s, $%s, $%s, $%s or $%s=true, or name one in a config file (--config) ('simba dev' runs a local etcd)", envEtcd, envZK, envPostgres, envMySQL, envKubernetes)
}

// joinFlags joins names, each after mark, with sep: "--etcd and --zk".
func joinFlags(names []string, mark, sep string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = mark + n
	}
	return strings.Join(out, sep)
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// openBackend opens the backend of t. No backend connects before a
// session or a View is opened.
func openBackend(t target) (backend.Backend, error) {
	switch t.kind {
	case "postgres":
		return openPostgres(t)
	case "mysql":
		return openMySQL(t)
	case "kubernetes":
		return openKubernetes(t)
	case "etcd":
		opts := []etcd.Option{etcd.WithLogger(t.logger())}
		if t.prefix != "" {
			opts = append(opts, etcd.WithPrefix(t.prefix))
		}
		if t.sec.tls != nil {
			opts = append(opts, etcd.WithTLS(t.sec.tls))
		}
		if t.sec.user != "" {
			opts = append(opts, etcd.WithAuth(t.sec.user, t.sec.password))
		}
		return etcd.New(t.addrs, opts...)
	case "zookeeper":
		opts := []zookeeper.Option{zookeeper.WithLogger(t.logger())}
		if t.prefix != "" {
			opts = append(opts, zookeeper.WithRoot(t.prefix))
		}
		if t.sec.tls != nil {
			d := &tls.Dialer{Config: t.sec.tls}
			opts = append(opts, zookeeper.WithDialer(d.DialContext))
		}
		if t.sec.zkAuth != "" {
			opts = append(opts, zookeeper.WithAuth("digest", []byte(t.sec.zkAuth)))
		}
		return zookeeper.New(t.addrs, opts...)
	}
	return nil, fmt.Errorf("unknown backend %q", t.kind)
}

// backendError is a backend that could not be reached, failed a request,
// or did not answer within --timeout: exit status 3.
type backendError struct {
	t       target
	doing   string
	timeout time.Duration
	err     error
}

func (e *backendError) Error() string {
	if errors.Is(e.err, context.DeadlineExceeded) {
		return fmt.Sprintf("%s: no answer within %v while %s (is it running, and are the address and prefix right? see --%s, $%s, --timeout): %v",
			e.t, e.timeout, e.doing, flagOf(e.t), envOf(e.t), e.err)
	}
	return fmt.Sprintf("%s: failed while %s: %v", e.t, e.doing, e.err)
}

func (e *backendError) Unwrap() error { return e.err }

func flagOf(t target) string {
	for _, b := range backendFlags {
		if b.kind == t.kind {
			return b.flag
		}
	}
	return ""
}

func envOf(t target) string {
	for _, b := range backendFlags {
		if b.kind == t.kind {
			return b.env
		}
	}
	return ""
}

// invocation is one run of a command: its flags, and the backend and admin
// it opens on first use.
type invocation struct {
	*cli
	g        globals
	cmd      *command
	explicit map[string]bool // global flags given on the command line

	t   target
	b   backend.Backend
	adm *admin.Admin
	// problems are the records the reads skipped (see problems.go).
	problems []admin.Problem
	seen     map[admin.Problem]bool
}

// admin opens the backend and an admin session on it, once.
func (inv *invocation) admin(ctx context.Context) (*admin.Admin, error) {
	if inv.adm != nil {
		return inv.adm, nil
	}
	t, err := inv.g.target(inv.explicit)
	if err != nil {
		return nil, err
	}
	inv.t = t
	if err := inv.probeServers(ctx, t); err != nil {
		return nil, err
	}
	b, err := inv.open(t)
	if err != nil {
		return nil, usagef(nil, "%s: %v", t, err)
	}
	inv.b = b
	a, err := admin.Open(ctx, b, admin.WithOperator(operator()))
	switch {
	case errors.Is(err, backend.ErrRecordsUnsupported):
		return nil, failf("%s keeps no status or operation records: this build of its backend lacks backend.Records, so there is nothing to show or operate", t)
	case err != nil:
		return nil, inv.backendErr(ctx, "opening a session", err)
	}
	inv.adm = a
	return a, nil
}

// probeServers probes t's servers (see probe), unless the command has no
// probe.
func (inv *invocation) probeServers(ctx context.Context, t target) error {
	if inv.probe == nil {
		return nil
	}
	return inv.probe(ctx, t)
}

// backendErr classifies an error of a backend call: a timeout or an
// unreachable backend, or any other failure.
func (inv *invocation) backendErr(ctx context.Context, doing string, err error) error {
	if err == nil {
		return nil
	}
	var ne *notFoundError
	var re *admin.RecordError
	if errors.As(err, &ne) || errors.As(err, &re) || errors.Is(err, context.Canceled) {
		return err // the backend answered
	}
	// doing names the operation already: say why it failed, once.
	if oe, ok := err.(*admin.OpError); ok {
		err = oe.Err
	}
	if r := refusal(inv.t, doing, err); r != nil {
		return r
	}
	return &backendError{t: inv.t, doing: doing, timeout: inv.g.timeout, err: err}
}

// close ends the admin's session and closes the backend, within what is
// left of ctx's time (at least closeGrace); past it, the backend is closed
// at once and the session left to expire. A failure is a warning: the
// command's work is done.
func (inv *invocation) close(ctx context.Context) {
	if inv.adm != nil {
		budget := closeGrace
		if dl, ok := ctx.Deadline(); ok {
			budget = max(time.Until(dl), closeGrace)
		}
		done := make(chan error, 1)
		go func() { done <- inv.adm.Close() }()
		t := time.NewTimer(budget)
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintf(inv.stderr, "simba: warning: closing the admin session: %v (it expires by itself)\n", err)
			}
		case <-t.C:
			inv.b.Close() // makes the session's Close give up
			<-done
			inv.b = nil
		}
		t.Stop()
	}
	if inv.b != nil {
		if err := inv.b.Close(); err != nil {
			fmt.Fprintf(inv.stderr, "simba: warning: closing the backend: %v\n", err)
		}
	}
}

// operator names who performs operations, recorded with them.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	return name + " (simba command)"
}
