package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend"
	simbamysql "github.com/simba-go/simba/backend/mysql"
)

// The MySQL part of the tool (-backend mysql): its flags are its own.
var (
	mysqlDSN    = flag.String("mysql", os.Getenv("SIMBA_MYSQL_DSN"), "with -backend mysql: the MySQL or MariaDB server's DSN, in go-sql-driver/mysql's format (a fresh database per run, dropped at the end)")
	mysqlShared = flag.Bool("mysql-shared", false, "with -backend mysql: one Backend (one pool, one bells connection) for every client of the run; by default each session gets a Backend of its own, as a client in a process of its own does")
	mysqlConns  = flag.Int("mysql-conns", 0, "with -backend mysql: the size of each Backend's pool, made from -mysql's DSN as it is and given to mysql.NewFromDB (0: mysql.New's own pool)")
)

// countedNet is the network name under which go-sql-driver/mysql dials
// through countedDial.
const countedNet = "simba-scale-counted"

var (
	registerOnce sync.Once
	// dialCounter is the counter of the connections dialled under
	// countedNet: one run (one counter) at a time.
	dialCounter struct {
		sync.Mutex
		cnt *counter
	}
)

// newMySQL returns a MySQL backend in a fresh database on the server of
// -mysql, whose statements cnt counts on the wire (see myCountedConn: each
// statement of a query of several counts one, a transaction's SET
// TRANSACTION ISOLATION LEVEL, START TRANSACTION and COMMIT included).
// Unless -mysql-shared, each session the clients open gets a
// mysql.Backend of its own. The close function drops the database.
func newMySQL(cfg config, cnt *counter) (backend.Backend, func(), error) {
	if *mysqlDSN == "" {
		return nil, nil, errors.New("-backend mysql needs -mysql or SIMBA_MYSQL_DSN")
	}
	mc, err := mysql.ParseDSN(*mysqlDSN)
	if err != nil {
		return nil, nil, fmt.Errorf("-mysql: %w", err)
	}
	if mc.Net != "tcp" {
		return nil, nil, fmt.Errorf("-mysql: network %q: want tcp", mc.Net)
	}
	admin, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		return nil, nil, err
	}
	db := fmt.Sprintf("scale_%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+db+"`"); err != nil {
		admin.Close()
		return nil, nil, err
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+db+"`")
		admin.Close()
	}
	registerOnce.Do(func() {
		mysql.RegisterDialContext(countedNet, func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			dialCounter.Lock()
			defer dialCounter.Unlock()
			return &myCountedConn{Conn: c, cnt: dialCounter.cnt}, nil
		})
	})
	dialCounter.Lock()
	dialCounter.cnt = cnt
	dialCounter.Unlock()
	if cfg.breakdown {
		cnt.prefix, cnt.kinds = "`simba_", map[string]int64{}
	}
	// MySQL cannot notify: a group member at rest also reads what its
	// watches follow every poll interval (1 s), about 7 statements a
	// second in all (-breakdown shows them).
	restPerClient = 10
	mc.Net, mc.DBName = countedNet, db
	if *mysqlShared {
		b, err := newMySQLBackend(mc)
		if err != nil {
			drop()
			return nil, nil, err
		}
		return b, func() { b.Close(); drop() }, nil
	}
	ps := &perSession{cfg: mc}
	return ps, func() { ps.Close(); drop() }, nil
}

// newMySQLBackend returns a backend on the server and database of cfg:
// mysql.New's, or with -mysql-conns, one on a pool of that size (closed
// with it).
func newMySQLBackend(cfg *mysql.Config) (backend.Backend, error) {
	if *mysqlConns <= 0 {
		return simbamysql.New(cfg.FormatDSN())
	}
	cfg = cfg.Clone()
	simbamysql.NeedMultiStatements(cfg)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(*mysqlConns)
	db.SetMaxIdleConns(*mysqlConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	b, err := simbamysql.NewFromDB(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &ownedPool{Backend: b, db: db}, nil
}

// ownedPool is a backend that closes its pool after itself.
type ownedPool struct {
	*simbamysql.Backend
	db *sql.DB
}

func (o *ownedPool) Close() error {
	err := o.Backend.Close()
	o.db.Close()
	return err
}

// perSession is a backend.Backend that opens each session on a
// mysql.Backend of its own (its own pool, its own bells connection and
// hub), as a client in a process of its own has; Close closes them all.
// A session's backend is closed with the others, when the run ends.
type perSession struct {
	cfg    *mysql.Config
	mu     sync.Mutex
	opened []backend.Backend
	closed bool
}

func (p *perSession) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	b, err := newMySQLBackend(p.cfg)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		b.Close()
		return nil, backend.ErrClosed
	}
	p.opened = append(p.opened, b)
	p.mu.Unlock()
	return b.Open(ctx, o)
}

func (p *perSession) Close() error {
	p.mu.Lock()
	p.closed = true
	opened := p.opened
	p.mu.Unlock()
	for _, b := range opened {
		b.Close()
	}
	return nil
}

// The commands of the MySQL client/server protocol that the counter tells
// apart.
const (
	comQuery       = 0x03
	comStmtPrepare = 0x16
	comStmtExecute = 0x17
)

// myCountedConn counts the statements a go-sql-driver/mysql connection
// sends: it reads the packets' headers as they are written (the driver
// writes a packet per call), and counts the command packets (sequence 0)
// that run statements: a COM_QUERY's statements, which the backend
// separates by ";\n" when it sends several in one query (a transaction
// of one round trip; an interpolated argument never holds a raw newline:
// the driver escapes it), and a COM_STMT_EXECUTE. With -breakdown it
// classifies each statement by its SQL: a COM_QUERY's own, a
// COM_STMT_EXECUTE's that of the connection's last COM_STMT_PREPARE.
type myCountedConn struct {
	net.Conn
	cnt      *counter
	skip     int    // bytes of the current packet still to come
	prepared string // the SQL of the last COM_STMT_PREPARE, with -breakdown
}

func (c *myCountedConn) Write(p []byte) (int, error) {
	c.scan(p)
	return c.Conn.Write(p)
}

// scan walks the packets in p.
func (c *myCountedConn) scan(p []byte) {
	for len(p) > 0 {
		if c.skip > 0 {
			n := min(c.skip, len(p))
			c.skip -= n
			p = p[n:]
			continue
		}
		if len(p) < 4 {
			return // a header split across writes: the driver never does it
		}
		size := int(p[0]) | int(p[1])<<8 | int(p[2])<<16
		payload := p[4:min(len(p), 4+size)]
		if p[3] == 0 && len(payload) > 0 {
			c.command(payload)
		}
		c.skip = size - len(payload)
		p = p[4+len(payload):]
	}
}

// command counts the command packet payload.
func (c *myCountedConn) command(payload []byte) {
	breakdown := c.cnt.prefix != ""
	switch payload[0] {
	case comQuery:
		text := strings.TrimRight(strings.TrimSpace(string(payload[1:])), ";")
		c.cnt.n.Add(int64(strings.Count(text, ";\n") + 1))
		if breakdown {
			for stmt := range strings.SplitSeq(text, ";\n") {
				c.cnt.classifySQL(stmt)
			}
		}
	case comStmtPrepare:
		if breakdown {
			c.prepared = string(payload[1:])
		}
	case comStmtExecute:
		c.cnt.n.Add(1)
		if breakdown {
			c.cnt.classifySQL(c.prepared)
		}
	}
}
