# make test: everything CI runs, on a fresh machine, over every Go module of
# the repository (scripts/modules.sh list: the root, each backend, the
# fences, the test-server helpers, the command, the examples, the tests).
# It starts the servers the tests need (ZooKeeper, PostgreSQL, Redis,
# MariaDB, and Chromium for the console's browser tests, installed from
# Debian's packages when missing; SQLite is embedded in the tests), builds
# the etcd that the etcd tests start as a process of their own (from
# tools/etcd) and the kube-apiserver that the Kubernetes tests start (from
# tools/kube), both cached outside the checkout (the first kube-apiserver
# build takes 10 to 15 minutes), then runs `make vet` and `make unit`.
GO ?= go

# The scripts that give the tests their servers, each running the next.
SERVERS = ./scripts/with-etcd.sh ./scripts/with-kube-apiserver.sh ./scripts/with-zookeeper.sh ./scripts/with-postgres-redis.sh ./scripts/with-mariadb.sh

.PHONY: test vet unit chaos mutate

test:
	$(SERVERS) ./scripts/with-chromium.sh $(MAKE) --no-print-directory vet unit

# vet: no tracked file over 1 MB (scripts/check-sizes.sh); every module tidy,
# one go directive, one version of simba's modules, go.work as the modules
# make it, no replace directive (scripts/modules.sh check); go vet in every
# module. All three run, and each failure names the file or module and why.
vet:
	@failed=""; \
	./scripts/check-sizes.sh || failed="$$failed check-sizes"; \
	GO=$(GO) ./scripts/modules.sh check || failed="$$failed modules-check"; \
	GO=$(GO) ./scripts/modules.sh vet || failed="$$failed go-vet"; \
	if [ -n "$$failed" ]; then echo "make vet: failed:$$failed (see above)" >&2; exit 1; fi

# unit: go test -race over the packages of every module, in one go test run
# (scripts/race-tests.sh).
unit:
	GO=$(GO) ./scripts/race-tests.sh

# The long real-server fault run (docs/RELIABILITY.md): a 5-minute fault
# schedule on a 3-member etcd cluster, on ZooKeeper, on PostgreSQL, on
# MariaDB (backend/mysql) and on a kube-apiserver, then the controls. The run
# is in the tests module (tests/chaos).
# SIMBA_CHAOS_DURATION and SIMBA_CHAOS_SEED change the length and the seed.
chaos:
	$(SERVERS) $(GO) test -race -tags simba_plant -count=1 -timeout=80m -v -run '^(TestEtcd|TestZooKeeper|TestPostgres|TestMySQL|TestKubernetes)$$' github.com/simba-go/simba/tests/chaos -chaos.duration=$${SIMBA_CHAOS_DURATION:-5m}

# Mutation testing of the safety-critical code (docs/RELIABILITY.md,
# "Mutation testing"): each mutant is one small bug planted in a copy of a
# file and tested with the package's own tests on real servers. Every
# mutant takes hours; MUTATE_FLAGS='-sample 6 -j 2' draws six per target,
# '-list' counts them. Not part of CI.
mutate:
	$(SERVERS) $(GO) run ./internal/mutate $(MUTATE_FLAGS)
