package main

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend/mysql"
)

// MySQL and MariaDB: --mysql DSN (or $SIMBA_MYSQL, or backend: mysql and
// mysql: DSN in the config file), in go-sql-driver/mysql's format,
// user[:password]@tcp(host:3306)/database[?param=value&...]. --prefix names
// the tables' prefix: the slashes at its ends dropped and an _ added if it
// lacks one (/simba/, simba and simba_ are all the backend's default,
// simba_), so that one $SIMBA_PREFIX means the same place on every backend.
// TLS is the DSN's tls=true, skip-verify or preferred, or, with --cacert,
// --cert, --key or --insecure-skip-tls-verify (which a DSN without tls=, or
// with tls=true, then takes), a configuration of the command's own, set on
// the driver's Config (no name registered with mysql.RegisterTLSConfig,
// which is global to the process). The user is the DSN's; the password is
// the DSN's, else --password, $SIMBA_PASSWORD or the config file's
// password-file. The DSN's password is never printed.

// defaultTablePrefix is the table prefix of a MySQL backend given no
// --prefix (the backend's default).
const defaultTablePrefix = "simba_"

// tablePrefixOf returns the MySQL table prefix a --prefix names: without
// the slashes at its ends, with an _ at its end.
func tablePrefixOf(prefix string) string {
	p := strings.Trim(prefix, "/")
	if p != "" && !strings.HasSuffix(p, "_") {
		p += "_"
	}
	return p
}

// mysqlPoolSize is the size of the pool the command makes (as mysql.New's).
const mysqlPoolSize = 16

// myBackend is a MySQL backend on a pool of the command's own, which Close
// closes after the backend.
type myBackend struct {
	*mysql.Backend
	db *sql.DB
}

func (b *myBackend) Close() error {
	err := b.Backend.Close()
	if cerr := b.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// mysqlConfig parses the DSN of t and applies the command's settings to
// it: the password (when the DSN has none), TLS, and the driver's logger.
// Its errors are one line, without the DSN's password.
func mysqlConfig(t target) (*gomysql.Config, error) {
	cfg, err := gomysql.ParseDSN(t.dsn)
	if err != nil {
		return nil, errors.New(mysqlDSNError(t.dsn, err))
	}
	if cfg.DBName == "" {
		return nil, errors.New("the MySQL DSN names no database: user@tcp(host:3306)/DATABASE")
	}
	if cfg.Passwd == "" && t.sec.password != "" {
		cfg.Passwd = t.sec.password
	}
	if t.sec.tls != nil {
		switch cfg.TLSConfig {
		case "", "true":
			cfg.TLS = t.sec.tls.Clone()
			// The driver checks the server's name against the DSN's host
			// when none is set (a Clone keeps it empty).
			cfg.TLSConfig = ""
		default:
			return nil, fmt.Errorf("the DSN's tls=%s and the TLS settings (--cacert, --cert, --key, --insecure-skip-tls-verify, or the config file's) disagree: drop tls= from the DSN, or the TLS settings", cfg.TLSConfig)
		}
	}
	cfg.Logger = driverLogger{t.logger()}
	return cfg, nil
}

// openMySQL opens the MySQL backend of t, on a pool that does not connect
// before the first Open or View.
func openMySQL(t target) (*myBackend, error) {
	cfg, err := mysqlConfig(t)
	if err != nil {
		return nil, err
	}
	mysql.NeedMultiStatements(cfg)
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, errors.New(redact("the MySQL DSN: "+err.Error(), mysqlDSNPasswords(t.dsn)))
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(mysqlPoolSize)
	db.SetMaxIdleConns(mysqlPoolSize)
	db.SetConnMaxIdleTime(5 * time.Minute)
	opts := []mysql.Option{mysql.WithLogger(t.logger())}
	if t.prefix != "" {
		opts = append(opts, mysql.WithTablePrefix(tablePrefixOf(t.prefix)))
	}
	b, err := mysql.NewFromDB(db, opts...)
	if err != nil {
		db.Close()
		if t.prefix != "" {
			return nil, fmt.Errorf("--prefix %q (for MySQL, the tables' prefix, with an _ at its end): %w", t.prefix, err)
		}
		return nil, err
	}
	return &myBackend{Backend: b, db: db}, nil
}

// driverLogger passes go-sql-driver/mysql's log lines (a connection found
// broken, say), which it prints on standard error by default, to the
// backend's logger, at debug level: the errors they speak of reach the
// command through the backend's calls.
type driverLogger struct{ l *slog.Logger }

func (d driverLogger) Print(v ...any) {
	d.l.Debug("go-sql-driver/mysql: " + strings.TrimSuffix(fmt.Sprint(v...), "\n"))
}

// mysqlDSNError returns the one-line message of a DSN that does not parse,
// without its password.
func mysqlDSNError(dsn string, err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	switch {
	case strings.Contains(msg, "unknown config name"):
		msg += " (tls= takes true, skip-verify, preferred or false; for a CA or a client certificate of your own, use --cacert, --cert and --key)"
	case strings.HasPrefix(msg, "invalid DSN"):
		msg += " (want user@tcp(host:3306)/database)"
	}
	return redact("the MySQL DSN does not parse: "+msg, mysqlDSNPasswords(dsn))
}

// mysqlDSNPasswords returns the password a DSN appears to hold, whether it
// parses or not, found as go-sql-driver/mysql finds it: between the first
// ':' and the last '@' before the last '/'.
func mysqlDSNPasswords(dsn string) []string {
	head := dsn
	if i := strings.LastIndexByte(dsn, '/'); i >= 0 {
		head = dsn[:i]
	}
	at := strings.LastIndexByte(head, '@')
	if at < 0 {
		return nil
	}
	if _, pw, ok := strings.Cut(head[:at], ":"); ok && pw != "" {
		return []string{pw}
	}
	return nil
}

// describeMySQLDSN names the server and database of a DSN for messages,
// user@host:port/database, without its password or other settings.
func describeMySQLDSN(dsn string) string {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "(a DSN that does not parse)"
	}
	return fmt.Sprintf("%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
}

// mysqlUser returns the user a DSN logs in as, or "".
func mysqlUser(dsn string) string {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return ""
	}
	return cfg.User
}

// MySQL's error numbers the messages tell apart.
const (
	myAccessDenied       = 1045 // ER_ACCESS_DENIED_ERROR: no such user, or a wrong password
	myDBAccessDenied     = 1044 // ER_DBACCESS_DENIED_ERROR
	myTableAccessDenied  = 1142 // ER_TABLEACCESS_DENIED_ERROR
	myColumnAccessDenied = 1143 // ER_COLUMNACCESS_DENIED_ERROR
	mySpecificAccess     = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR
)

// myRefusal returns the refusedError that err is if the MySQL server
// refused the TLS handshake, the login or a permission; else nil.
func myRefusal(t target, doing string, err error) error {
	if msg := tlsProblem(t.sec, err); msg != "" {
		return refusedf("%s: TLS handshake failed: %s", t, msg)
	}
	if errors.Is(err, gomysql.ErrNoTLS) {
		return refusedf("%s: the server does not serve TLS, which the DSN's tls= or the TLS settings (--cacert, --cert, --key, --insecure-skip-tls-verify) ask for", t)
	}
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return nil
	}
	user := mysqlUser(t.dsn)
	switch me.Number {
	case myAccessDenied:
		return refusedf("%s refused the login of user %s while %s: a wrong password, no such user for this host, or TLS or a client certificate that the user requires and the connection lacks (MySQL: %s): check the DSN's user and password, --password, $%s or the config file's password-file, and the TLS settings", t, user, doing, me.Message, envPassword)
	case myDBAccessDenied:
		return refusedf("%s refused user %s the database while %s (MySQL: %s)", t, user, doing, me.Message)
	case myTableAccessDenied, myColumnAccessDenied, mySpecificAccess:
		return refusedf("%s: user %s may not do this while %s (MySQL: %s): to show, it needs SELECT on the tables; to operate, also INSERT, UPDATE and DELETE (and CREATE, REFERENCES and DROP for the first use, which creates them)", t, user, doing, me.Message)
	}
	return nil
}

// settleMySQL checks the DSN of a MySQL target, and the TLS settings
// against it, before the command runs; label says where the DSN came from.
// It returns the DSN's password, to keep out of messages.
func settleMySQL(t target, label string) (string, error) {
	cfg, err := mysqlConfig(t)
	if err != nil {
		return "", configErrorf("%s: %s", label, redact(err.Error(), mysqlDSNPasswords(t.dsn)))
	}
	return cfg.Passwd, nil
}
