# make test: everything CI runs, on a fresh machine. It starts the servers the
# tests need (ZooKeeper, PostgreSQL, Redis, and Chromium for the console's
# browser tests, installed from Debian's packages when missing; etcd and SQLite
# are embedded in the tests), builds the kube-apiserver that the Kubernetes
# tests start (from tools/kube, cached outside the checkout: the first build
# takes 10 to 15 minutes), then runs go vet and the race-enabled tests.
GO ?= go

.PHONY: test vet unit chaos mutate

test:
	./scripts/with-kube-apiserver.sh ./scripts/with-zookeeper.sh ./scripts/with-postgres-redis.sh ./scripts/with-chromium.sh $(MAKE) --no-print-directory vet unit

# vet also fails when go.mod or go.sum is not tidy, printing what tidy would
# change.
vet:
	@$(GO) mod tidy -diff || { echo "go.mod is not tidy: run go mod tidy" >&2; exit 1; }
	$(GO) vet ./...

unit:
	GO=$(GO) ./scripts/race-tests.sh

# The long real-server fault run (docs/RELIABILITY.md): a 5-minute fault
# schedule on a 3-member etcd cluster, on ZooKeeper, on PostgreSQL and on a
# kube-apiserver, then the controls.
# SIMBA_CHAOS_DURATION and SIMBA_CHAOS_SEED change the length and the seed.
chaos:
	./scripts/with-kube-apiserver.sh ./scripts/with-zookeeper.sh ./scripts/with-postgres-redis.sh $(GO) test -race -count=1 -timeout=80m -v -run '^(TestEtcd|TestZooKeeper|TestPostgres|TestKubernetes)$$' ./internal/chaos/ -chaos.duration=$${SIMBA_CHAOS_DURATION:-5m}

# Mutation testing of the safety-critical code (docs/RELIABILITY.md,
# "Mutation testing"): each mutant is one small bug planted in a copy of a
# file and tested with the package's own tests on real servers. Every
# mutant takes hours; MUTATE_FLAGS='-sample 6 -j 2' draws six per target,
# '-list' counts them. Not part of CI.
mutate:
	./scripts/with-kube-apiserver.sh ./scripts/with-zookeeper.sh ./scripts/with-postgres-redis.sh $(GO) run ./internal/mutate $(MUTATE_FLAGS)
