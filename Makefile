# quire's one gate. `make test` is what CI runs (through .ci/run); `make verify`
# adds formatting and lints. Everything builds in the release profile, once:
# tests, benchmarks, the local cluster and the images share the artifacts.

CARGO ?= cargo
BENCH_SECS ?= 5
FUZZ_SECS ?= 60
DATA ?= $(CURDIR)/data

.PHONY: check-model all build test test-deps python-client jepsen jepsen-negative ext4-powerloss jepsen-seeds verify fmt fmt-check clippy lint bench loadtest-build loadtest bench-rpc bench-bookie bench-metadata bench-client bench-failover bench-gateway bench-rereplicate bench-compaction bench-scale sim fuzz run images up down e2e-compose clean

all: build

build:
	$(CARGO) build --release --workspace --bins

# Every test: unit, property (decoders), in-process RPC/mTLS, and real
# multi-process tests. nextest where installed (per-test processes, parallel);
# cargo test otherwise. Then the load tooling (loadtest/, its own workspace)
# against a real cluster: its unit tests, every goose scenario briefly, and
# `make bench`'s pipeline at toy scale (loadtest/smoke.sh); schemathesis
# (loadtest/api/check.sh); the Python client: its drift check and pytest
# against a real cluster (clients/python/test.sh); deploy/k8s against
# Kubernetes' schemas (deploy/k8s/validate.sh); README's command lines and
# Python quickstart as written against make run's cluster
# (deploy/local/readme-check.sh). Last, the fault suite on a bounded
# schedule (needs root: network namespaces; docs/faults.md). First,
# test-deps installs what these need (as root) or says what is missing.
test: test-deps build loadtest-build
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --release --workspace --no-fail-fast; \
	else \
		$(CARGO) test --release --workspace --no-fail-fast; \
	fi
	$(CARGO) test --release --manifest-path loadtest/goose/Cargo.toml
	bash loadtest/smoke.sh
	bash loadtest/api/check.sh
	bash clients/python/test.sh
	bash deploy/k8s/validate.sh
	bash deploy/local/readme-check.sh
	target/release/quire-jepsen --seed $(JEPSEN_CI_SEED) --duration-secs $(JEPSEN_CI_SECS)
	bash faults/scripts/negative-control.sh
	bash faults/scripts/ext4-powerloss.sh
	EATMYDATA=1 bash faults/scripts/ext4-powerloss.sh

# What make test needs beyond the Rust toolchain (Debian's packages, kernel
# modules), installed as root, or named with the tests that need them.
test-deps:
	bash deploy/local/test-deps.sh

# The Python client's typed layer (clients/python/quire/_api): the gateway's
# OpenAPI document copied to clients/python/openapi.json (a gateway unit test
# fails while the copy differs), then openapi-python-client (pinned) over
# it. make test fails while the checked-in code is not what this writes.
python-client:
	QUIRE_BLESS=1 $(CARGO) test --release -p quire-gateway --bin quire-gateway the_python_clients_copy_of_the_document_is_current
	bash clients/python/generate.sh

fmt:
	$(CARGO) fmt --all
	$(CARGO) fmt --all --manifest-path loadtest/goose/Cargo.toml

fmt-check:
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt --all --manifest-path loadtest/goose/Cargo.toml -- --check

clippy:
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

lint: fmt-check clippy

verify: lint test

# The protocol model checker (shared/model, stateright) on configurations
# larger than make test's: the writer with two recoverers, a crash, a lost
# message, a bookie replacement, Qw 2 and 3. Depth first, one fingerprint
# per state; MODEL_PREEMPTIONS bounds the interleavings (parties switching
# while the one running could still act; empty: every interleaving) and
# MODEL_MAX_STATES each run (0: until exhausted); the report says when a
# bound cut it short. `make check-model PRE_FIX=1` checks the shell as it
# was before issue #19's fix and stops at the first violation. Then the log
# protocol (LedgerChaining): two writers taking the log over twice each
# (22.8 million states, 90 s; make test runs one takeover each with a trim
# and a crash), and a delete racing two writers' rollovers and takeovers
# (14.8 million states, 90 s; make test runs one writer).
MODEL_MAX_STATES ?= 50000000
MODEL_ENTRIES ?= 1
MODEL_PREEMPTIONS ?= 0
check-model:
	$(CARGO) run --release -p quire-model --bin quire-model -- --entries $(MODEL_ENTRIES) \
		--recoverers 2 --runs 1 --crashes 1 --timeouts 1 --replacements 1 \
		$(if $(MODEL_PREEMPTIONS),--preemptions $(MODEL_PREEMPTIONS)) \
		--max-states $(MODEL_MAX_STATES) $(if $(PRE_FIX),--pre-fix --first)
	$(if $(PRE_FIX),,$(CARGO) run --release -p quire-model --bin quire-model -- --log --log-takeovers 2 --log-trims 0 --log-crashes 0)
	$(if $(PRE_FIX),,$(CARGO) run --release -p quire-model --bin quire-model -- --log --log-appends 2 --log-rollover 1 --log-trims 0 --log-crashes 0 --log-deletes 1)
	$(if $(PRE_FIX),,$(CARGO) run --release -p quire-model --bin quire-model -- --log --log-appends 4 --log-batch 2 --log-trims 0)

# The protocol simulator over many seeds (make test runs 5000 and every seed
# that once failed): `make sim SEEDS=100000 START=0`.
SEEDS ?= 1000000
START ?= 0
sim:
	$(CARGO) run --release -p quire-client --bin quire-sim -- --seeds $(SEEDS) --start $(START)

# One run that regenerates docs/benchmarks.md and docs/bench/latency-throughput.svg:
# the disk's limits, quire through the client and HTTP, catch-up reads, NATS
# JetStream and etcd (../shared/bench), side by side. About 12 minutes, as root.
# `make bench SECS=5 PEERS=0` for a quick one without the peers.
bench: build
	SECS=$(or $(SECS),10) PEERS=$(or $(PEERS),1) bash loadtest/bench/run.sh

# The goose load generator (loadtest/goose, its own workspace: it pulls
# aws-lc-rs, which must not reach the services).
loadtest-build:
	$(CARGO) build --release --manifest-path loadtest/goose/Cargo.toml

# A goose scenario against a running gateway (make run, or make up):
# `make loadtest SCENARIO=mixed USERS=32 RUN_TIME=60s HOST=http://127.0.0.1:8080`.
SCENARIO ?= appendheavy
USERS ?= 16
RUN_TIME ?= 30s
HOST ?= http://127.0.0.1:8080
loadtest: loadtest-build
	loadtest/goose/target/release/quire-loadtest --host $(HOST) --scenarios $(SCENARIO) \
		--users $(USERS) --increase-rate $(USERS) --run-time $(RUN_TIME) --no-print-metrics

# RPC round trips over loopback (1 KiB requests): see docs/benchmarks.md.
bench-rpc:
	BENCH_SECS=$(BENCH_SECS) $(CARGO) bench -p quire-rpc --bench rpc

# One bookie process, pipelined 1 KiB adds over QUIC: see docs/benchmarks.md.
bench-bookie: build
	BENCH_SECS=$(BENCH_SECS) $(CARGO) bench -p quire-bookie --bench bookie

# Three bookies, E=3 Qw=3 Qa=2, 1 KiB adds through the client library, the
# NATS cases (writers:window): see docs/benchmarks.md.
bench-client: build
	BENCH_SECS=$(BENCH_SECS) $(CARGO) bench -p quire-client --bench client

# The metadata leader SIGKILLed under load, five times: election, the
# longest stretch without an acknowledged append, creations under way
# (docs/benchmarks.md, "Metadata failover").
bench-failover: build
	$(CARGO) bench -p quire-client --bench failover

# HTTP appends through the gateway (64 keep-alive connections) next to
# direct client appends, in one run: see docs/benchmarks.md.
bench-gateway: build
	BENCH_SECS=$(BENCH_SECS) $(CARGO) bench -p quire-gateway --bench http

# Re-replication MB/s, unthrottled and throttled: see docs/benchmarks.md.
bench-rereplicate: build
	$(CARGO) bench -p quire-replication-worker --bench rereplicate

# Add latency with compaction unthrottled, throttled and absent: see docs/benchmarks.md.
bench-compaction:
	BENCH_SECS=$(BENCH_SECS) $(CARGO) bench -p quire-storage --bench compaction

# Three metadata replicas, 64 clients doing CAS updates: see docs/benchmarks.md.
bench-metadata: build
	BENCH_SECS=$(BENCH_SECS) $(CARGO) bench -p quire-metadata --bench metadata

# Production size (issue #46): the metadata state machine alone at
# LEDGERS (1 000 000) ledgers (apply rate, memory, snapshot, install, a
# takeover's sweep); three real metadata replicas holding them (fill, a
# wiped follower, one down DOWN_SECS (600) under 1 000 creates/s with
# create + close latency, a full restart); one gateway holding OPEN
# (100 000) idle open ledgers (CPU, memory); one bookie holding OPEN open
# ledgers and an index of ENTRIES (10 000 000) entries (memory against
# its caches): docs/benchmarks.md, "Production size". About 40 minutes.
bench-scale: build
	BENCH_LEDGERS=$(or $(LEDGERS),1000000) $(CARGO) bench -p quire-metadata --bench scale
	$(CARGO) bench -p quire-metadata --bench log_apply
	BENCH_LEDGERS=$(or $(LEDGERS),1000000) BENCH_DOWN_SECS=$(or $(DOWN_SECS),600) $(CARGO) bench -p quire-metadata --bench catchup
	BENCH_LEDGERS=$(or $(OPEN),100000) $(CARGO) bench -p quire-gateway --bench idle
	BENCH_LEDGERS=$(or $(OPEN),100000) BENCH_ENTRIES=$(or $(ENTRIES),10000000) $(CARGO) bench -p quire-bookie --bench open_ledgers
	BENCH_LEDGERS=$(or $(OPEN),100000) $(CARGO) bench -p quire-storage --bench index_memory

# The fault suite (docs/faults.md): the whole cluster as processes in their
# own network namespaces (root), a seeded fault schedule (kills, partitions,
# one-way drops, slow disks, empty replacement bookies, bit flips, clock
# jumps), the history checked. `make jepsen SEED=7 DURATION=300`; make test
# runs the bounded schedule JEPSEN_CI_SEED for JEPSEN_CI_SECS.
SEED ?= 1
DURATION ?= 120
JEPSEN_CI_SEED ?= 98
JEPSEN_CI_SECS ?= 90
jepsen: build
	target/release/quire-jepsen --seed $(SEED) --duration-secs $(DURATION)

# The negative control: storage nodes under eatmydata (fsync a no-op) and a
# power cut of all of them; the run must fail (faults/scripts/negative-control.sh).
jepsen-negative: build
	bash faults/scripts/negative-control.sh

# A whole cluster on ext4 loop devices (commit=60), HTTP writers, a power cut
# of every filesystem at once (xfs_io shutdown without a log flush), remount,
# restart, every acknowledged creation, entry and close checked. As root.
# `make ext4-powerloss EATMYDATA=1` is its negative control (fsync a no-op):
# it passes only when the check finds acknowledged operations lost.
ext4-powerloss: build
	EATMYDATA=$(EATMYDATA) SECS=$(or $(SECS),20) bash faults/scripts/ext4-powerloss.sh

# Several seeds in a row, stopping at the first that breaks a guarantee:
# `make jepsen-seeds JEPSEN_SEEDS="1 2 3" DURATION=120` (issue #19's soak: 1-10).
JEPSEN_SEEDS ?= 1 2 3 4 5 6 7 8 9 10
jepsen-seeds: build
	for s in $(JEPSEN_SEEDS); do target/release/quire-jepsen --seed $$s --duration-secs $(DURATION) || exit 1; done

# Fuzz every decoder for FUZZ_SECS seconds each (installs cargo-fuzz if missing).
fuzz:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	cd fuzz && for t in decode_stream decode_frame log_entry log_metadata; do \
		mkdir -p corpus/$$t && cp -n corpus-seed/$$t/* corpus/$$t/ 2>/dev/null; \
		RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t corpus/$$t -- -max_total_time=$(FUZZ_SECS) || exit 1; \
	done

# The local cluster on this machine (see README.md).
run: build
	bash deploy/local/run.sh "$(DATA)"

# The docker compose stack (deploy/compose.yaml) on images built here, FROM
# scratch, with no registry. `make up` waits until every service is healthy;
# `make up OBSERVABILITY=1` adds Jaeger, Prometheus and Grafana (images you
# pull or load yourself).
COMPOSE = $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose) -p quire -f deploy/compose.yaml
images:
	deploy/docker/build-images.sh

up: images
	$(if $(OBSERVABILITY),QUIRE_OTLP_ENDPOINT=http://jaeger:4317) $(COMPOSE) $(if $(OBSERVABILITY),--profile observability) up -d
	@for i in $$(seq 120); do \
		if $(COMPOSE) ps | grep -q -e "unhealthy" -e "Exit [1-9]"; then $(COMPOSE) ps; exit 1; fi; \
		if curl -sf localhost:$${QUIRE_HTTP_PORT:-8080}/readyz >/dev/null; then echo "stack up: http://localhost:$${QUIRE_HTTP_PORT:-8080}/v1/ledgers"; exit 0; fi; \
		sleep 1; \
	done; echo "the gateway did not become ready"; exit 1

down:
	$(COMPOSE) --profile observability down -v

# The compose end-to-end test (.ci/run runs it when a Docker engine is present).
e2e-compose:
	bash deploy/compose-e2e.sh

clean:
	$(CARGO) clean
