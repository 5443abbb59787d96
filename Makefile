# make test: everything CI runs, on a fresh machine. It starts the servers the
# tests need (ZooKeeper, PostgreSQL, Redis, and Chromium for the console's
# browser tests, installed from Debian's packages when missing; etcd and SQLite
# are embedded in the tests), then runs go vet and the race-enabled tests.
GO ?= go

.PHONY: test vet unit

test:
	./scripts/with-zookeeper.sh ./scripts/with-postgres-redis.sh ./scripts/with-chromium.sh $(MAKE) --no-print-directory vet unit

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race ./...

