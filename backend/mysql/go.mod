module github.com/simba-go/simba/backend/mysql

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/simba-go/simba v0.0.0-00010101000000-000000000000
	github.com/simba-go/simba/internal/mytest v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
)

require filippo.io/edwards25519 v1.2.0 // indirect
