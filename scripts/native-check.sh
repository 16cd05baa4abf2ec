#!/usr/bin/env bash
# The Rust core's own checks: rustfmt, clippy with warnings as errors (every target, tests included), and its
# unit tests. The Python-vs-Rust differential suites (tests/unit/differential/) run with pytest; these are the
# crate's checks as a Rust reader expects them (`cargo fmt`, `cargo clippy`, `cargo test`).
set -euo pipefail
cd "$(dirname "$0")/../native"
command -v cargo >/dev/null || { echo "native-check: cargo not found (install Rust >= 1.85, e.g. with rustup)" >&2; exit 2; }
echo "native-check: cargo fmt --check"
cargo fmt --check
echo "native-check: cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings
echo "native-check: cargo test"
if ! out=$(cargo test --quiet 2>&1); then
  printf '%s\n' "$out"
  exit 1
fi
printf '%s\n' "$out" | grep "^test result" | sed 's/^/native-check: /'
