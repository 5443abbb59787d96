package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/simba-go/simba/console"
)

var consoleCommand = &command{
	name: "console", maxArgs: 0, serves: true,
	summary: "serve the web console",
	doc: `A web console on --listen (default ` + console.DefaultAddr + `, this machine
only): elections, groups (who holds each partition), jobs and their history,
members, updated live; /healthz answers 200 while the backend can be read,
503 otherwise. Every read of the backend and every operation is bounded by
--timeout. Ctrl-C stops it.

Operations from the page (disable, enable, trigger, resign, drain, undrain)
need a token, unless --read-only refuses them all:
  - the token given with --token or $` + console.TokenEnv + ` (at least 16
    characters); the page asks for an optional operator name with it;
  - and/or one token per operator, "name:token" a line, from --tokens-file
    (readable by its owner only); the operator's name is recorded with what
    they do;
  - else a fresh token: printed when stdout is a terminal, otherwise written
    to a file of mode 0600 (--token-file, else a new file in
    $XDG_RUNTIME_DIR or the temporary directory, removed at exit) whose path
    is printed, so that it never reaches a log.

With --tls-cert and --tls-key it serves HTTPS (TLS 1.2 or later). (--cert and
--key, like etcdctl's, are the client certificate it presents to etcd.) It refuses to
serve plain HTTP on an address other than loopback unless --insecure-listen:
the token would cross the network in the clear.

Operations, accepted or refused, and the backend becoming unreachable or
reachable again, are logged to stderr.`,
	setup: func(fs *flag.FlagSet) action {
		var o consoleFlags
		fs.StringVar(&o.listen, "listen", console.DefaultAddr, "`address` to serve on")
		fs.StringVar(&o.token, "token", "", "`token` that operations need (default $"+console.TokenEnv+", else a fresh one)")
		fs.BoolVar(&o.readOnly, "read-only", false, "refuse every operation")
		fs.StringVar(&o.hosts, "allow-host", "", "comma-separated host `names` the console may be reached by, besides IP addresses and localhost")
		fs.StringVar(&o.cert, "tls-cert", "", "serve HTTPS with the certificate (chain) in this PEM `file`; needs --tls-key")
		fs.StringVar(&o.key, "tls-key", "", "the private key of --tls-cert, a PEM `file`")
		fs.BoolVar(&o.insecureListen, "insecure-listen", false, "serve plain HTTP on an address other than loopback")
		fs.StringVar(&o.tokenFile, "token-file", "", "write a generated token to this `file` (mode 0600) instead of stdout")
		fs.StringVar(&o.tokensFile, "tokens-file", "", "read operators' tokens from this `file`: name:token a line")
		return func(ctx context.Context, inv *invocation, _ []string) error {
			if o.token == "" {
				o.token = inv.getenv(console.TokenEnv)
			}
			return runConsole(ctx, inv, o)
		}
	},
}

// consoleFlags are the flags of simba console.
type consoleFlags struct {
	listen, token, hosts  string
	readOnly              bool
	cert, key             string
	insecureListen        bool
	tokenFile, tokensFile string
}

func runConsole(ctx context.Context, inv *invocation, o consoleFlags) error {
	tlsConfig, err := o.tlsConfig()
	if err != nil {
		return err
	}
	if tlsConfig == nil && !o.insecureListen {
		if err := loopbackOnly(ctx, o.listen); err != nil {
			return err
		}
	}
	opts, generated, err := o.consoleOptions(inv)
	if err != nil {
		return err
	}
	// The address first: a busy port is one line, before the backend is
	// read or the console says it is ready.
	ln, err := listen(o.listen)
	if err != nil {
		return err
	}
	defer ln.Close() // on a failure below; Shutdown closes it otherwise
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tlsConfig == nil && !o.insecureListen && !tcp.IP.IsLoopback() {
		return insecureListenError(o.listen)
	}
	octx, cancel := context.WithTimeout(ctx, inv.g.timeout)
	a, err := inv.admin(octx)
	cancel()
	if err != nil {
		return err
	}
	logs := slog.NewTextHandler(inv.stderr, nil)
	opts = append(opts, console.WithTimeout(inv.g.timeout), console.WithBackendName(inv.t.String()), console.WithLogger(slog.New(logs)))
	srv, err := console.New(a, opts...)
	if errors.Is(err, console.ErrWeakToken) {
		return usagef(nil, "the console token must be at least %d characters", console.MinTokenLen)
	}
	if err != nil {
		return err
	}
	defer srv.Close()
	scheme := "http"
	if tlsConfig != nil {
		ln, scheme = tls.NewListener(ln, tlsConfig), "https"
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig,
		ErrorLog: slog.NewLogLogger(logs, slog.LevelWarn)} // TLS handshakes that failed, say
	hs.RegisterOnShutdown(srv.Close)

	fmt.Fprintf(inv.stdout, "simba console at %s://%s/ on %s\n", scheme, ln.Addr(), inv.t)
	switch {
	case o.readOnly:
		fmt.Fprintln(inv.stdout, "read-only: operations are refused")
	case generated != "":
		remove, err := o.tellToken(inv, generated)
		if err != nil {
			return err
		}
		defer remove()
	case o.token != "" && o.tokensFile != "":
		fmt.Fprintln(inv.stdout, "operations need the token given, or an operator's token from", o.tokensFile)
	case o.tokensFile != "":
		fmt.Fprintln(inv.stdout, "operations need an operator's token from", o.tokensFile)
	default:
		fmt.Fprintln(inv.stdout, "operations need the token given")
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	hs.Shutdown(shutdown)
	<-served
	return nil
}

// listen listens on addr for the console. An address in use or not
// permitted is a failure of one line; one that cannot be read is a usage
// error.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, failf("--listen %s: the address is in use (another console?): stop what serves there, or pass --listen with another port", addr)
	case errors.Is(err, syscall.EACCES):
		return nil, failf("--listen %s: permission denied (a port below 1024?): pass --listen with another port", addr)
	case err != nil:
		return nil, usagef(nil, "--listen %s: %v", addr, err)
	}
	return ln, nil
}

// tlsConfig returns the TLS configuration of --tls-cert and --tls-key, or nil for
// plain HTTP.
func (o consoleFlags) tlsConfig() (*tls.Config, error) {
	switch {
	case o.cert == "" && o.key == "":
		return nil, nil
	case o.cert == "" || o.key == "":
		return nil, usagef(nil, "--tls-cert and --tls-key go together: give both to serve HTTPS")
	}
	pair, err := tls.LoadX509KeyPair(o.cert, o.key)
	if err != nil {
		return nil, usagef(nil, "--tls-cert %s --tls-key %s: %v", o.cert, o.key, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, nil
}

// loopbackOnly refuses an address to serve plain HTTP on that is not
// loopback: an IP address that is not, all interfaces (no host, 0.0.0.0,
// ::), or a name that resolves to any address that is not.
func loopbackOnly(ctx context.Context, listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return usagef(nil, "--listen %s: %v", listen, err)
	}
	if host == "" {
		return insecureListenError(listen)
	}
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			return insecureListenError(listen)
		}
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(rctx, host)
	if err != nil {
		return usagef(nil, "--listen %s: %v", listen, err)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return insecureListenError(listen)
		}
	}
	return nil
}

func insecureListenError(listen string) error {
	return usagef(nil, "--listen %s is not a loopback address: serving plain HTTP there would send the operations token across the network in the clear; give --tls-cert and --tls-key to serve HTTPS, or --insecure-listen (behind a TLS proxy, say)", listen)
}

// consoleOptions returns the console's options for the token flags, and the
// token it generated, if it did.
func (o consoleFlags) consoleOptions(inv *invocation) (opts []console.Option, generated string, err error) {
	opts = []console.Option{console.WithReadOnly(o.readOnly)}
	if o.hosts != "" {
		opts = append(opts, console.WithAllowedHosts(strings.Split(o.hosts, ",")...))
	}
	if o.readOnly {
		return opts, "", nil
	}
	if o.tokensFile != "" {
		ops, err := readTokensFile(o.tokensFile)
		if err != nil {
			return nil, "", err
		}
		opts = append(opts, console.WithOperators(ops))
	}
	token := o.token
	switch {
	case token != "" && o.tokenFile != "":
		return nil, "", usagef(nil, "--token-file is where a generated token goes, but a token was given (--token or $%s)", console.TokenEnv)
	case token == "" && o.tokensFile == "":
		token = console.NewToken()
		generated = token
	}
	if fi, err := os.Lstat(o.tokenFile); generated != "" && o.tokenFile != "" && err == nil && !fi.Mode().IsRegular() {
		return nil, "", usagef(nil, "--token-file %s is not a regular file", o.tokenFile)
	}
	if token != "" {
		opts = append(opts, console.WithToken(token))
	}
	return opts, generated, nil
}

// readTokensFile reads operators' tokens from path, which only its owner
// may read or write.
func readTokensFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef(nil, "--tokens-file: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, usagef(nil, "--tokens-file: %v", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, usagef(nil, "--tokens-file %s: mode %04o lets others read or change the tokens: chmod 600 %s", path, perm, path)
	}
	ops, err := console.ParseOperators(f)
	if err != nil {
		return nil, usagef(nil, "--tokens-file %s: %v", path, strings.TrimPrefix(err.Error(), console.ErrInvalidOption.Error()+": "))
	}
	return ops, nil
}

// tellToken tells the operator a generated token without it reaching a
// log: on stdout if that is a terminal and no --token-file was given, else
// in a file only its owner can read, whose path it prints. remove removes a
// file it created in the temporary directory.
func (o consoleFlags) tellToken(inv *invocation, token string) (remove func(), err error) {
	if o.tokenFile == "" && inv.terminal != nil && inv.terminal(inv.stdout) {
		fmt.Fprintf(inv.stdout, "operations need this token (set $%s or --token to choose it): %s\n", console.TokenEnv, token)
		return func() {}, nil
	}
	dir := inv.getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	path, remove, err := writeTokenFile(o.tokenFile, dir, token)
	if err != nil {
		return nil, failf("writing the generated token: %v", err)
	}
	fmt.Fprintf(inv.stdout, "operations need the token in %s (mode 0600; set $%s or --token to choose it)\n", path, console.TokenEnv)
	return remove, nil
}

// writeTokenFile writes token to path with mode 0600, or to a new file in
// dir when path is "" (removed by remove). It refuses to write through a
// symbolic link or to anything but a regular file.
func writeTokenFile(path, dir, token string) (written string, remove func(), err error) {
	if path == "" {
		f, err := os.CreateTemp(dir, "simba-console-token-")
		if err != nil {
			return "", nil, err
		}
		if err := writeAndClose(f, token); err != nil {
			os.Remove(f.Name())
			return "", nil, err
		}
		return f.Name(), func() { os.Remove(f.Name()) }, nil
	}
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return "", nil, fmt.Errorf("--token-file %s is not a regular file", path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return "", nil, err
	}
	if err := writeAndClose(f, token); err != nil {
		return "", nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return abs, func() {}, nil
}

func writeAndClose(f *os.File, token string) error {
	_, err := fmt.Fprintln(f, token)
	return errors.Join(err, f.Close())
}
