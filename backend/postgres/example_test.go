package postgres_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
)

// A backend on a DSN, in the schema "simba" (created on first use): a
// session holds a lease and writes a record fenced by its token.
func Example() {
	b, err := postgres.New("postgres://simba@db.example:5432/app?sslmode=verify-full", postgres.WithSchema("simba"))
	if err != nil {
		log.Fatal(err) // the DSN does not parse
	}
	defer b.Close()
	ctx := context.Background()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err) // unreachable, login refused, schema not creatable...
	}
	defer s.Close(ctx)
	l, err := s.Acquire(ctx, "billing.leader")
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.(backend.Records).PutRecord(ctx, "status/billing", []byte("running"),
		backend.Condition{Lease: l.Name(), Token: l.Token()})
	fmt.Println(err)
}
