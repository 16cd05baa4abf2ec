#!/usr/bin/env bash
# The README's test command (make test): static checks, then unit tests with the network
# unused (on Python 3.11 and, beside it, 3.13; the Rust crate's cargo fmt/clippy/test too), the Go and TypeScript SDKs' checks (unit tests and the
# conformance runners over schemas/vectors), promtool's checks of the alert rules, then the
# services are started with the broker secured (infra/up --secure: SASL_SSL, SCRAM users, ACLs;
# each component under its own principal) and the integration tests run against them; then a
# short plaintext smoke test (the broker restarted as `infra/up` starts it for `make demo`). The
# services are stopped again whatever happened, if this script started them.
set -euo pipefail
cd "$(dirname "$0")/.."
started=0
cleanup() {
  if [ "$started" = 1 ]; then infra/down || true; fi
}
trap cleanup EXIT
t0=$(date +%s)
# promtool is built from the Go module proxy (minutes on a new machine, mostly one core of
# compiling): it builds in the background while the unit tests run, and the rule checks' result
# is awaited before the services start.
mkdir -p .infra
scripts/promtool.sh > .infra/promtool-check.log 2>&1 &
promtool_pid=$!
# MinIO is built from the Go module proxy too (about 6 minutes once; kept in ~/.cache/bernstein): likewise
.venv/bin/python infra/infra.py prepare > .infra/prepare.log 2>&1 &
prepare_pid=$!
scripts/check.sh
# the Rust crate's checks (rustfmt, clippy -D warnings, cargo test) run beside the unit tests, whose pytest
# keeps one core busy
scripts/native-check.sh > .infra/native-check.log 2>&1 &
native_pid=$!
# the unit suite on Python 3.13 runs beside the one on 3.11 (each pytest keeps one core busy)
scripts/unit-py313.sh > .infra/unit-py313.log 2>&1 &
py313_pid=$!
echo "test: unit tests"
.venv/bin/pytest -q -p no:cacheprovider tests/unit
echo "test: unit tests on Python 3.13 (run beside them)"
if ! wait "$py313_pid"; then
  cat .infra/unit-py313.log
  echo "test: scripts/unit-py313.sh failed (log above)" >&2
  exit 1
fi
tail -n 3 .infra/unit-py313.log
if ! wait "$native_pid"; then
  cat .infra/native-check.log
  echo "test: scripts/native-check.sh failed (log above)" >&2
  exit 1
fi
echo "test: Rust crate checks (cargo fmt --check, clippy -D warnings, cargo test)"
cat .infra/native-check.log
t_sdk=$(date +%s)
echo "test: Go SDK (vet, unit tests, conformance over schemas/vectors, the emit command)"
producers/go/check.sh
echo "test: TypeScript SDK (npm ci, tsc, unit tests, conformance over schemas/vectors)"
producers/typescript/check.sh
echo "test: SDK checks took $(( $(date +%s) - t_sdk ))s"
echo "test: alert rules and dashboard (promtool check rules, test rules, dashboard queries; built in the background)"
t_prom=$(date +%s)
if ! wait "$promtool_pid"; then
  cat .infra/promtool-check.log
  echo "test: scripts/promtool.sh failed (log above)" >&2
  exit 1
fi
cat .infra/promtool-check.log
echo "test: waited $(( $(date +%s) - t_prom ))s more for promtool"
if ! wait "$prepare_pid"; then
  cat .infra/prepare.log
  echo "test: infra/infra.py prepare failed (log above)" >&2
  exit 1
fi
cat .infra/prepare.log
if ! infra/status >/dev/null 2>&1; then started=1; fi
infra/up --secure
echo "test: integration tests (real Kafka with SASL_SSL and ACLs, real S3)"
# tests that mostly wait (session timeouts, fencing, followers; marker beside) run in a second pytest
# beside the rest; the ones that need the machine to themselves (marker alone: a broker restart, a
# three-broker cluster) run after both (tests/integration/conftest.py lists them)
t_int=$(date +%s)
.venv/bin/pytest -q -p no:cacheprovider --durations=10 -m beside tests/integration > .infra/integration-beside.log 2>&1 &
beside_pid=$!
beside_status=0 main_status=0 alone_status=0
.venv/bin/pytest -q -p no:cacheprovider --durations=25 -m "not beside and not alone" tests/integration || main_status=$?
wait "$beside_pid" || beside_status=$?
echo "test: the waiting integration tests (run beside the others)"
if [ "$beside_status" = 0 ]; then tail -n 15 .infra/integration-beside.log; else cat .infra/integration-beside.log; fi
echo "test: the integration tests that need the machine to themselves"
.venv/bin/pytest -q -p no:cacheprovider --durations=5 -m alone tests/integration || alone_status=$?
if [ "$main_status" != 0 ] || [ "$beside_status" != 0 ] || [ "$alone_status" != 0 ]; then
  echo "test: integration tests failed (exit: others $main_status, waiting $beside_status, alone $alone_status)" >&2
  exit 1
fi
echo "test: integration tests took $(( $(date +%s) - t_int ))s"
t1=$(date +%s)
echo "test: plaintext smoke test (the broker of make demo)"
infra/up
# test_demo: submit -> journal -> verify as `make demo` does it; the kcat round trips need a plaintext broker
# (Debian's kcat links librdkafka 2.0.2, whose SCRAM Kafka 4 refuses), so they run here
env -u BERNSTEIN_KAFKA_CONFIG_FILE .venv/bin/pytest -q -p no:cacheprovider tests/integration/test_demo.py \
  tests/integration/test_verifier_roundtrip.py -k "demo or kcat"
echo "test: smoke test took $(( $(date +%s) - t1 ))s"
echo "test: all passed in $(( $(date +%s) - t0 ))s"
