"""What every part of infra shares: the repository root, the readiness timings, the cluster's node ids,
the one error type, the two ways of printing and the atomic (0600 by default) file write."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CLUSTER_NODES = (1, 2, 3)
"""Node ids of `up --brokers 3`: each node is broker and controller; the three controllers are the quorum."""

POLL_S = 0.2
READY_TIMEOUT_S = 90.0
EXTERNAL_READY_TIMEOUT_S = 30.0


class InfraError(Exception):
    """An expected failure: the message is printed (no traceback) and we exit 1."""


def say(msg: str) -> None:
    print(f"infra: {msg}", flush=True)


def warn(msg: str) -> None:
    print(f"infra: {msg}", file=sys.stderr, flush=True)


def atomic_write(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``path`` whole or not at all, through an unpredictable temporary name, with ``mode`` from the start.

    Files with secrets (.infra/env, client properties, keys, the broker's config) get 0600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
