"""The research budget: integer caps checked before every fetch.

Integers only: a budget ends up in hashed abort records, and canonical JSON
refuses floats. Three caps, checked in this order before fetch ``i``
(0-based): ``i + 1 > max_fetches``, then ``spent + cost_per_fetch >
max_cost_units``. The byte cap cannot be known before the response arrives,
so the remaining allowance is handed to the fetch, which aborts the transfer
as soon as it is exceeded (``bytes_allowance`` / ``check_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from bernstein.producers.research.errors import InvalidBudget, ResearchBudgetExceeded

CAP_FETCHES = "max_fetches"
CAP_COST = "max_cost_units"
CAP_BYTES = "max_bytes"


def _require_count(name: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidBudget(f"ResearchBudget.{name} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class ResearchBudget:
    """How much one research run may fetch and spend. ``None`` means uncapped."""

    max_fetches: int
    max_cost_units: int | None = None
    cost_per_fetch: int = 1
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        _require_count("max_fetches", self.max_fetches, optional=False)
        _require_count("max_cost_units", self.max_cost_units, optional=True)
        _require_count("cost_per_fetch", self.cost_per_fetch, optional=False)
        _require_count("max_bytes", self.max_bytes, optional=True)

    def check_before_fetch(self, *, index: int, spent: int, source: str) -> None:
        """Raise ResearchBudgetExceeded if fetch number ``index`` (0-based) would cross a cap."""
        if index + 1 > self.max_fetches:
            raise ResearchBudgetExceeded(cap=CAP_FETCHES, limit=self.max_fetches, attempted=index + 1, source=source)
        if self.max_cost_units is not None and spent + self.cost_per_fetch > self.max_cost_units:
            raise ResearchBudgetExceeded(
                cap=CAP_COST, limit=self.max_cost_units, attempted=spent + self.cost_per_fetch, source=source
            )

    def bytes_allowance(self, fetched_bytes: int) -> int | None:
        """Bytes the next response may still have (None: uncapped)."""
        if self.max_bytes is None:
            return None
        return max(0, self.max_bytes - fetched_bytes)

    def check_bytes(self, *, fetched_bytes: int, size: int, source: str) -> None:
        """Raise ResearchBudgetExceeded if keeping a response of ``size`` bytes crosses ``max_bytes``."""
        if self.max_bytes is not None and fetched_bytes + size > self.max_bytes:
            raise ResearchBudgetExceeded(cap=CAP_BYTES, limit=self.max_bytes, attempted=fetched_bytes + size, source=source)
