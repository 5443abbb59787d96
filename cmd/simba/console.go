package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/simba-go/simba/console"
)

var consoleCommand = &command{
	name: "console", maxArgs: 0, serves: true,
	summary: "serve the web console",
	doc: `A web console on --listen (default ` + console.DefaultAddr + `, this machine
only): elections, groups (who holds each partition), jobs and their history,
members, updated live. Operations from the page (disable, enable, trigger,
resign, drain, undrain) need the token given with --token or $` + console.TokenEnv + `
(at least 16 characters; a fresh one is printed when neither is given),
unless --read-only refuses them all. Ctrl-C stops it.`,
	setup: func(fs *flag.FlagSet) action {
		listen := fs.String("listen", console.DefaultAddr, "`address` to serve on")
		token := fs.String("token", "", "`token` that operations need (default $"+console.TokenEnv+", else a fresh one)")
		readOnly := fs.Bool("read-only", false, "refuse every operation")
		hosts := fs.String("allow-host", "", "comma-separated host `names` the console may be reached by, besides IP addresses and localhost")
		return func(ctx context.Context, inv *invocation, _ []string) error {
			tok := *token
			if tok == "" {
				tok = inv.getenv(console.TokenEnv)
			}
			return runConsole(ctx, inv, *listen, tok, *readOnly, *hosts)
		}
	},
}

func runConsole(ctx context.Context, inv *invocation, listen, token string, readOnly bool, hosts string) error {
	octx, cancel := context.WithTimeout(ctx, inv.g.timeout)
	a, err := inv.admin(octx)
	cancel()
	if err != nil {
		return err
	}
	opts := []console.Option{console.WithReadOnly(readOnly)}
	generated := false
	if !readOnly {
		if token == "" {
			token, generated = console.NewToken(), true
		}
		opts = append(opts, console.WithToken(token))
	}
	if hosts != "" {
		opts = append(opts, console.WithAllowedHosts(strings.Split(hosts, ",")...))
	}
	srv, err := console.New(a, opts...)
	if errors.Is(err, console.ErrWeakToken) {
		return usagef(nil, "the console token must be at least %d characters", console.MinTokenLen)
	}
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return usagef(nil, "--listen %s: %v", listen, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	hs.RegisterOnShutdown(srv.Close)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	fmt.Fprintf(inv.stdout, "simba console at http://%s/ on %s\n", ln.Addr(), inv.t)
	switch {
	case readOnly:
		fmt.Fprintln(inv.stdout, "read-only: operations are refused")
	case generated:
		fmt.Fprintf(inv.stdout, "operations need this token (set $%s or --token to choose it): %s\n", console.TokenEnv, token)
	default:
		fmt.Fprintln(inv.stdout, "operations need the token given")
	}
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
