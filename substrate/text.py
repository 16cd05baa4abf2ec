"""Small text helpers shared by every command and report (one place, so wording stays consistent)."""

from __future__ import annotations


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 entry`` / ``2 entries``: the count and the noun in the right number."""
    return f"{count} {singular if count == 1 else (plural_form or singular + 's')}"
