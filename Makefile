# soniq-sidecar — see README.md. `make test` is what CI runs (through .ci/run).
GO       ?= go
BIN      ?= bin/soniq-sidecar
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
PYTHON   ?= python3
# The project's virtualenv, made by deps-python from $(PYTHON): the Python tests, the
# Go tests' Python handlers and the benchmarks run on its interpreter (its bin/ first
# on PATH, so their `python3` is the venv's), never pip-installing into the system's.
VENV     ?= .venv
VENV_PYTHON := $(VENV)/bin/python
ON_VENV  := PATH="$(abspath $(VENV))/bin:$$PATH"
# The plain (non-race) Go builds of make test's parts (vet, staticcheck's loading of the
# packages, the chaos and bench programs, the pod tests) in the release binary's configuration
# (cgo off, -trimpath, as make build): they then find every package make build compiled in the
# build cache instead of compiling all of it, SQLite driver included, once more in another
# configuration: on a cold cache, after make build (125 CPU-seconds), go vet took 41 CPU-seconds
# so and 151 in go's default configuration. The race build (make test-go) is its own regardless.
PLAIN_GO := env CGO_ENABLED=0 GOFLAGS="-trimpath $$GOFLAGS"

.PHONY: dist all build images test-pod docker-steps docker-steps-examples cross-build test test-go test-go-compile test-python test-node test-node-client deps-node-client test-prometheus lint vet fmt-check tidy-check staticcheck demo demo-python demo-node bench bench-smoke chaos chaos-smoke clean

all: build

# A static, cgo-free binary: the same command the Dockerfile runs.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/soniq-sidecar

# What the Dockerfile does, without a Docker engine: it must build with `RUN make build`
# on golang:1.26 (the default of its GO_IMAGE argument) into a non-root image; that build must give a static binary (no ELF
# INTERP header, i.e. no dynamic loader; cgo off).
docker-steps: build
	@grep -qx 'ARG GO_IMAGE=golang:1.26' Dockerfile && grep -qx 'FROM $${GO_IMAGE} AS build' Dockerfile \
		|| { echo "docker-steps: Dockerfile must build FROM \$${GO_IMAGE} AS build, GO_IMAGE defaulting to golang:1.26"; exit 1; }
	@grep -qx 'RUN make build' Dockerfile || { echo "docker-steps: Dockerfile must build with 'RUN make build'"; exit 1; }
	@grep -qE '^USER (nonroot|[1-9][0-9]*)' Dockerfile || { echo "docker-steps: Dockerfile must set a non-root USER"; exit 1; }
	@command -v readelf >/dev/null || { echo "docker-steps: readelf (binutils) is required"; exit 1; }
	@if readelf -lW $(BIN) | grep -q INTERP; then echo "docker-steps: $(BIN) is dynamically linked:"; readelf -lW $(BIN) | grep -A1 INTERP; exit 1; fi
	@$(GO) version -m $(BIN) | grep -q 'CGO_ENABLED=0' || { echo "docker-steps: $(BIN) was built with cgo"; exit 1; }
	@echo "docker-steps: $(BIN) is static, cgo-free; Dockerfile builds it with make build as non-root"

# The images, built by podman from the repository's Dockerfiles (no Docker engine needed; on a
# machine without a registry the base images are made locally from Debian's apt sources, once):
# scripts/images.sh says which images and how.
images:
	scripts/images.sh

# The pod specs in a real container engine: podman runs deploy/kubernetes/attach.yaml and
# deployment.yaml with the images just built, against a Postgres the pods reach
# (integration/pod_test.go, build tag podman: jobs, probes, a restarted worker, a killed
# sidecar, the shutdown contract when the pod is terminated). POD_TESTS selects (a -run pattern).
POD_TESTS ?= ^TestPod(Attach|SingleImage)$$
POD_TEST := scripts/podman-env.sh exec $(PLAIN_GO) $(GO) test -tags podman -count=1 -timeout 15m -v -run '$(POD_TESTS)' ./integration
test-pod: images
ifeq ($(SONIQ_TEST_DATABASE_URL),)
	.ci/pg.sh run $(POD_TEST)
else
	$(POD_TEST)
endif

# The module must build for the platforms the binary ships on (arm64 images)
# and for macOS, where developers build it (the sidecar itself supervises
# handlers on Linux only: see internal/transport/spawn_other.go). Build only, no
# tests. Packages that import the pure-Go SQLite driver are left out: that
# driver alone is most of the compile time for each platform (minutes on a
# cold cache), it is built for these platforms by its authors, and nothing
# platform-specific of ours lives in those packages. CROSS_ALL=1 builds ./...
CROSS_TARGETS ?= linux/arm64 darwin/arm64
cross-build:
	@pkgs="./..."; if [ -z "$(CROSS_ALL)" ]; then \
		pkgs="$$($(GO) list -f '{{if .GoFiles}}{{.ImportPath}} {{join .Deps " "}}{{end}}' ./... | grep . | grep -v ' modernc.org/sqlite' | cut -d' ' -f1)"; fi; \
	for t in $(CROSS_TARGETS); do \
		echo "GOOS=$${t%/*} GOARCH=$${t#*/} go build ($$(echo $$pkgs | wc -w) packages)"; \
		CGO_ENABLED=0 GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) build $$pkgs || exit 1; \
	done

# The examples' handler images (examples/node/Dockerfile, examples/python/Dockerfile: the
# SDK in attach mode, no sidecar in them), without a Docker engine: pinned bases, non-root
# USER, COPY sources present, and their CMD run here on a temporary socket path must listen
# (0660), pass its HEALTHCHECK probe and exit 0 on SIGTERM (scripts/docker-steps-examples.sh).
docker-steps-examples: deps-python deps-node
	$(ON_VENV) scripts/docker-steps-examples.sh

# Everything, with -race, against a throw-away Postgres and a PgBouncer in transaction
# mode in front of it. When SONIQ_TEST_DATABASE_URL / SONIQ_TEST_PGBOUNCER_URL are already
# set (as .ci/run does) they are used; otherwise they are started and removed.
ifeq ($(SONIQ_TEST_PGBOUNCER_URL),)
WITH_PGBOUNCER := .ci/pgbouncer.sh run
endif
#
# The parts run side by side (-j, each part's output kept together): the Go integration
# tests spend most of their time waiting on real processes and timeouts, so the Python,
# Node, lint, cross-build and bench-smoke parts fill the idle CPU instead of adding to the
# wall time of a CI run. make starts them in this order: the longest (test-go, then
# chaos-smoke's two 90 s runs) first, so that no long part starts last. On a fresh machine
# .ci/run has already compiled the race build (test-go-compile) and better-sqlite3
# (deps-node-client) while apt was installing, so these parts start on their tests at once.
TEST_PARTS := test-go chaos-smoke test-python test-node test-node-client bench-smoke lint cross-build docker-steps-examples test-prometheus
test: build docker-steps
ifeq ($(SONIQ_TEST_DATABASE_URL),)
	.ci/pg.sh run .ci/pgbouncer.sh run $(MAKE) --no-print-directory -j4 --output-sync=target $(TEST_PARTS)
else
	$(WITH_PGBOUNCER) $(MAKE) --no-print-directory -j4 --output-sync=target $(TEST_PARTS)
endif

# The Go tests run the example handlers over both transports: the unix one
# needs the SDKs' gRPC packages, installed from the repository's own files.
# GO_TEST_PARALLEL is how many parallel tests of a package run at once (go test's
# default is the number of CPUs): most black-box tests wait on processes and timers,
# so more of them than cores keep the CPU busy.
GO_TEST_PARALLEL ?= 6
test-go: deps-python deps-node test-go-compile
	$(ON_VENV) $(GO) test -race -count=1 -parallel $(GO_TEST_PARALLEL) -timeout 15m ./...

# Compiles every package and its tests with -race into the build cache (go list -export
# compiles without linking) while the Python and Node dependencies install, which
# test-go needs only to run the tests.
test-go-compile:
	$(GO) list -race -test -export -f '{{.ImportPath}}' ./... >/dev/null

# Includes the wheel built, installed in fresh virtualenvs and run from outside the
# repository, and mypy --strict on the SDK (tests/test_packaging.py).
test-python: deps-python
	$(ON_VENV) $(VENV_PYTHON) -m pytest -q sdk/python/tests

test-node: deps-node
	cd sdk/node && npm test --silent

# The Node producer package (sdk/node-client): its tests against the Postgres and PgBouncer
# make test runs (SONIQ_TEST_DATABASE_URL, SONIQ_TEST_PGBOUNCER_URL) and SQLite files, each
# migrated by bin/soniq-sidecar, which make test builds first (not rebuilt here: other parts run it).
test-node-client: deps-node deps-node-client
	cd sdk/node-client && npm test --silent

# The alerting rules (deploy/prometheus): promtool's syntax and lint check, then its unit
# tests, which fire and do not fire each alert. promtool comes with Debian's prometheus
# package (.ci/run installs it). Which metric names the rules may use is checked against the
# real binary by the Go test TestPrometheusScrapesTheSidecar.
PROMTOOL ?= promtool
test-prometheus:
	@command -v $(PROMTOOL) >/dev/null || { echo "test-prometheus: $(PROMTOOL) is required (apt-get install prometheus)"; exit 1; }
	$(PROMTOOL) check rules deploy/prometheus/soniq-sidecar-rules.yaml
	cd deploy/prometheus && $(PROMTOOL) test rules soniq-sidecar-rules_test.yaml

$(VENV_PYTHON):
	$(PYTHON) -m venv $(VENV)

# The SDK installed editable with its unix extra, the examples (an application of the
# SDK) beside it, plus the pinned test tools.
deps-python: $(VENV_PYTHON)
	$(VENV_PYTHON) -m pip install -q --disable-pip-version-check \
		-r sdk/python/requirements-dev.txt -e 'sdk/python[unix]' -e examples/python

# The SDK's dev tree, the examples' own install of it (a link to sdk/node), and the
# producer example's install of soniq-client (a link to sdk/node-client) and pg, which the
# integration tests and the bench enqueue through.
deps-node:
	cd sdk/node && npm ci --no-audit --no-fund --silent
	cd examples/node && npm ci --no-audit --no-fund --silent
	cd examples/node/producer && npm ci --no-audit --no-fund --silent

# The producer package's dev tree (pg, better-sqlite3, typescript), from its package-lock.json
# with npm ci, or copied from the user cache where the same lock file was installed before
# (better-sqlite3 is compiled from source: scripts/deps-node-client.sh). Only the parts that
# need it wait for it (not deps-node, which most parts of make test wait for).
deps-node-client:
	scripts/deps-node-client.sh

lint: vet fmt-check tidy-check staticcheck

# Fails (and prints the diff) when go.mod or go.sum is not tidy.
tidy-check:
	$(GO) mod tidy -diff

# staticcheck at a pinned version, fetched and built by the go command
# (cached in the module and build caches after the first run).
STATICCHECK_VERSION ?= v0.8.2
staticcheck:
	$(PLAIN_GO) $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

vet:
	$(PLAIN_GO) $(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The zero-setup quickstart (SQLite in a fresh directory; no server needed).
demo: demo-python demo-node

demo-python: build
	scripts/demo.sh examples/python/manifest.yaml

demo-node: build deps-node deps-node-client  # SQLite: better-sqlite3 from sdk/node-client's tree
	scripts/demo.sh examples/node/manifest.yaml

# The benchmarks: about 15 minutes, bounded to 20; writes docs/benchmarks.md and
# docs/benchmarks.png (its own throw-away Postgres and cached venvs). Not part of `make test`,
# which runs only bench-smoke below.
bench: deps-python deps-node  # the unix rows need the gRPC packages
	$(ON_VENV) bench/run.sh

# `make bench` with tiny sizes (about a minute, its own throw-away Postgres and
# scratch output): proves the bench still runs, every peer of the peers section
# included (a failed peer run fails it); asserts nothing about speed.
bench-smoke: deps-python deps-node
	$(ON_VENV) BENCH_QUICK=1 $(PLAIN_GO) bench/run.sh

# A bounded, seeded, randomized fault run of the real binary (three sidecars on one queue,
# a producer, a nemesis of kills, stops, SIGTERMs, database restarts and network faults through
# a fault proxy in front of each sidecar: partitions, latency, reset storms, a read-only window), then a checker
# over the whole history (docs/reliability.md, "make chaos"). Its own throw-away Postgres
# and PgBouncer. CHAOS_SECONDS (default 240), CHAOS_SEED (default random, always
# printed: the same seed gives the same fault schedule); the others: go run ./chaos -h.
chaos: build deps-python deps-node
	$(ON_VENV) $(PLAIN_GO) $(GO) run ./chaos

# The short run of make test: one fixed seed, 90 s of faults, stops of at most 5 s so
# that a 90 s run on a loaded CI machine stays within the checker's time bounds (the
# 4-minute runs of make chaos stop sidecars past the heartbeat timeout as well).
# Then the regression seeds, seeds a run once failed on, with the settings they failed
# with: 7 (default stops; an 11 s stop of a sidecar and a Postgres restart a second before
# it resumed, under CPU load, orphaned two claimed rows). One busy process of CPU
# contention each: the other parts of make test load the cores too.
# Network faults (CHAOS_NET) run here too: partitions, latency, reset storms (a claim's reply
# lost after Postgres committed it is reconciled before the next claim) and a read-only window.
# Uses the binary make test built.
CHAOS_SMOKE_SEED ?= 20260
CHAOS_REGRESSION_SEEDS ?= 7
chaos-smoke: deps-python deps-node
	$(ON_VENV) CHAOS_SECONDS=90 CHAOS_SEED=$(CHAOS_SMOKE_SEED) CHAOS_STOP_MAX=5s CHAOS_CPU_BUSY=1 $(PLAIN_GO) $(GO) run ./chaos
	@for seed in $(CHAOS_REGRESSION_SEEDS); do \
		echo "chaos-smoke: regression seed $$seed"; \
		$(ON_VENV) CHAOS_SECONDS=90 CHAOS_SEED=$$seed CHAOS_CPU_BUSY=1 $(PLAIN_GO) $(GO) run ./chaos || exit 1; \
	done

# What a release ships, built locally into dist/ (never into the source tree): the
# static binary, the Python SDK's wheel and the Node SDK's and the Node producer's tarballs. The image is
# `docker build -t IMAGE .` from the repository root; .github/workflows/release.yml
# publishes them on a version tag.
dist: build deps-python
	rm -rf dist && mkdir -p dist
	cp $(BIN) dist/
	$(VENV_PYTHON) -m pip wheel -q --no-deps --disable-pip-version-check -w dist sdk/python
	cd sdk/node && npm pack --silent --pack-destination ../../dist >/dev/null
	cd sdk/node-client && npm pack --silent --pack-destination ../../dist >/dev/null
	@ls -1 dist

clean:
	rm -rf bin dist $(VENV)

# Regenerates the unix transport's code from protocol/handler.proto: the Go
# messages and service (protocol/handlerpb) and the Python messages and their
# type stub (sdk/python/soniq_handler/handler_pb2.py and .pyi), and
# refreshes the copy the Node package ships and loads at run time
# (sdk/node/proto/). Needs protoc from grpcio-tools (the Python gencode
# must match the protobuf runtime pinned in sdk/python/requirements-dev.txt)
# and the two Go plugins on PATH:
#   $(VENV_PYTHON) -m pip install grpcio-tools==$(GRPCIO_TOOLS_VERSION)   (after make deps-python)
#   $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
#   $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
GRPCIO_TOOLS_VERSION       ?= 1.85.1
PROTOC_GEN_GO_VERSION      ?= v1.36.12
PROTOC_GEN_GO_GRPC_VERSION ?= v1.5.1
proto:
	@tmp="$$(mktemp -d)" && trap 'rm -rf "$$tmp"' EXIT && \
	PATH="$$PATH:$$($(GO) env GOPATH)/bin" $(VENV_PYTHON) -m grpc_tools.protoc -I . \
		--go_out=. --go_opt=module=github.com/soniq-dev/soniq-sidecar \
		--go-grpc_out=. --go-grpc_opt=module=github.com/soniq-dev/soniq-sidecar \
		--python_out="$$tmp" --pyi_out="$$tmp" protocol/handler.proto && \
	cp "$$tmp/protocol/handler_pb2.py" "$$tmp/protocol/handler_pb2.pyi" sdk/python/soniq_handler/ && \
	cp protocol/handler.proto sdk/node/proto/handler.proto
