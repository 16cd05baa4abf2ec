#!/usr/bin/env bash
# Checks the shipped Prometheus alert rules with promtool (make promtool; scripts/test.sh).
#
# A promtool on PATH is used as it is. Otherwise it is built from the Go module proxy the way
# infra/up builds MinIO: `go install` of one pinned version of Prometheus' cmd/promtool into
# ~/.cache/bernstein/promtool/<version> (BERNSTEIN_TOOL_CACHE), once per machine; later runs find
# that version there (`go version -m` reads the module version built into the binary). Then:
#   promtool check rules ops/prometheus/alerts.yml        (syntax, PromQL, templates)
#   promtool test rules  ops/prometheus/tests/*.yml       (every alert fires when it should, not when it shouldn't)
#   promtool promql format <expr>, for every query of ops/grafana/bernstein.json (it parses; Grafana's
#   $__rate_interval and $partition replaced by 5m and .*)
# Needs Go 1.26.7 or newer (the go.mod of this version asks for it). PROMTOOL_VERSION overrides the pin.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# Prometheus' Go module versions: v0.3XX.Y is Prometheus v3.XX.Y.
PROMTOOL_VERSION=${PROMTOOL_VERSION:-v0.316.0}
PROMTOOL_PKG=github.com/prometheus/prometheus/cmd/promtool
# built once per machine, kept across clones and `infra/reset` (like MinIO): BERNSTEIN_TOOL_CACHE moves it
bin="${BERNSTEIN_TOOL_CACHE:-$HOME/.cache/bernstein}/promtool/$PROMTOOL_VERSION"
promtool="$bin/promtool"

built_version() {
  # "\tmod\tgithub.com/prometheus/prometheus\tv0.316.0\th1:..." -> v0.316.0
  go version -m "$promtool" 2>/dev/null | awk '$1 == "mod" && $2 == "github.com/prometheus/prometheus" {print $3}'
}

t0=$(date +%s)
if [ -z "${PROMTOOL_BUILD:-}" ] && command -v promtool >/dev/null 2>&1; then
  # a promtool the machine already has (a Prometheus install, a package): used as it is
  promtool=$(command -v promtool)
  echo "promtool: using $promtool from PATH ($("$promtool" --version 2>&1 | head -1)); PROMTOOL_BUILD=1 builds $PROMTOOL_VERSION instead"
elif ! command -v go >/dev/null 2>&1; then
  echo "promtool: no promtool on PATH, and Go is needed to build one (apt-get install golang, or Go from go.dev)" >&2
  exit 3
elif [ -x "$promtool" ] && [ "$(built_version)" = "$PROMTOOL_VERSION" ]; then
  echo "promtool: $PROMTOOL_VERSION already built in $bin ($(( $(date +%s) - t0 ))s)"
else
  mkdir -p "$bin"
  echo "promtool: building $PROMTOOL_PKG@$PROMTOOL_VERSION from the Go module proxy ($(go env GOPROXY)) into $bin (one-time) ..."
  # GOFLAGS=-mod=mod: `go install pkg@version` ignores any go.mod around it; GOWORK=off likewise.
  if ! GOBIN="$bin" GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 \
    go install "$PROMTOOL_PKG@$PROMTOOL_VERSION"; then
    echo "promtool: building $PROMTOOL_PKG@$PROMTOOL_VERSION failed; is the Go module proxy reachable?" >&2
    exit 3
  fi
  if [ "$(built_version)" != "$PROMTOOL_VERSION" ]; then
    echo "promtool: $promtool does not report module version $PROMTOOL_VERSION" >&2
    exit 3
  fi
  echo "promtool: built $PROMTOOL_VERSION in $(( $(date +%s) - t0 ))s"
fi

"$promtool" check rules ops/prometheus/alerts.yml
"$promtool" test rules ops/prometheus/tests/*.yml
# The dashboard's queries parse as PromQL (tests/unit/test_ops_rules.py checks the metrics they name).
python3 - ops/grafana/bernstein.json <<'PY' |
import json, sys
dashboard = json.load(open(sys.argv[1], encoding="utf-8"))
for panel in dashboard["panels"] + [p for row in dashboard["panels"] for p in row.get("panels", [])]:
    for target in panel.get("targets", []):
        print(target["expr"].replace("$__rate_interval", "5m").replace("$partition", ".*"))
PY
{
  n=0
  while IFS= read -r expr; do
    n=$((n + 1))
    if ! "$promtool" promql --experimental format "$expr" >/dev/null; then
      echo "promtool: ops/grafana/bernstein.json: this query does not parse: $expr" >&2
      exit 1
    fi
  done
  echo "Checking ops/grafana/bernstein.json"
  echo "  SUCCESS: $n queries parse"
}
