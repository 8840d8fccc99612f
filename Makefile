# tli — the two commands of the README quick start are `make demo` and
# `make test`; both do every set-up step themselves on a fresh machine.
#
# One cargo profile (release) serves the demo, the tests and the benchmarks,
# so libtorch's bindings are compiled once.

CARGO ?= cargo
TLI := target/release/tli

.PHONY: all bootstrap build test demo bench lint fmt doctor

all: build

## bootstrap: install the pinned libtorch (PyPI torch==2.11.0) into .venv (once)
bootstrap:
	./scripts/bootstrap.sh

## build: the tli binary and every plugin (and test fixture) library
build: bootstrap
	$(CARGO) build --release --workspace

## test: everything from scratch: bootstrap, build, formatting check, the whole test suite
test: build
	$(CARGO) fmt --all -- --check
	$(CARGO) test --release --workspace

## demo: load the plugins and train the template plugin on CPU with visible progress
demo: build
	$(TLI) doctor
	$(TLI) plugins list
	$(TLI) train local --plugin template --steps 400 --seed 42
	$(TLI) data inspect data/samples/es_proxy_sp500_1d.dbn.zst
	$(TLI) train local --plugin template --steps 300 --data data/samples/es_proxy_sp500_1d.dbn.zst

## bench: the benchmarks recorded in docs/benchmarks.md
bench: build
	$(CARGO) bench -p tli-host --bench plugin_abi

## lint: clippy on every target, warnings as errors
lint: bootstrap
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

doctor: build
	$(TLI) doctor
