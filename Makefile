# The two commands of the README:
#   make demo   run the whole system on this machine (Kafka + S3 + scheduler + agents + offline verify)
#   make test   install everything, start the services (broker secured: SASL_SSL + ACLs), run every check
#               and test, a plaintext smoke test of the demo's broker, stop the services
SHELL := /bin/bash
UV_VERSION := 0.13.8
UV := .infra/uv/bin/uv
VENV := .venv

.PHONY: venv system-deps demo test check unit integration bench vectors lint typecheck infra-up infra-down clean promtool fmt native sdk

$(UV):
	@mkdir -p .infra
	python3 -m venv .infra/uv
	.infra/uv/bin/pip install --quiet uv==$(UV_VERSION)

# The project's virtual environment at .venv, exactly as uv.lock pins it.
venv: $(UV)
	$(UV) sync --frozen --quiet
	@test -x $(VENV)/bin/bernstein

# Debian packages the tests need (kcat, Chromium, Java, Maven); apt runs only when one is missing.
system-deps:
	scripts/system-deps.sh

demo: venv system-deps
	infra/up
	$(VENV)/bin/bernstein demo

test: venv system-deps
	scripts/test.sh

# Static checks only (no services): lint, types, the layer contract, golden vectors.
check: venv
	scripts/check.sh

# Format everything that has a formatter: Python (ruff, imports sorted too), Rust (rustfmt), Go (gofmt).
# The TypeScript SDK has no formatter in its toolchain (tsc checks it); its style is the files' own.
fmt: venv
	$(VENV)/bin/ruff check --fix --select I .
	$(VENV)/bin/ruff format .
	cd native && cargo fmt
	gofmt -w producers/go

# Rebuild the Rust scheduler core into .venv after editing native/ (uv builds it with cargo, release mode),
# then its own checks: rustfmt, clippy -D warnings, cargo test.
native: $(UV)
	$(UV) sync --frozen --quiet --reinstall-package bernstein-native
	scripts/native-check.sh

# The Go and TypeScript SDKs: vet/tsc, unit tests, conformance over schemas/vectors (100% or it fails).
sdk:
	producers/go/check.sh
	producers/typescript/check.sh

unit: venv
	$(VENV)/bin/pytest -q tests/unit

integration: venv system-deps
	infra/up --secure
	$(VENV)/bin/pytest -q tests/integration

bench: venv system-deps
	infra/up
	$(VENV)/bin/python -m bench.scheduler
	$(VENV)/bin/python -m bench.verifier
	$(VENV)/bin/python -m bench.follow
	$(VENV)/bin/python -m bench.partitions
	$(VENV)/bin/python -m bench.rewind
	$(VENV)/bin/python -m bench.snapshot
	$(VENV)/bin/python -m bench.fold
	$(VENV)/bin/python -m bench.cas
	$(VENV)/bin/python -m bench.report

# The shipped alert rules: builds promtool from the Go module proxy into ~/.cache/bernstein/promtool (once; a promtool on PATH is used first), then
# promtool check rules ops/prometheus/alerts.yml and promtool test rules ops/prometheus/tests/*.yml.
promtool:
	scripts/promtool.sh

vectors: venv
	$(VENV)/bin/python -m tests.vectors.generate
	$(VENV)/bin/python -m tests.vectors.step_vectors
	$(VENV)/bin/python -m tests.vectors.audit_vectors

infra-up: venv
	infra/up

infra-down:
	-infra/down

clean: infra-down
	rm -rf out .pytest_cache .mypy_cache .ruff_cache
