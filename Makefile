# soniq-sidecar — see README.md. `make test` is what CI runs (through .ci/run).
GO       ?= go
BIN      ?= bin/soniq-sidecar
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
PYTHON   ?= python3

.PHONY: all build test test-go test-python test-node lint vet fmt-check demo demo-python demo-node bench clean

all: build

# A static, cgo-free binary: the same command the Dockerfile runs.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/soniq-sidecar

# Everything, with -race, against a throw-away Postgres. When SONIQ_TEST_DATABASE_URL is
# already set (as .ci/run does) that server is used; otherwise one is started and removed.
test: build
ifeq ($(SONIQ_TEST_DATABASE_URL),)
	.ci/pg.sh run $(MAKE) --no-print-directory lint test-go test-python test-node
else
	$(MAKE) --no-print-directory lint test-go test-python test-node
endif

test-go:
	$(GO) test -race -count=1 -timeout 15m ./...

test-python:
	$(PYTHON) -m pytest -q examples/python/tests

test-node:
	cd examples/node && npm test --silent

lint: vet fmt-check

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The zero-setup quickstart (SQLite in a fresh directory; no server needed).
demo: demo-python demo-node

demo-python: build
	scripts/demo.sh examples/python/manifest.yaml

demo-node: build
	scripts/demo.sh examples/node/manifest.yaml

clean:
	rm -rf bin
