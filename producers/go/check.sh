#!/usr/bin/env bash
# The Go SDK's whole check, as `make test` runs it: go vet, go test ./..., the conformance runner over
# the repository's schemas/vectors (100% or it fails), and bin/bernstein-go-emit.
#
# Dependencies come only from the Go module proxy this machine's Go is set up with (the "direct" VCS
# fallback is removed), pinned by go.mod/go.sum: -mod=readonly fails instead of editing them, and
# GOTOOLCHAIN=local never downloads a toolchain. Warm (module and build caches filled) it takes about
# 10 seconds; the first run downloads the modules (about 40 MB) and compiles them.
set -euo pipefail
cd "$(dirname "$0")"
start=$(date +%s%N)

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    PATH="/usr/local/go/bin:$PATH"  # the official tarball's place, not always on a non-login PATH
fi
if ! command -v go >/dev/null 2>&1; then
    echo "producers/go/check.sh: go is not on PATH (Go >= 1.26 is needed: README Prerequisites)" >&2
    exit 2
fi
proxy="$(go env GOPROXY | sed -e 's/[,|]direct//g' -e 's/^direct[,|]*//')"
if [ -z "$proxy" ] || [ "$proxy" = "direct" ] || [ "$proxy" = "off" ]; then
    echo "producers/go/check.sh: GOPROXY ($(go env GOPROXY)) names no module proxy" >&2
    exit 2
fi
export GOPROXY="$proxy" GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local GOSUMDB=off
# GOSUMDB=off: every module's hash is already pinned in go.sum, which -mod=readonly enforces.

step() { printf '== %s\n' "$*"; }

step "go vet ./..."
go vet ./...

step "go test ./..."
go test ./...

step "go build bin/bernstein-go-emit bin/bernstein-go-browser bin/conformance"
mkdir -p bin
go build -o bin/bernstein-go-emit ./cmd/bernstein-go-emit
go build -o bin/bernstein-go-browser ./cmd/bernstein-go-browser
go build -o bin/conformance ./cmd/conformance

step "conformance over ../../schemas/vectors"
bin/conformance -vectors ../../schemas/vectors

elapsed_ms=$((($(date +%s%N) - start) / 1000000))
printf 'producers/go/check.sh: ok in %d.%d s\n' $((elapsed_ms / 1000)) $((elapsed_ms % 1000 / 100))
