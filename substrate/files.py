"""Files replaced whole, never torn: the one way the system rewrites a file in place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a temporary file in the same directory, flushed to disk, renamed over it.

    A reader sees the old bytes or the new ones, and a crash leaves no partial file (the temporary one is removed
    on any error). Creates the parent directory; raises ``OSError`` for the caller to translate."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
