#!/usr/bin/env bash
# The README's test command (make test): static checks, then unit tests with the network
# unused, then the services (Kafka, S3) are started, integration tests run against them,
# and the services are stopped again whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."
started=0
cleanup() {
  if [ "$started" = 1 ]; then infra/down || true; fi
}
trap cleanup EXIT
t0=$(date +%s)
scripts/check.sh
echo "test: unit tests"
.venv/bin/pytest -q -p no:cacheprovider tests/unit
if ! infra/status >/dev/null 2>&1; then started=1; fi
infra/up
echo "test: integration tests (real Kafka and S3)"
.venv/bin/pytest -q -p no:cacheprovider tests/integration
echo "test: all passed in $(( $(date +%s) - t0 ))s"
