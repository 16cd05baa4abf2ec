#!/usr/bin/env bash
# The unit suite on Python 3.13: a second uv environment at .venv-3.13, exactly as uv.lock pins it
# (`uv sync --frozen`, dev group included: it builds the Rust core for 3.13 too, an abi3 wheel), then
# `pytest -q tests/unit` with it. The interpreter: python3.13 on PATH, else pyenv's 3.13 build
# (scripts/find-python.sh); none is exit 2. .venv (3.11) is not touched.
#   scripts/unit-py313.sh [PYTEST ARGS...]     (default: -q -p no:cacheprovider tests/unit)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/find-python.sh
source scripts/find-python.sh
python=$(find_python 3.13) || {
  echo "unit-py313: no Python 3.13: not on PATH and not in $(pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/3.13*/bin/ (pyenv install 3.13)" >&2
  exit 2
}
UV=.infra/uv/bin/uv
[ -x "$UV" ] || { echo "unit-py313: no uv at $UV (make venv installs it)" >&2; exit 2; }
t0=$(date +%s)
UV_PROJECT_ENVIRONMENT=.venv-3.13 "$UV" sync --frozen --quiet --python "$python"
.venv-3.13/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version'
t1=$(date +%s)
echo "unit-py313: .venv-3.13 ($(.venv-3.13/bin/python -V)) ready in $((t1 - t0))s" >&2
if [ $# -eq 0 ]; then set -- -q -p no:cacheprovider tests/unit; fi
.venv-3.13/bin/pytest "$@"
echo "unit-py313: tests took $(($(date +%s) - t1))s" >&2
