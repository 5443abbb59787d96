package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
)

// newPostgres returns a PostgreSQL backend in a fresh schema on the pool of
// cfg.pgDSN, whose statements cnt counts (each statement of a batch, and a
// transaction's BEGIN and COMMIT, count one). The close function drops the
// schema.
func newPostgres(cfg config, cnt *counter) (backend.Backend, func(), error) {
	if cfg.pgDSN == "" {
		return nil, nil, errors.New("-backend postgres needs -pg or SIMBA_PG_DSN")
	}
	pc, err := pgxpool.ParseConfig(cfg.pgDSN)
	if err != nil {
		return nil, nil, fmt.Errorf("-pg: %w", err)
	}
	schema := fmt.Sprintf("scale_%d", time.Now().UnixNano())
	if cfg.breakdown {
		cnt.prefix, cnt.kinds = pgx.Identifier{schema}.Sanitize()+".", map[string]int64{}
	}
	pc.ConnConfig.Tracer = &pgCounter{cnt: cnt}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, nil, err
	}
	b, err := postgres.NewFromPool(pool, postgres.WithSchema(schema))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return b, func() {
		b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}, nil
}

// pgCounter is a pgx tracer that counts the statements sent to the server,
// and with -breakdown, classifies them.
type pgCounter struct{ cnt *counter }

func (p *pgCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	p.cnt.n.Add(1)
	p.cnt.classifySQL(d.SQL)
	return ctx
}

func (p *pgCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (p *pgCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (p *pgCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	p.cnt.n.Add(1)
	p.cnt.classifySQL(d.SQL)
}

func (p *pgCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// classifySQL counts a statement by its first word and the first table of
// the schema it names ("UPDATE sessions", "WITH candidacies", "begin").
func (cnt *counter) classifySQL(sql string) {
	if cnt.prefix == "" {
		return
	}
	kind, _, _ := strings.Cut(strings.TrimSpace(sql), " ")
	if _, rest, ok := strings.Cut(sql, cnt.prefix); ok {
		end := strings.IndexFunc(rest, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') })
		if end < 0 {
			end = len(rest)
		}
		kind += " " + rest[:end]
	}
	cnt.mu.Lock()
	cnt.kinds[kind]++
	cnt.mu.Unlock()
}
