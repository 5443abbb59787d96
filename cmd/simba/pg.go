package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend/postgres"
)

// PostgreSQL: --postgres DSN (or $SIMBA_POSTGRES, or backend: postgres and
// postgres: DSN in the config file). --prefix names the schema, without
// the slashes at its ends (/simba/ is the schema simba, the backend's
// default), so that one $SIMBA_PREFIX means the same place on every
// backend. TLS is the DSN's (sslmode, sslrootcert, sslcert, sslkey); the
// user is the DSN's; the password is the DSN's, else --password,
// $SIMBA_PASSWORD or the config file's password-file. The DSN's password
// is never printed.

// defaultSchema is the schema of a PostgreSQL backend given no --prefix.
const defaultSchema = "simba"

// schemaOf returns the PostgreSQL schema a --prefix names.
func schemaOf(prefix string) string { return strings.Trim(prefix, "/") }

// pgBackend is a PostgreSQL backend on a pool of the command's own, which
// Close closes after the backend.
type pgBackend struct {
	*postgres.Backend
	pool *pgxpool.Pool
}

func (b *pgBackend) Close() error {
	err := b.Backend.Close()
	b.pool.Close()
	return err
}

// openPostgres opens the PostgreSQL backend of t, on a pool that does not
// connect before the first Open or View.
func openPostgres(t target) (*pgBackend, error) {
	cfg, err := pgxpool.ParseConfig(t.dsn)
	if err != nil {
		return nil, errors.New(dsnError(t.dsn, err))
	}
	if cfg.ConnConfig.Password == "" && t.sec.password != "" {
		cfg.ConnConfig.Password = t.sec.password
	}
	opts := []postgres.Option{postgres.WithLogger(t.logger())}
	if t.prefix != "" {
		opts = append(opts, postgres.WithSchema(schemaOf(t.prefix)))
	}
	if t.noListen {
		opts = append(opts, postgres.WithoutListen(0))
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("making the connection pool: %w", err)
	}
	b, err := postgres.NewFromPool(pool, opts...)
	if err != nil {
		pool.Close()
		if t.prefix != "" {
			return nil, fmt.Errorf("--prefix %q (the PostgreSQL schema, without its slashes): %w", t.prefix, err)
		}
		return nil, err
	}
	return &pgBackend{Backend: b, pool: pool}, nil
}

// parseConfigPrefix is the start of a pgconn.ParseConfigError's message,
// which quotes the DSN.
var parseConfigPrefix = regexp.MustCompile("^cannot parse `.*`: ")

// dsnError returns the one-line message of a DSN that does not parse,
// without the DSN (a url.Error quotes it whole, password and all).
func dsnError(dsn string, err error) string {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = strings.ReplaceAll(msg, ue.Error(), ue.Err.Error())
	}
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		msg = parseConfigPrefix.ReplaceAllString(msg, "")
	}
	msg = strings.ReplaceAll(msg, "\n", " ")
	return redact("the PostgreSQL DSN does not parse: "+msg, dsnPasswords(dsn))
}

var (
	urlPassword = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#]*:([^@]*)@`)
	kvPassword  = regexp.MustCompile(`(?:^|\s)(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)
	qPassword   = regexp.MustCompile(`[?&](?:ssl)?password=([^&#]*)`)
)

// dsnPasswords returns the passwords a DSN appears to hold, whether it
// parses or not, in every spelling a message might show: as written,
// unescaped, unquoted.
func dsnPasswords(dsn string) []string {
	var raw []string
	if m := urlPassword.FindStringSubmatch(dsn); m != nil {
		raw = append(raw, m[1])
	}
	for _, m := range qPassword.FindAllStringSubmatch(dsn, -1) {
		raw = append(raw, m[1])
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		raw = append(raw, m[1], strings.Trim(m[1], "'"))
	}
	var out []string
	for _, p := range raw {
		out = append(out, p)
		if u, err := url.PathUnescape(p); err == nil {
			out = append(out, u)
		}
		if u, err := url.QueryUnescape(p); err == nil {
			out = append(out, u)
		}
	}
	return out
}

// describeDSN names the server and database of a DSN for messages,
// user@host:port/database, without its password or other settings.
func describeDSN(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "(a DSN that does not parse)"
	}
	s := fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	if n := len(cfg.Fallbacks) - 1; n > 0 {
		s += fmt.Sprintf(" (and %d more host%s)", n, plural(n))
	}
	return s
}

// dsnUser returns the user a DSN logs in as, or "".
func dsnUser(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return cfg.User
}

// minSecret is the length from which a secret is removed from messages:
// a shorter one would blank out common words, and is no secret anyway.
const minSecret = 4

// redact returns s with each of secrets (of minSecret bytes or more)
// replaced by xxxxx.
func redact(s string, secrets []string) string {
	for _, p := range secrets {
		if len(p) >= minSecret {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}

// redactingWriter writes through w with secrets redacted from each write
// (fail prints each message in one write).
type redactingWriter struct {
	w       io.Writer
	secrets []string
}

func (r *redactingWriter) Write(p []byte) (int, error) {
	if len(r.secrets) == 0 {
		return r.w.Write(p)
	}
	if _, err := io.WriteString(r.w, redact(string(p), r.secrets)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// pgRefusal returns the refusedError that err is if the PostgreSQL server
// refused the login or a permission; else nil.
func pgRefusal(t target, doing string, err error) error {
	if msg := tlsProblem(pgTLSFiles(t.dsn), err); msg != "" {
		return refusedf("%s: TLS handshake failed: %s", t, msg)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil
	}
	user := dsnUser(t.dsn)
	switch pe.Code {
	case "28P01": // invalid_password
		return refusedf("%s refused the login of user %s while %s: wrong password (PostgreSQL: %s): check the DSN's password, --password, $%s or the config file's password-file", t, user, doing, pe.Message, envPassword)
	case "28000": // invalid_authorization_specification: no such role, no pg_hba.conf entry
		return refusedf("%s refused the login of user %s while %s (PostgreSQL: %s)", t, user, doing, pe.Message)
	case "42501": // insufficient_privilege
		return refusedf("%s: user %s may not do this while %s (PostgreSQL: %s): to show, it needs USAGE on the schema and SELECT on its tables; to operate, also INSERT, UPDATE and DELETE, and USAGE on its sequences", t, user, doing, pe.Message)
	}
	return nil
}

// pgTLSFiles names, for the messages of a failed TLS handshake, the CA
// and client certificate a DSN's TLS uses: its sslrootcert and sslcert,
// else $PGSSLROOTCERT and $PGSSLCERT (which pgx reads), else none (the
// system's CAs, no client certificate).
func pgTLSFiles(dsn string) *security {
	s := &security{}
	if ca := dsnSetting(dsn, "sslrootcert"); ca != "" {
		s.cacertFrom = "sslrootcert " + ca
	}
	if cert := dsnSetting(dsn, "sslcert"); cert != "" {
		s.certFile, s.certFrom = cert, "the DSN's sslcert"
	}
	return s
}

// dsnSetting returns the value of a setting of a DSN (a URL's query
// parameter, or a key=value pair), else of its environment variable
// ($PG and the key in upper case), else "".
func dsnSetting(dsn, key string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if v := u.Query().Get(key); v != "" {
			return v
		}
	} else if m := regexp.MustCompile(`(?:^|\s)` + regexp.QuoteMeta(key) + `\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`).FindStringSubmatch(dsn); m != nil {
		v := m[1]
		if strings.HasPrefix(v, "'") {
			v = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(strings.Trim(v, "'"))
		}
		return v
	}
	return os.Getenv("PG" + strings.ToUpper(key))
}
