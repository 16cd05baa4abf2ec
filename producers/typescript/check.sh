#!/usr/bin/env bash
# The TypeScript SDK's whole check, what `make test` runs: install exactly the locked packages
# (npm ci, registry only), compile with tsc, run the unit tests (node:test, no network beyond
# refused loopback connections) and the conformance runner over the repository's
# schemas/vectors (100% or it fails). Prints how long it took. Needs Node >= 20 and npm.
set -euo pipefail
cd "$(dirname "$0")"
start=$(date +%s%N)
step() { printf '== %s\n' "$*"; }

step "npm ci (package-lock.json)"
npm ci --no-audit --no-fund --prefer-offline --loglevel=error
step "npm test (as a newcomer types it after npm ci: the pretest script compiles with tsc first)"
rm -rf dist
npm test --loglevel=error
step "conformance"
node dist/conformance.js
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf 'typescript check: passed in %d.%03d s\n' $((ms / 1000)) $((ms % 1000))
