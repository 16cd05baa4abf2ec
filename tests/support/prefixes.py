"""Fresh topic prefixes for tests, remembered so that the session deletes their topics at the end.

Every integration test works in its own topics (``<prefix>.activity.journal`` ...). Left behind,
they pile up on the developer's broker run after run; ``BERNSTEIN_KEEP_TOPICS=1`` keeps them for a
post-mortem.
"""

from __future__ import annotations

import uuid

ISSUED: list[str] = []


def fresh_prefix() -> str:
    """``t`` and 12 hex digits, noted for the end-of-session cleanup."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    ISSUED.append(prefix)
    return prefix
