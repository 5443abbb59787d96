package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// schemaVersion is the version of the tables this code makes and knows.
// Version 2 added sessions.reg_floor and candidacies.reg (see
// queue.Register); tables of version 1 are upgraded on first use
// (migrate).
const schemaVersion = 2

// tables holds the quoted names of the backend's tables.
type tables struct {
	prefix                                                    string
	meta, sessions, leaseNames, candidacies, members, records string
}

func newTables(prefix string) tables {
	q := func(name string) string { return "`" + prefix + name + "`" }
	return tables{
		prefix: prefix,
		meta:   q("meta"), sessions: q("sessions"), leaseNames: q("lease_names"),
		candidacies: q("candidacies"), members: q("members"), records: q("records"),
	}
}

// names returns the tables' unquoted names, in the order they are created.
func (t tables) names() []string {
	var out []string
	for _, n := range []string{"meta", "sessions", "lease_names", "candidacies", "members", "records"} {
		out = append(out, t.prefix+n)
	}
	return out
}

// ddl is the SQL that creates the tables, one statement per table, then
// the meta rows.
func (t tables) ddl() []string {
	const ascii = "CHARACTER SET ascii COLLATE ascii_bin"
	fk := func(name string) string {
		return "CONSTRAINT `" + t.prefix + name + "_session` FOREIGN KEY (session) REFERENCES " + t.sessions + " (id) ON DELETE CASCADE"
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t.meta + ` (
	k   VARCHAR(32) ` + ascii + ` NOT NULL PRIMARY KEY,
	v   BIGINT NOT NULL,
	srv BIGINT NOT NULL
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + t.sessions + ` (
	id         BIGINT NOT NULL PRIMARY KEY,
	ttl_us     BIGINT NOT NULL CHECK (ttl_us > 0),
	expires_us BIGINT NOT NULL,
	reg_floor  BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + t.leaseNames + ` (
	name          VARCHAR(128) ` + ascii + ` NOT NULL PRIMARY KEY,
	last          BIGINT NOT NULL CHECK (last > 0),
	settled_epoch BIGINT NOT NULL
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + t.candidacies + ` (
	name    VARCHAR(128) ` + ascii + ` NOT NULL,
	token   BIGINT NOT NULL CHECK (token > 0),
	session BIGINT NOT NULL,
	reg     BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (name, token),
	KEY session (session, name),
	` + fk("candidacies") + `
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + t.members + ` (
	grp     VARCHAR(128) ` + ascii + ` NOT NULL,
	session BIGINT NOT NULL,
	id      VARBINARY(1024) NOT NULL,
	data    VARBINARY(1024) NOT NULL,
	PRIMARY KEY (grp, session),
	KEY session (session),
	` + fk("members") + `
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + t.records + ` (
	rkey    VARCHAR(512) ` + ascii + ` NOT NULL PRIMARY KEY,
	value   MEDIUMBLOB NOT NULL CHECK (LENGTH(value) <= 65536),
	version BIGINT NOT NULL CHECK (version > 0),
	token   BIGINT NOT NULL CHECK (token >= 0),
	deleted BOOLEAN NOT NULL
) ENGINE=InnoDB`,
		`INSERT IGNORE INTO ` + t.meta + ` (k, v, srv) VALUES ('version', ` + fmt.Sprint(schemaVersion) + `, 0), ('epoch', 1, @@server_id)`,
	}
}

// columns are the columns of each table (by its name without the
// prefix), as information_schema.COLUMNS lists them: name and data type.
var columns = map[string][]string{
	"meta":        {"k varchar", "v bigint", "srv bigint"},
	"sessions":    {"id bigint", "ttl_us bigint", "expires_us bigint", "reg_floor bigint"},
	"lease_names": {"name varchar", "last bigint", "settled_epoch bigint"},
	"candidacies": {"name varchar", "token bigint", "session bigint", "reg bigint"},
	"members":     {"grp varchar", "session bigint", "id varbinary", "data varbinary"},
	"records":     {"rkey varchar", "value mediumblob", "version bigint", "token bigint", "deleted tinyint"},
}

// SchemaSQL returns the SQL that creates the tables of prefix (the one
// given to [WithTablePrefix]; "" means "simba_"), for a DBA who applies
// it by hand: the statements, each ending with ";".
func SchemaSQL(prefix string) (string, error) {
	if prefix == "" {
		prefix = "simba_"
	}
	if !validPrefix.MatchString(prefix) {
		return "", fmt.Errorf("simba/mysql: table prefix %q: want 1-40 characters of a-z 0-9 _, starting with a letter", prefix)
	}
	return strings.Join(newTables(prefix).ddl(), ";\n") + ";\n", nil
}

// schemaTimeout bounds the wait for another client's creation of the
// tables.
const schemaTimeout = 30

// ensureSchema creates the tables unless they exist, under a named lock
// so that clients starting together do not race, and checks them: the
// version, the engine, the columns. MySQL's DDL commits as it goes, so a
// creation that fails drops the tables it created.
func (b *Backend) ensureSchema(ctx context.Context) error {
	err := b.onConn(ctx, func(conn *sql.Conn) error {
		lock := lockName("schema", b.dbName+"\x00"+b.prefix)
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", lock, schemaTimeout).Scan(&got); err != nil {
			return err
		}
		if !got.Valid || got.Int64 != 1 {
			return fmt.Errorf("waited %ds for another client creating the tables (named lock %s)", schemaTimeout, lock)
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, err := conn.ExecContext(rctx, "DO RELEASE_LOCK(?)", lock); err != nil {
				dropConn(conn) // never back in the pool with the lock
			}
		}()
		had, err := b.existing(ctx, conn)
		if err != nil {
			return err
		}
		if len(had) < len(b.t.names()) {
			if err := b.create(ctx, conn, had); err != nil {
				return err
			}
		}
		if err := b.migrate(ctx, conn); err != nil {
			return err
		}
		return b.checkSchema(ctx, conn)
	})
	if err != nil {
		var se *schemaError
		if errors.As(err, &se) {
			return err
		}
		return b.connErr("preparing the tables", err)
	}
	return nil
}

// schemaError is a schema this code cannot use; its message says why.
type schemaError struct{ msg string }

func (e *schemaError) Error() string { return e.msg }

// existing returns which of the backend's tables exist, by name.
func (b *Backend) existing(ctx context.Context, conn *sql.Conn) (map[string]string, error) {
	rows, err := conn.QueryContext(ctx, `SELECT TABLE_NAME, COALESCE(ENGINE, '') FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?, ?, ?, ?, ?)`, anys(b.t.names())...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	had := map[string]string{}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			return nil, err
		}
		had[name] = engine
	}
	return had, rows.Err()
}

// create creates the missing tables; on a failure it drops those it
// created, children first.
func (b *Backend) create(ctx context.Context, conn *sql.Conn, had map[string]string) error {
	var made []string
	names := b.t.names()
	ddl := b.t.ddl()
	for i, stmt := range ddl {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			for _, name := range slices.Backward(made) {
				_, _ = conn.ExecContext(cctx, "DROP TABLE IF EXISTS `"+name+"`")
			}
			what := "inserting the meta rows"
			if i < len(names) {
				what = "creating table " + names[i]
			}
			return &schemaError{fmt.Sprintf("simba/mysql: %s: %v (nothing of simba's was left behind: the tables this call created were dropped)", what, b.connErr(what, err))}
		}
		if i < len(names) {
			if _, ok := had[names[i]]; !ok {
				made = append(made, names[i])
			}
		}
	}
	b.log.Info("simba/mysql: created the tables", "prefix", b.prefix, "tables", made)
	return nil
}

// migrations are the columns that version 2 added, each with its
// table's short name and its definition.
var migrations = []struct{ table, column, def string }{
	{"sessions", "reg_floor", "BIGINT NOT NULL DEFAULT 0"},
	{"candidacies", "reg", "BIGINT NOT NULL DEFAULT 0"},
}

// migrate upgrades tables of version 1 to version 2, under the schema's
// named lock: it adds the columns that are missing (a migration cut
// short is taken up where it stopped: MySQL's DDL commits as it goes),
// then sets the version. A client of version 1 still running keeps
// working (the new columns have defaults); a new one of version 1 refuses
// the tables.
func (b *Backend) migrate(ctx context.Context, conn *sql.Conn) error {
	var version int64
	if err := conn.QueryRowContext(ctx, "SELECT v FROM "+b.t.meta+" WHERE k = 'version'").Scan(&version); err != nil || version != 1 {
		return nil // checkSchema says what is wrong, if anything
	}
	for _, m := range migrations {
		table := b.prefix + m.table
		var n int
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?`, table, m.column).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if _, err := conn.ExecContext(ctx, "ALTER TABLE `"+table+"` ADD COLUMN "+m.column+" "+m.def); err != nil {
			return &schemaError{fmt.Sprintf("simba/mysql: upgrading the tables %s* to version 2: adding %s.%s: %v", b.prefix, table, m.column, b.connErr("altering "+table, err))}
		}
	}
	if _, err := conn.ExecContext(ctx, "UPDATE "+b.t.meta+" SET v = 2 WHERE k = 'version' AND v = 1"); err != nil {
		return err
	}
	b.log.Info("simba/mysql: upgraded the tables to version 2", "prefix", b.prefix)
	return nil
}

// checkSchema checks the tables: InnoDB, the version in the meta table,
// the columns.
func (b *Backend) checkSchema(ctx context.Context, conn *sql.Conn) error {
	had, err := b.existing(ctx, conn)
	if err != nil {
		return err
	}
	for _, name := range b.t.names() {
		engine, ok := had[name]
		switch {
		case !ok:
			return &schemaError{fmt.Sprintf("simba/mysql: table %s is missing (the others exist: apply SchemaSQL's statements, or drop them all and let the backend create them)", name)}
		case !strings.EqualFold(engine, "InnoDB"):
			return &schemaError{fmt.Sprintf("simba/mysql: table %s uses the %s engine: the backend needs InnoDB (transactions, row locks, foreign keys): ALTER TABLE %s ENGINE=InnoDB", name, engine, name)}
		}
	}
	var version int64
	err = conn.QueryRowContext(ctx, "SELECT v FROM "+b.t.meta+" WHERE k = 'version'").Scan(&version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return &schemaError{fmt.Sprintf("simba/mysql: table %smeta has no version row", b.prefix)}
	case err != nil:
		return err
	case version > schemaVersion:
		return &schemaError{fmt.Sprintf("simba/mysql: the tables %s* are version %d, this code knows up to %d: upgrade simba", b.prefix, version, schemaVersion)}
	case version < 1:
		return &schemaError{fmt.Sprintf("simba/mysql: the tables %s* say version %d", b.prefix, version)}
	}
	rows, err := conn.QueryContext(ctx, `SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?, ?, ?, ?, ?) ORDER BY TABLE_NAME, ORDINAL_POSITION`, anys(b.t.names())...)
	if err != nil {
		return err
	}
	defer rows.Close()
	got := map[string][]string{}
	for rows.Next() {
		var table, col, typ string
		if err := rows.Scan(&table, &col, &typ); err != nil {
			return err
		}
		short := strings.TrimPrefix(table, b.prefix)
		got[short] = append(got[short], col+" "+strings.ToLower(typ))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for short, want := range columns {
		if !slices.Equal(got[short], want) {
			return &schemaError{fmt.Sprintf("simba/mysql: table %s%s has columns %v, want %v (altered by hand? see SchemaSQL)", b.prefix, short, got[short], want)}
		}
	}
	var epoch int64
	if err := conn.QueryRowContext(ctx, "SELECT v FROM "+b.t.meta+" WHERE k = 'epoch'").Scan(&epoch); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return &schemaError{fmt.Sprintf("simba/mysql: table %smeta has no epoch row", b.prefix)}
		}
		return err
	}
	return nil
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
