"""Typed failures of the research modality.

Tree (all under ``bernstein.schemas.errors.BernsteinError``)::

    FetchRefused            one fetch failed or was refused (code per cause)
    InvalidBudget           a ResearchBudget that is not non-negative integers
    ResearchAborted         a run stopped before its report; carries the result to anchor
    ├── ResearchBudgetExceeded   a cap would be crossed (code BUDGET_EXCEEDED)
    └── SourceFetchFailed        a planned source could not be fetched
    MalformedResearchArtifact    bytes that are not a research report / abort record
                                 (defined in ``bernstein.schemas.documents.research``, re-exported here)

Boundary refusals of a report (uncited claim, quote not in page, ...) are
``bernstein.producers.activity.ActivityRejected`` with a code from ``report.RejectCode``.
httpx exceptions never leave ``fetch.py``: they become ``FetchRefused``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Final

from bernstein.schemas.documents.research import MalformedResearchArtifact
from bernstein.schemas.errors import BernsteinError

__all__ = [
    "FetchCode",
    "FetchRefused",
    "InvalidBudget",
    "MalformedResearchArtifact",
    "ResearchAborted",
    "ResearchBudgetExceeded",
    "SourceFetchFailed",
]

if TYPE_CHECKING:
    from bernstein.producers.activity import ActivityResult
    from bernstein.producers.research.fetch import FetchedPage


class FetchCode:
    """Stable codes of ``FetchRefused``; appended to, never renamed."""

    SCHEME_NOT_ALLOWED: Final = "SCHEME_NOT_ALLOWED"
    INVALID_URL: Final = "INVALID_URL"
    PRIVATE_ADDRESS: Final = "PRIVATE_ADDRESS"
    RESPONSE_TOO_LARGE: Final = "RESPONSE_TOO_LARGE"
    TOO_MANY_REDIRECTS: Final = "TOO_MANY_REDIRECTS"
    HTTP_ERROR: Final = "HTTP_ERROR"
    FETCH_FAILED: Final = "FETCH_FAILED"


class FetchRefused(BernsteinError):
    """A fetch that produced no page; ``code`` says why, ``evidence`` holds the facts."""

    code: ClassVar[str] = "FETCH_FAILED"

    def __init__(
        self,
        message: str,
        *,
        code: str,
        url: str,
        status: int | None = None,
        limit: int | None = None,
        received: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]  # per-instance stable code
        self.url = url
        self.status = status
        self.limit = limit
        """For RESPONSE_TOO_LARGE: the byte cap that was in force."""
        self.received = received
        """For RESPONSE_TOO_LARGE: bytes received when the fetch was aborted (> limit)."""

    @property
    def evidence(self) -> dict[str, str]:
        out = {"url": self.url}
        for name in ("status", "limit", "received"):
            value = getattr(self, name)
            if value is not None:
                out[name] = str(value)
        return out


class InvalidBudget(BernsteinError):
    """A budget field that is not a non-negative integer (hashed documents refuse floats)."""

    code = "INVALID_BUDGET"


class ResearchAborted(BernsteinError):
    """A run that stopped before producing a report.

    ``result`` is the ActivityResult to publish so the stop is anchored in the
    journal like any other crossing (weak spot: unanchored budget refusals).
    The worker fills it in before raising.
    """

    code: ClassVar[str] = "RESEARCH_ABORTED"

    def __init__(self, message: str, *, source: str) -> None:
        super().__init__(message)
        self.source = source
        self.result: ActivityResult | None = None
        """The ActivityResult that anchors this stop."""
        self.fetched: tuple[FetchedPage, ...] = ()
        """Pages fetched (and stored) before the stop, in plan order."""

    def record(self) -> dict[str, object]:
        """The ``refusal`` / ``failure`` member of the abort document (integers and strings only)."""
        raise NotImplementedError


class ResearchBudgetExceeded(ResearchAborted):
    """The next fetch would cross a budget cap; raised before that fetch's bytes are kept."""

    code = "BUDGET_EXCEEDED"

    def __init__(self, *, cap: str, limit: int, attempted: int, source: str) -> None:
        super().__init__(
            f"research run exceeds {cap}={limit} at source {source!r} (would reach {attempted})",
            source=source,
        )
        self.cap = cap
        self.limit = limit
        self.attempted = attempted

    @property
    def refused_result(self) -> ActivityResult | None:
        """The ``refused`` / ``budget_exhausted`` ActivityResult (set by the worker)."""
        return self.result

    @property
    def evidence(self) -> dict[str, str]:
        return {"cap": self.cap, "limit": str(self.limit), "attempted": str(self.attempted), "source": self.source}

    def record(self) -> dict[str, object]:
        return {"code": self.code, "cap": self.cap, "limit": self.limit, "attempted": self.attempted, "source": self.source}


class SourceFetchFailed(ResearchAborted):
    """A planned source could not be fetched; wraps the FetchRefused."""

    code = "SOURCE_FETCH_FAILED"

    def __init__(self, cause: FetchRefused, *, source: str) -> None:
        super().__init__(f"cannot fetch source {source!r}: {cause.code}: {cause.message}", source=source)
        self.cause = cause

    @property
    def failed_result(self) -> ActivityResult | None:
        """The ``failed`` / ``fetch_failed`` ActivityResult (set by the worker)."""
        return self.result

    def record(self) -> dict[str, object]:
        out: dict[str, object] = {"code": self.cause.code, "source": self.source, "message": self.cause.message}
        if self.cause.status is not None:
            out["status"] = self.cause.status
        return out
