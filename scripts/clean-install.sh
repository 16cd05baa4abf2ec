#!/usr/bin/env bash
# Install this checkout as a library into a fresh virtualenv with no Rust toolchain, then verify an
# exported dump with it ("pip install . then bernstein activity verify on an exported dump").
#
#   scripts/clean-install.sh [PYTHON]    PYTHON: python3.11 (default), python3.13, 3.13, or a path
#
# pythonX.Y / X.Y: found by scripts/find-python.sh (on PATH, else pyenv's build); none: exit 2.
# Steps, in a temporary directory removed at exit:
#   1. the dev environment (.venv, Rust core) writes an exported dump of a closed run, offline
#      (scripts/offline_dump.py);
#   2. a venv made with PYTHON, run with a clean environment: PATH without any directory holding
#      cargo, rustc or rustup, HOME a fresh directory, no CARGO_*/RUSTUP_* variables; `command -v cargo`
#      must fail there;
#   3. `pip install --no-cache-dir --index-url https://pypi.org/simple <repo>` (PyPI only; no wheel
#      cache, so nothing built earlier with Rust can be reused);
#   4. checks: the distribution installs one top-level import name, bernstein (no generic schemas,
#      verifier, ...); bernstein_native and playwright are not installed, the package comes from the venv
#      and ships py.typed; `bernstein activity verify` on the dump exits 0; the installed package writes a
#      dump of its own (Python core) that verifies too; `bernstein browser run` names the extra;
#      `bernstein audit rules` prints the alert rules the package carries.
# Exit 0 when all of it holds; any other exit says which step failed. Needs the network to PyPI.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
want=${1:-python3.11}
say() { echo "clean-install: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

# -- the interpreter -------------------------------------------------------------------------
# shellcheck source=scripts/find-python.sh
source "$repo/scripts/find-python.sh"
python=$(find_python "$want") || {
  say "no interpreter for '$want': not on PATH and not in $(pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/${want#python}*/bin/"
  say "install it (e.g. \`pyenv install ${want#python}\`) or pass its path"
  exit 2
}
pyversion=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
say "interpreter $python ($pyversion)"

t0=$(date +%s)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bernstein-clean-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# -- 1. a dump from the dev environment --------------------------------------------------------
[ -x "$repo/.venv/bin/python" ] || fail "no dev environment at $repo/.venv (make venv)"
made=$("$repo/.venv/bin/python" "$repo/scripts/offline_dump.py" "$tmp/made")
run_id=${made%% *}
say "dump of run $run_id written by the dev environment ($("$repo/.venv/bin/python" -c 'from bernstein.consumers.core.native import native_status; print(native_status()[1])'))"

# -- 2. an environment without Rust ---------------------------------------------------------------
clean_path=""
IFS=: read -r -a entries <<<"$PATH"
for dir in "${entries[@]}"; do
  [ -n "$dir" ] && [ -d "$dir" ] || continue
  case "$dir" in *cargo* | *rustup*) continue ;; esac
  if [ -e "$dir/cargo" ] || [ -e "$dir/rustc" ] || [ -e "$dir/rustup" ]; then
    case "$dir" in
      /usr/bin | /bin | /usr/local/bin) fail "$dir holds a Rust toolchain (cargo/rustc): it cannot be hidden from PATH here; run this where Rust is installed with rustup, or in a container" ;;
    esac
    continue
  fi
  clean_path=${clean_path:+$clean_path:}$dir
done
mkdir -p "$tmp/home"
# kept from the caller: how to reach PyPI (proxies, CA bundles); nothing else (no PIP_FIND_LINKS or
# PIP_INDEX_URL: the index is PyPI, named below; no pip config files)
passed=()
for name in HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE PIP_CERT; do
  [ -n "${!name:-}" ] && passed+=("$name=${!name}")
done
clean() {
  env -i "${passed[@]}" HOME="$tmp/home" PATH="$clean_path" LANG=C.UTF-8 TMPDIR="$tmp" \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_CONFIG_FILE=/dev/null PYTHONNOUSERSITE=1 "$@"
}
clean bash -c '! command -v cargo && ! command -v rustc && ! command -v rustup' >/dev/null \
  || fail "cargo/rustc still reachable in the clean environment: $(clean bash -c 'command -v cargo rustc rustup')"
say "no Rust in the clean environment (command -v cargo fails; PATH=$clean_path)"

# -- 3. pip install . ---------------------------------------------------------------------------------
"$python" -m venv "$tmp/venv"
venv=$tmp/venv/bin
t1=$(date +%s)
clean "$venv/pip" install --quiet --no-cache-dir --index-url https://pypi.org/simple "$repo" \
  || fail "pip install $repo (Python $pyversion, no Rust toolchain)"
say "pip install . took $(($(date +%s) - t1))s"
clean "$venv/pip" list --format=freeze >"$tmp/installed.txt"

# -- 4. checks, from a directory outside the checkout (imports come from the venv) ---------------------
cd "$tmp"
clean "$venv/python" - "$tmp/venv" <<'EOF' || fail "installed package checks"
import importlib, importlib.util, pathlib, sys
venv = pathlib.Path(sys.argv[1]).resolve()
for absent in ("bernstein_native", "playwright"):
    assert importlib.util.find_spec(absent) is None, f"{absent} is installed (it must be optional)"
import importlib.metadata as md
# the distribution's files name its top-level import names: only bernstein (the component folders
# are subpackages of it, docs/decisions.md "One import name"), nothing generic
files = md.distribution("bernstein-journal").files or []
tops = sorted({f.parts[0] for f in files if not f.parts[0].endswith((".dist-info", ".data")) and f.parts[0] != ".."})
assert tops == ["bernstein"], f"top-level names installed: {tops}"
for generic in ("schemas", "substrate", "producers", "consumers", "verifier"):
    assert importlib.util.find_spec(generic) is None, f"a top-level '{generic}' is importable from the venv"
import bernstein
root = pathlib.Path(bernstein.__file__).resolve().parent
assert venv in root.parents, f"bernstein imported from {root}, not from the venv"
assert (root / "py.typed").is_file(), "bernstein ships no py.typed"
for component in ("schemas", "substrate", "producers", "consumers", "verifier"):
    sub = importlib.import_module(f"bernstein.{component}")
    assert (root / component) in pathlib.Path(sub.__file__).resolve().parents, f"bernstein.{component} from {sub.__file__}"
assert not (root / "producers" / "go").exists() and not (root / "schemas" / "vectors").exists(), "SDKs or vectors shipped"
from bernstein.consumers.core.native import native_status
from bernstein.verifier import facts
print(f"clean-install: installed package: top-level names {tops}, no bernstein_native, no playwright, py.typed, Python core and facts")
EOF

verify() {  # verify <label> <dir written by offline_dump.py> <run id>
  local out rc=0
  out=$(clean "$venv/bernstein" activity verify "$3" --from "$2/dump" --trusted-keys "$2/trusted-keys.json") || rc=$?
  printf '%s\n' "$out" | sed 's/^/    /' >&2
  [ "$rc" = 0 ] || fail "bernstein activity verify ($1) exited $rc, expected 0"
  [ "$(printf '%s\n' "$out" | tail -n 1)" = "verified -- every activity reconstructs from the journal." ] \
    || fail "bernstein activity verify ($1): last line is not the verified verdict"
  say "bernstein activity verify $3 ($1): exit 0"
}
verify "dump written by the dev environment" "$tmp/made" "$run_id"

# the installed package alone (the scheduler's Python core) writes a dump that verifies too
own=$(clean "$venv/python" "$repo/scripts/offline_dump.py" "$tmp/own") || fail "offline_dump.py with the installed package"
verify "dump written by the installed package" "$tmp/own" "${own%% *}"

echo '[]' >"$tmp/flow.json"
rc=0
err=$(clean "$venv/bernstein" browser run --flow "$tmp/flow.json" --url https://example.org/ --run r --session s 2>&1 >/dev/null) || rc=$?
# the endpoint line every Kafka/S3 command prints first (docs/operations.md, "Configuration"), then the error
[[ ${err%%$'\n'*} == "bernstein: kafka "* ]] && err=${err#*$'\n'}
[ "$rc" = 3 ] && [[ $err == "bernstein: error: the browser modality needs Playwright"*"pip install 'bernstein-journal[browser]'"* ]] \
  || fail "bernstein browser run without Playwright: exit $rc, $err"
say "bernstein browser run without the extra: exit 3, names bernstein-journal[browser]"

# the installed package carries the alert rules that `bernstein audit rules` prints (no checkout beside it)
rc=0
rules=$(clean "$venv/bernstein" audit rules --runbook-base https://runbooks.example.internal/bernstein) || rc=$?
linked=$(printf '%s\n' "$rules" | grep -c 'runbook_url: "https://runbooks.example.internal/bernstein#' || true)
[ "$rc" = 0 ] && [ "$linked" -ge 20 ] || fail "bernstein audit rules from the installed package: exit $rc, $linked runbook links"
say "bernstein audit rules from the installed package: exit 0, the shipped rules ($linked alerts) under another runbook base"

say "OK on Python $pyversion: pip install . without Rust, $(wc -l <"$tmp/installed.txt") packages, dump verified (exit 0), in $(($(date +%s) - t0))s"
