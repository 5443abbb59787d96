package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/term"
)

// security is how the command proves who it is to the backend.
type security struct {
	tls *tls.Config // nil: no TLS
	// user and password are etcd's; zkAuth is ZooKeeper's digest
	// user:password.
	user, password string
	zkAuth         string
	// certFile and certFrom name the client certificate, for messages.
	certFile, certFrom string
	certUser           string // the client certificate's common name
	cacertFrom         string
}

// etcdUser names the etcd user the command is taken for, for messages:
// --user, else the common name of the client certificate (etcd's
// --client-cert-auth takes that for the user).
func (s *security) etcdUser() string {
	switch {
	case s.user != "":
		return "user " + s.user
	case s.certUser != "":
		return fmt.Sprintf("user %s (the common name of the client certificate, no --user given)", s.certUser)
	}
	return "the unauthenticated user"
}

// zkUser returns the user of the ZooKeeper digest credentials.
func (s *security) zkUser() string {
	u, _, _ := strings.Cut(s.zkAuth, ":")
	return u
}

// refusedError is a backend that refused the TLS handshake, the
// credentials or a permission: exit status 5.
type refusedError struct{ msg string }

func (e *refusedError) Error() string   { return e.msg }
func (e *refusedError) exitStatus() int { return exitRefused }

func refusedf(format string, args ...any) error {
	return &refusedError{msg: fmt.Sprintf(format, args...)}
}

// readPassword asks for a password on the terminal without echoing it,
// when standard input is one; ok is false otherwise. Tests replace it.
var readPassword = func(stderr io.Writer, prompt string) (password string, ok bool, err error) {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", false, nil
	}
	fmt.Fprint(stderr, prompt)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(stderr)
	return string(b), true, err
}

// label says where a setting came from, for messages: "--cacert",
// "$SIMBA_CACERT" or "config file F".
func (c *connFlags) label(name string) string {
	from := c.from[name]
	if strings.HasPrefix(from, "config file ") {
		return from + " (" + name + ")"
	}
	return from
}

// security builds the TLS configuration and the credentials of a
// connection to a backend of kind at addrs from the settings resolved,
// asking for the etcd password on the terminal when it is needed and
// nothing else gives it. For MySQL, the TLS configuration is the one the
// driver uses (mysql.go).
func (c *connFlags) security(kind string, addrs []string, stderr io.Writer, explicit map[string]bool) (*security, error) {
	if kind == "postgres" {
		return c.postgresSecurity(explicit)
	}
	s := &security{}
	tlsOn := c.cacert != "" || c.cert != "" || c.key != "" || c.insecure
	for _, a := range addrs {
		tlsOn = tlsOn || (kind == "etcd" && strings.HasPrefix(a, "https://"))
	}
	if tlsOn {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.insecure}
		if c.cacert != "" {
			s.cacertFrom = c.label("cacert")
			data, err := os.ReadFile(c.cacert)
			if err != nil {
				return nil, configErrorf("CA certificates from %s: %s", s.cacertFrom, pathError(err))
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(data) {
				return nil, configErrorf("CA certificates from %s: no PEM certificate in %s", s.cacertFrom, c.cacert)
			}
			cfg.RootCAs = pool
		}
		switch {
		case c.cert != "" && c.key != "":
			s.certFile, s.certFrom = c.cert, c.label("cert")
			pair, err := tls.LoadX509KeyPair(c.cert, c.key)
			if err != nil {
				return nil, configErrorf("client certificate from %s and key from %s: %s", c.label("cert"), c.label("key"), pathError(err))
			}
			if now := time.Now(); now.After(pair.Leaf.NotAfter) {
				return nil, refusedf("client certificate %s (from %s) expired at %s: renew it", c.cert, s.certFrom, pair.Leaf.NotAfter.Format(time.RFC3339))
			} else if now.Before(pair.Leaf.NotBefore) {
				return nil, refusedf("client certificate %s (from %s) is not valid before %s: is this host's clock right?", c.cert, s.certFrom, pair.Leaf.NotBefore.Format(time.RFC3339))
			}
			cfg.Certificates = []tls.Certificate{pair}
			s.certUser = pair.Leaf.Subject.CommonName
		case c.cert != "":
			return nil, configErrorf("client certificate from %s without its key: add --key", c.label("cert"))
		case c.key != "":
			return nil, configErrorf("client key from %s without its certificate: add --cert", c.label("key"))
		}
		s.tls = cfg
	}

	switch kind {
	case "etcd":
		if explicit["zk-auth"] {
			return nil, usagef(nil, "--zk-auth is for ZooKeeper; etcd takes --user")
		}
		if c.user == "" {
			break
		}
		user, password, hasPassword := strings.Cut(c.user, ":")
		if user == "" {
			return nil, configErrorf("empty etcd user name in %s", c.label("user"))
		}
		s.user = user
		switch {
		case hasPassword:
		case c.password != "":
			password = c.password
		case c.passwordFile != "":
			p, err := readSecret(c.passwordFile)
			if err != nil {
				return nil, configErrorf("password of %s from config file %s (password-file): %s", user, c.file, pathError(err))
			}
			password = p
		default:
			p, ok, err := readPassword(stderr, fmt.Sprintf("etcd password for %s: ", user))
			switch {
			case err != nil:
				return nil, configErrorf("reading the password of %s from the terminal: %v", user, err)
			case !ok:
				return nil, configErrorf("no password for etcd user %s: pass --password, set $%s, give password-file in the config file, or run on a terminal to be asked", user, envPassword)
			}
			password = p
		}
		s.password = password
	case "zookeeper":
		if explicit["user"] || explicit["password"] {
			return nil, usagef(nil, "--user and --password are for etcd; ZooKeeper takes --zk-auth user:password")
		}
		auth := c.zkAuth
		if auth == "" && c.zkAuthFile != "" {
			a, err := readSecret(c.zkAuthFile)
			if err != nil {
				return nil, configErrorf("ZooKeeper credentials from config file %s (zk-auth-file): %s", c.file, pathError(err))
			}
			auth = a
		}
		if auth != "" {
			if u, _, ok := strings.Cut(auth, ":"); !ok || u == "" {
				return nil, configErrorf("ZooKeeper credentials from %s: want user:password", c.zkAuthLabel())
			}
		}
		s.zkAuth = auth
	case "mysql":
		password, err := c.dsnPassword(explicit, "MySQL", "user@tcp(host:3306)/db")
		if err != nil {
			return nil, err
		}
		s.password = password
	}
	return s, nil
}

// postgresSecurity returns the credentials of a connection to
// PostgreSQL: a password for a DSN without one. TLS and the user are the
// DSN's: the TLS settings and --user are refused, whatever gives them, so
// that none is silently ignored.
func (c *connFlags) postgresSecurity(explicit map[string]bool) (*security, error) {
	for _, name := range []string{"cacert", "cert", "key"} {
		if v := map[string]string{"cacert": c.cacert, "cert": c.cert, "key": c.key}[name]; v != "" {
			return nil, usagef(nil, "--%s (from %s) is for etcd and ZooKeeper: PostgreSQL takes its TLS settings in the DSN (sslmode=verify-full, sslrootcert, sslcert, sslkey)", name, c.label(name))
		}
	}
	if c.insecure {
		return nil, usagef(nil, "--insecure-skip-tls-verify is for etcd and ZooKeeper: PostgreSQL takes its TLS settings in the DSN (sslmode=require encrypts without verifying)")
	}
	password, err := c.dsnPassword(explicit, "PostgreSQL", "postgres://USER@host/db")
	if err != nil {
		return nil, err
	}
	return &security{password: password}, nil
}

// dsnPassword returns the password of a backend whose user is in its DSN
// (PostgreSQL's, MySQL's, named db; example shows where the user goes):
// --password, $SIMBA_PASSWORD or the config file's password-file, else "".
// --user and --zk-auth are refused, whatever gives them.
func (c *connFlags) dsnPassword(explicit map[string]bool, db, example string) (string, error) {
	switch {
	case explicit["zk-auth"]:
		return "", usagef(nil, "--zk-auth is for ZooKeeper; %s takes the user in the DSN and --password", db)
	case explicit["user"] || c.from["user"] == "config file "+c.file:
		return "", usagef(nil, "--user (from %s) is for etcd: %s takes the user in the DSN (%s)", c.label("user"), db, example)
	}
	switch {
	case c.password != "":
		return c.password, nil
	case c.passwordFile != "":
		p, err := readSecret(c.passwordFile)
		if err != nil {
			return "", configErrorf("password from config file %s (password-file): %s", c.file, pathError(err))
		}
		return p, nil
	}
	return "", nil
}

func (c *connFlags) zkAuthLabel() string {
	if c.zkAuth == "" && c.zkAuthFile != "" {
		return "config file " + c.file + " (zk-auth-file)"
	}
	return c.label("zk-auth")
}

// readSecret reads a password from a file: its content, a final line end
// removed.
func readSecret(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(string(data), "\n")
	return strings.TrimSuffix(s, "\r"), nil
}

// refusal returns the refusedError that err is, if the backend refused
// the command's credentials, permissions or TLS handshake; else nil.
func refusal(t target, doing string, err error) error {
	if t.kind == "postgres" {
		if r := pgRefusal(t, doing, err); r != nil {
			return r
		}
	}
	if t.kind == "mysql" {
		return myRefusal(t, doing, err)
	}
	if t.kind == "kubernetes" && t.kube != nil {
		if r := kubeRefusal(t, doing, err); r != nil {
			return r
		}
	}
	where := t.String()
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return refusedf("%s refused %s while %s: wrong user name or password (etcd: authentication failed)", where, t.sec.etcdUser(), doing)
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrInvalidAuthToken) && t.sec.user == "":
		return refusedf("%s requires authentication: pass --user (or set $%s)", where, envUser)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return refusedf("%s: %s may not do this while %s (etcd: permission denied): its role needs read permission on the key prefix to show, read and write to operate", where, t.sec.etcdUser(), doing)
	case errors.Is(err, zk.ErrNoAuth):
		who := "without credentials"
		if u := t.sec.zkUser(); u != "" {
			who = "as " + u
		}
		return refusedf("%s refused access %s while %s (ZooKeeper: not authenticated): the znodes' ACL does not admit these credentials; check --zk-auth", where, who, doing)
	case errors.Is(err, zk.ErrAuthFailed):
		return refusedf("%s refused the credentials while %s (ZooKeeper: authentication failed): check --zk-auth", where, doing)
	}
	if msg := tlsProblem(t.sec, err); msg != "" {
		return refusedf("%s: TLS handshake failed: %s", where, msg)
	}
	return nil
}

// tlsProblem explains a TLS handshake error, or returns "" if err is none.
func tlsProblem(s *security, err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
	)
	ca := "the system's CAs"
	if s != nil && s.cacertFrom != "" {
		ca = "the CA of " + s.cacertFrom
	}
	cert := "the connection without a client certificate (pass --cert and --key)"
	if s != nil && s.certFile != "" {
		cert = "the client certificate " + s.certFile + " (from " + s.certFrom + ")"
	}
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf("the server's certificate is not signed by %s (%v)", ca, unknown.Error())
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Sprintf("the server's certificate has expired or is not yet valid (%v)", invalid.Error())
	case errors.As(err, &invalid):
		return fmt.Sprintf("the server's certificate is not valid: %v", invalid.Error())
	case errors.As(err, &hostname):
		return fmt.Sprintf("the server's certificate is not for this address: %v", hostname.Error())
	case errors.As(err, &verify):
		return fmt.Sprintf("the server's certificate cannot be verified: %v", verify.Err)
	case isAlert(err):
		return fmt.Sprintf("the server refused %s (%v)", cert, alertText(err))
	case errors.As(err, &header):
		return "the server does not speak TLS: drop --cacert, --cert, --key and https://, or check the port"
	}
	return ""
}

// isAlert reports whether err is a TLS alert the server sent: a
// *net.OpError "remote error" (or a tls.AlertError, over QUIC).
func isAlert(err error) bool {
	var op *net.OpError
	var alert tls.AlertError
	return errors.As(err, &op) && op.Op == "remote error" || errors.As(err, &alert)
}

// alertText returns the alert of a remote error: "tls: bad certificate".
func alertText(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// probeWait bounds the wait, after a TLS 1.3 handshake, for the server's
// verdict on the client's certificate, which comes after the handshake
// is over on the client's side.
const probeWait = time.Second

// probe connects to each of t's servers at once, before the backend's own
// client does, to fail at once where that client would wait out the
// command's --timeout saying nothing of why:
//
//   - etcd's client retries a refused connection until the request's
//     deadline: when every etcd server refuses the connection, probe
//     returns a backendError at once, as ZooKeeper's and PostgreSQL's
//     clients fail ("no server of [...] reachable: ... connection
//     refused");
//   - gRPC retries a failed TLS handshake the same way: with TLS, probe
//     performs a handshake with each server, and returns a refusedError
//     when no server completed it and one or more refused it (a wrong CA,
//     an expired or missing client certificate).
//
// It returns nil otherwise: one server answered, or none could be reached
// for another reason (a timeout, say), which the backend's own error says.
func probe(ctx context.Context, t target) error {
	withTLS := t.sec != nil && t.sec.tls != nil
	if len(t.addrs) == 0 || !withTLS && t.kind != "etcd" {
		return nil
	}
	var cfg *tls.Config
	if withTLS {
		cfg = t.sec.tls
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type verdict struct {
		addr    string
		err     error // a handshake error, or nil
		dialErr error // why no connection could be made, or nil
		ok      bool  // connected (and, with TLS, the handshake succeeded)
	}
	results := make(chan verdict, len(t.addrs))
	for _, a := range t.addrs {
		if strings.HasPrefix(a, "unix://") || strings.HasPrefix(a, "unixs://") {
			return nil // a socket file: the backend's client knows it
		}
	}
	for _, a := range t.addrs {
		addr := probeAddr(t.kind, a)
		go func() {
			ok, err, dialErr := handshake(ctx, addr, cfg)
			results <- verdict{addr, err, dialErr, ok}
		}()
	}
	var refused *verdict
	var connRefused []error
	for range t.addrs {
		v := <-results
		switch {
		case v.ok:
			return nil // cancel ends the others; their results are buffered
		case v.err != nil && refused == nil:
			refused = &v
		case errors.Is(v.dialErr, syscall.ECONNREFUSED):
			connRefused = append(connRefused, v.dialErr)
		}
	}
	if refused == nil {
		if t.kind == "etcd" && len(connRefused) == len(t.addrs) {
			return &backendError{t: t, doing: "opening a session",
				err: fmt.Errorf("no server of %v reachable: %w", t.addrs, connRefused[0])}
		}
		return nil
	}
	if msg := tlsProblem(t.sec, refused.err); msg != "" {
		return refusedf("%s: TLS handshake with %s failed: %s", t, refused.addr, msg)
	}
	if errors.Is(refused.err, io.EOF) {
		// A plain ZooKeeper port reads the ClientHello as a request too
		// long and hangs up, without a byte that tlsProblem would know.
		port := "check the port"
		if t.kind == "zookeeper" {
			port = "ZooKeeper serves TLS on its secureClientPort, not its clientPort"
		}
		return refusedf("%s: TLS handshake with %s failed: the server hung up: does it serve TLS on this port? (%s; for a plain port, drop the TLS settings: --cacert, --cert, --key)", t, refused.addr, port)
	}
	return refusedf("%s: TLS handshake with %s failed: %v", t, refused.addr, refused.err)
}

// probeAddr returns the host:port to dial for an address of a backend.
func probeAddr(kind, a string) string {
	if _, rest, ok := strings.Cut(a, "://"); ok {
		a = rest
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		port := "2379"
		if kind == "zookeeper" {
			port = "2181"
		}
		a = net.JoinHostPort(strings.Trim(a, "[]"), port)
	}
	return a
}

// handshake connects to addr and performs a TLS handshake with base, if
// not nil. It reports ok when it connected and the server accepted the
// handshake, the handshake's error when that failed, and dialErr when no
// TCP connection could be made. After a TLS 1.3 handshake it waits up to
// probeWait for the server's verdict on the client's certificate: a
// session ticket (accepted) or an alert.
func handshake(ctx context.Context, addr string, base *tls.Config) (ok bool, err, dialErr error) {
	var d net.Dialer
	raw, dialErr := d.DialContext(ctx, "tcp", addr)
	if dialErr != nil {
		return false, nil, dialErr
	}
	defer raw.Close()
	if base == nil {
		return true, nil, nil
	}
	ok, err = tlsHandshake(ctx, raw, addr, base)
	return ok, err, nil
}

// tlsHandshake performs the TLS handshake of handshake on raw.
func tlsHandshake(ctx context.Context, raw net.Conn, addr string, base *tls.Config) (ok bool, err error) {
	ticket := make(chan struct{}, 1)
	cfg := base.Clone()
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	cfg.ClientSessionCache = notifyingCache{ticket}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, err
	}
	if c.ConnectionState().Version < tls.VersionTLS13 {
		return true, nil // the client's certificate was checked in the handshake
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	timer := time.NewTimer(probeWait)
	defer timer.Stop()
	readDone := false
	select {
	case <-ticket:
		ok = true
	case err = <-read:
		readDone = true
		if !isAlert(err) {
			ok, err = true, nil // data, or a close: not a refusal of the handshake
		}
	case <-timer.C:
		ok = true // no verdict: let the backend's own client find out
	case <-ctx.Done():
	}
	raw.Close() // ends the Read
	if !readDone {
		<-read
	}
	return ok, err
}

// notifyingCache is a session cache that stores nothing and signals each
// ticket the server sends: a TLS 1.3 server sends them once it has
// accepted the client's certificate.
type notifyingCache struct{ ticket chan struct{} }

func (n notifyingCache) Get(string) (*tls.ClientSessionState, bool) { return nil, false }

func (n notifyingCache) Put(_ string, cs *tls.ClientSessionState) {
	if cs == nil {
		return
	}
	select {
	case n.ticket <- struct{}{}:
	default:
	}
}
