"""No source file grows past about 800 lines; the ones still over it are listed, and may only shrink.

A file over the limit holds more than one thing (docs/architecture.md, "Layers"). The files that are
still over it are named in ``OVER`` with their size today: a test fails when one of them grows, when
a new file crosses the limit, and when a listed file has come under it (remove it from the list), so
the list only ever gets shorter. Tests and generated vectors are outside the rule.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 800
OVER: dict[str, int] = {}
"""Files still over ``LIMIT``: each at most this many lines until it is split. None is left; an entry is only ever
removed, never added (a file that crosses the limit is split instead)."""


def _sources() -> dict[str, int]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py", "*.rs", "*.go", "*.ts"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    sizes: dict[str, int] = {}
    for name in listed:
        if name.startswith("tests/") or name.endswith("_test.go") or "/test/" in name or "schemas/vectors/" in name:
            continue
        path = REPO / name
        if path.is_file():
            sizes[name] = len(path.read_text(encoding="utf-8", errors="replace").splitlines())
    return sizes


def test_no_source_file_is_over_the_limit_but_the_listed_ones_and_those_only_shrink() -> None:
    sizes = _sources()
    assert len(sizes) > 100  # the listing found the tree
    new = {name: lines for name, lines in sizes.items() if lines > LIMIT and name not in OVER}
    assert not new, f"over {LIMIT} lines: split them along their seams: {new}"
    grown = {name: (sizes[name], most) for name, most in OVER.items() if sizes.get(name, 0) > most}
    assert not grown, f"listed files that grew (lines, allowed): {grown}"
    done = [name for name in OVER if sizes.get(name, 0) <= LIMIT]
    assert not done, f"now within {LIMIT} lines (or gone): remove them from OVER: {done}"
