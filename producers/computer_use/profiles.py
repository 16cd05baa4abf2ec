"""Per-session browser profiles under the worktree, disjoint by construction.

``isolated_profile_dir`` names ``<worktree>/.bernstein/computer-use/profiles/
<readable prefix>-<sha256(run, session)[:16]>``. The readable prefix is the
sanitised session id (for humans); the digest suffix is over the exact ids,
so ``a.b`` and ``a_b`` (which sanitise alike) still get different
directories, and so does the same session id in two runs. Distinct sessions
therefore never share cookies, storage or caches.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Final

from bernstein.schemas.canonical import canonical_json

PROFILES_DIR: Final = Path(".bernstein") / "computer-use" / "profiles"
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")
_PREFIX_CHARS: Final = 40


def isolated_profile_dir(session_id: str, *, worktree: Path, run_id: str = "") -> Path:
    """The profile directory of ``session_id`` (in ``run_id``) under ``worktree``; not created here."""
    readable = _UNSAFE.sub("_", session_id)[:_PREFIX_CHARS] or "session"
    # The suffix is over the exact ids, so ids that sanitise alike stay apart.
    suffix = hashlib.sha256(canonical_json([run_id, session_id])).hexdigest()[:16]
    return Path(worktree) / PROFILES_DIR / f"{readable}-{suffix}"


def prepare_profile(session_id: str, *, worktree: Path, run_id: str = "") -> Path:
    """Create the session's profile directory (mode 0700) and return it."""
    path = isolated_profile_dir(session_id, worktree=worktree, run_id=run_id)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def remove_profile(path: Path) -> None:
    """Delete a session profile (cookies and storage are not evidence; they may hold credentials)."""
    shutil.rmtree(path, ignore_errors=True)
