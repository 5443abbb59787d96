package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// schemaVersion is the version of the schema this code creates and knows.
// Version 2 added sessions.reg_floor and candidacies.reg (see
// queue.Register); a schema of version 1 is upgraded on first use
// (migrateSQL).
const schemaVersion = 2

// schemaSQL is the schema of version 2, with %[1]s the quoted schema name
// and %[2]s the NOTIFY channel as a literal. It is also in the package
// documentation, for DBAs who apply it by hand.
const schemaSQL = `
CREATE SCHEMA IF NOT EXISTS %[1]s;
CREATE TABLE %[1]s.meta (
	key   text COLLATE "C" PRIMARY KEY,
	value bigint NOT NULL
);
CREATE SEQUENCE %[1]s.session_ids;
CREATE TABLE %[1]s.sessions (
	id         bigint PRIMARY KEY DEFAULT nextval('%[1]s.session_ids'),
	ttl        interval NOT NULL CHECK (ttl > interval '0'),
	expires_at timestamptz NOT NULL,
	reg_floor  bigint NOT NULL DEFAULT 0
);
CREATE TABLE %[1]s.lease_names (
	name text COLLATE "C" PRIMARY KEY,
	last bigint NOT NULL CHECK (last > 0)
);
CREATE TABLE %[1]s.candidacies (
	name    text COLLATE "C" NOT NULL,
	token   bigint NOT NULL CHECK (token > 0),
	session bigint NOT NULL REFERENCES %[1]s.sessions (id) ON DELETE CASCADE,
	reg     bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (name, token)
);
CREATE INDEX candidacies_session ON %[1]s.candidacies (session);
CREATE TABLE %[1]s.members (
	grp     text COLLATE "C" NOT NULL,
	session bigint NOT NULL REFERENCES %[1]s.sessions (id) ON DELETE CASCADE,
	id      text NOT NULL,
	data    bytea NOT NULL CHECK (octet_length(data) <= 1024),
	PRIMARY KEY (grp, session)
);
CREATE INDEX members_session ON %[1]s.members (session);
CREATE SEQUENCE %[1]s.record_versions;
CREATE TABLE %[1]s.records (
	key     text COLLATE "C" PRIMARY KEY,
	value   bytea NOT NULL CHECK (octet_length(value) <= 65536),
	version bigint NOT NULL CHECK (version > 0),
	token   bigint NOT NULL CHECK (token >= 0)
);
CREATE FUNCTION %[1]s.notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
	IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
	PERFORM pg_notify(TG_ARGV[0], TG_ARGV[1] || ' ' || (to_jsonb(r) ->> TG_ARGV[2]));
	RETURN NULL;
END $$;
CREATE TRIGGER candidacies_notify AFTER INSERT OR UPDATE OR DELETE ON %[1]s.candidacies
	FOR EACH ROW EXECUTE FUNCTION %[1]s.notify(%[2]s, 'c', 'name');
CREATE TRIGGER members_notify AFTER INSERT OR UPDATE OR DELETE ON %[1]s.members
	FOR EACH ROW EXECUTE FUNCTION %[1]s.notify(%[2]s, 'm', 'grp');
CREATE TRIGGER records_notify AFTER INSERT OR UPDATE OR DELETE ON %[1]s.records
	FOR EACH ROW EXECUTE FUNCTION %[1]s.notify(%[2]s, 'r', 'key');
INSERT INTO %[1]s.meta (key, value) VALUES ('version', 2);
`

// migrateSQL upgrades a schema of version 1 to version 2, with %[1]s the
// quoted schema name: the registrations' numbers (see queue.Register). A
// client of version 1 still running keeps working (the columns have
// defaults); a new one refuses the schema.
const migrateSQL = `
ALTER TABLE %[1]s.sessions ADD COLUMN IF NOT EXISTS reg_floor bigint NOT NULL DEFAULT 0;
ALTER TABLE %[1]s.candidacies ADD COLUMN IF NOT EXISTS reg bigint NOT NULL DEFAULT 0;
UPDATE %[1]s.meta SET value = 2 WHERE key = 'version' AND value = 1;
`

// wantColumns are the columns of each table, "name type", that the code
// reads and writes: a table altered by hand is refused (see checkTables).
var wantColumns = map[string][]string{
	"meta":        {"key text", "value bigint"},
	"sessions":    {"id bigint", "ttl interval", "expires_at timestamp with time zone", "reg_floor bigint"},
	"lease_names": {"name text", "last bigint"},
	"candidacies": {"name text", "token bigint", "session bigint", "reg bigint"},
	"members":     {"grp text", "session bigint", "id text", "data bytea"},
	"records":     {"key text", "value bytea", "version bigint", "token bigint"},
}

// SchemaSQL returns the SQL that creates the backend's tables in schema
// (version 2), for DBAs who apply migrations by hand: the same the backend
// runs on first use when the schema has no tables yet.
func SchemaSQL(schema string) string {
	return fmt.Sprintf(schemaSQL, pgx.Identifier{schema}.Sanitize(), quoteLiteral(channelName(schema)))
}

// channelName is the NOTIFY channel of the backends of schema.
func channelName(schema string) string { return "simba." + schema }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ensureSchema creates the schema's tables if they do not exist, in one
// transaction under a transaction-level advisory lock (two clients
// starting together do not race; a failure leaves nothing behind), and
// checks the version row and the tables' columns.
func (b *Backend) ensureSchema(ctx context.Context) error {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return b.connErr("connecting", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('simba schema ' || $1, 0))", b.schema); err != nil {
		return b.connErr("locking the schema's creation", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", b.q+".meta").Scan(&exists); err != nil {
		return b.connErr("reading the schema", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, SchemaSQL(b.schema)); err != nil {
			return fmt.Errorf("simba/postgres: creating the tables in schema %q: %w", b.schema, describe(err))
		}
	}
	var version int64
	if err := tx.QueryRow(ctx, "SELECT value FROM "+b.q+".meta WHERE key = 'version'").Scan(&version); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("simba/postgres: schema %q has no version row in its meta table: not a schema of this backend, or altered by hand", b.schema)
		}
		return fmt.Errorf("simba/postgres: reading the version of schema %q: %w", b.schema, describe(err))
	}
	if version > schemaVersion {
		return fmt.Errorf("simba/postgres: schema %q is version %d, this code knows up to %d", b.schema, version, schemaVersion)
	}
	if version < 1 {
		return fmt.Errorf("simba/postgres: schema %q has version %d: not a version this backend wrote", b.schema, version)
	}
	if version == 1 {
		if _, err := tx.Exec(ctx, fmt.Sprintf(migrateSQL, b.q)); err != nil {
			return fmt.Errorf("simba/postgres: upgrading schema %q to version 2: %w", b.schema, describe(err))
		}
		b.log.Info("simba/postgres: upgraded the schema to version 2", "schema", b.schema)
	}
	if err := checkTables(ctx, tx, b.schema); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return b.connErr("creating the schema", err)
	}
	return nil
}

// checkTables compares the columns of the schema's tables with
// wantColumns.
func checkTables(ctx context.Context, tx pgx.Tx, schema string) error {
	rows, err := tx.Query(ctx, `SELECT table_name, column_name || ' ' || data_type FROM information_schema.columns WHERE table_schema = $1`, schema)
	if err != nil {
		return fmt.Errorf("simba/postgres: reading the columns of schema %q: %w", schema, describe(err))
	}
	got := map[string][]string{}
	for rows.Next() {
		var table, col string
		if err := rows.Scan(&table, &col); err != nil {
			rows.Close()
			return fmt.Errorf("simba/postgres: reading the columns of schema %q: %w", schema, err)
		}
		got[table] = append(got[table], col)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("simba/postgres: reading the columns of schema %q: %w", schema, describe(err))
	}
	for _, table := range []string{"meta", "sessions", "lease_names", "candidacies", "members", "records"} {
		want := slices.Sorted(slices.Values(wantColumns[table]))
		have := slices.Sorted(slices.Values(got[table]))
		if !slices.Equal(want, have) {
			if len(have) == 0 {
				return fmt.Errorf("simba/postgres: schema %q has no table %s (altered by hand?): want columns %s", schema, table, strings.Join(want, ", "))
			}
			return fmt.Errorf("simba/postgres: table %s.%s was altered: columns %s, want %s", schema, table, strings.Join(have, ", "), strings.Join(want, ", "))
		}
	}
	return nil
}

// describe adds the server's detail and hint to a PostgreSQL error.
func describe(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.Detail != "" {
			msg += " (" + pe.Detail + ")"
		}
		if pe.Hint != "" {
			msg += "; hint: " + pe.Hint
		}
		if pe.Code == "26000" || pe.Code == "42P05" { // pgx's cached prepared statement missing, or there already
			msg += "; behind a pooler in transaction mode (PgBouncer before 1.21), set default_query_exec_mode=exec in the DSN"
		}
		return &describedErr{msg: fmt.Sprintf("%s [SQLSTATE %s]", msg, pe.Code), err: err}
	}
	return err
}

// describedErr is a server's error with its detail, wrapping it.
type describedErr struct {
	msg string
	err error
}

func (e *describedErr) Error() string { return e.msg }
func (e *describedErr) Unwrap() error { return e.err }
