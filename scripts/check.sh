#!/usr/bin/env bash
# Static checks: ruff (lint + format), mypy (strict), the layer contract (import-linter), golden vectors regenerate
# without a diff.
set -euo pipefail
cd "$(dirname "$0")/.."
V=.venv/bin
echo "check: ruff"
$V/ruff check .
$V/ruff format --check . >/dev/null || { $V/ruff format --check . ; exit 1; }
echo "check: mypy"
$V/mypy bernstein bench infra
echo "check: layer contract"
$V/lint-imports --no-cache
echo "check: golden vectors"
$V/python -m tests.vectors.generate --check
$V/python -m tests.vectors.step_vectors --check
$V/python -m tests.vectors.audit_vectors --check
