"""The research report: model, canonical bytes, parsing and boundary validation.

A report is RFC 8785 canonical JSON (``schemas.canonical.canonical_json``)
with no floats and no timestamps, so it is a pure function of the query, the
plan, the fetched bytes and the synthesiser's drafts::

    {"format": "bernstein.research.report/v1",
     "query": "...",
     "plan": ["<source url>", ...],                      # de-duplicated, in order
     "sources": [{"source_ref", "final_url", "status", "content_type",
                  "redirects": [{"status", "url"}, ...],
                  "page_content_hash", "size"}, ...],     # one per fetched source, plan order
     "claims": [{"claim_id", "statement",
                 "citations": [{"claim_id", "source_ref", "page_content_hash", "quote"}, ...]}],
     "quote_normalisation": "bernstein.quote-normalisation/v1"}

``status`` and ``content_type`` are null when a custom fetch_fn returned
bare bytes. Quotes are stored normalised (``quotes.normalise_text``).

``validate_report`` is the boundary: it raises ``ActivityRejected`` with a
``RejectCode`` before anything is stored or published. ``parse_report`` is
the verifier's loader: it raises ``MalformedResearchArtifact``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from producers.activity import ActivityRejected
from producers.research.errors import MalformedResearchArtifact
from producers.research.fetch import FetchedPage, Redirect
from producers.research.quotes import NORMALISATION_VERSION, normalise_text, quote_occurs
from schemas.canonical import canonical_json, is_digest, sha256_digest
from schemas.errors import CanonicalizationError

REPORT_FORMAT: Final = "bernstein.research.report/v1"
_CLAIM_ID_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}")


class RejectCode:
    """Stable codes of the research boundary refusals; appended to, never renamed."""

    EMPTY_QUERY: Final = "EMPTY_QUERY"
    EMPTY_PLAN: Final = "EMPTY_PLAN"
    INVALID_SOURCE: Final = "INVALID_SOURCE"
    MALFORMED_DRAFT: Final = "MALFORMED_DRAFT"
    NO_CLAIMS: Final = "NO_CLAIMS"
    INVALID_CLAIM_ID: Final = "INVALID_CLAIM_ID"
    DUPLICATE_CLAIM_ID: Final = "DUPLICATE_CLAIM_ID"
    EMPTY_STATEMENT: Final = "EMPTY_STATEMENT"
    UNCITED_CLAIM: Final = "UNCITED_CLAIM"
    CITATION_CLAIM_MISMATCH: Final = "CITATION_CLAIM_MISMATCH"
    EMPTY_QUOTE: Final = "EMPTY_QUOTE"
    MALFORMED_PAGE_HASH: Final = "MALFORMED_PAGE_HASH"
    SOURCE_NOT_FETCHED: Final = "SOURCE_NOT_FETCHED"
    CITATION_SOURCE_MISMATCH: Final = "CITATION_SOURCE_MISMATCH"
    QUOTE_NOT_IN_PAGE: Final = "QUOTE_NOT_IN_PAGE"


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """How one planned source was fetched, and the hash of the bytes it returned."""

    source_ref: str
    final_url: str
    status: int | None
    content_type: str | None
    redirects: tuple[Redirect, ...]
    page_content_hash: str
    size: int

    @classmethod
    def from_page(cls, page: FetchedPage) -> SourceRecord:
        return cls(
            source_ref=page.source_ref,
            final_url=page.final_url,
            status=page.status,
            content_type=page.content_type,
            redirects=page.redirects,
            page_content_hash=page.content_hash,
            size=page.size,
        )

    def to_document(self) -> dict[str, Any]:
        return {
            "source_ref": self.source_ref,
            "final_url": self.final_url,
            "status": self.status,
            "content_type": self.content_type,
            "redirects": [r.to_document() for r in self.redirects],
            "page_content_hash": self.page_content_hash,
            "size": self.size,
        }


@dataclass(frozen=True, slots=True)
class CitationRecord:
    """A claim's pin on the exact bytes it was drawn from."""

    claim_id: str
    source_ref: str
    page_content_hash: str
    quote: str

    def to_document(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "source_ref": self.source_ref,
            "page_content_hash": self.page_content_hash,
            "quote": self.quote,
        }


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    claim_id: str
    statement: str
    citations: tuple[CitationRecord, ...]

    def to_document(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "statement": self.statement,
            "citations": [c.to_document() for c in self.citations],
        }


@dataclass(frozen=True, slots=True)
class ResearchReport:
    query: str
    plan: tuple[str, ...]
    sources: tuple[SourceRecord, ...]
    claims: tuple[ClaimRecord, ...]
    quote_normalisation: str = NORMALISATION_VERSION

    def to_document(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "query": self.query,
            "plan": list(self.plan),
            "sources": [s.to_document() for s in self.sources],
            "claims": [c.to_document() for c in self.claims],
            "quote_normalisation": self.quote_normalisation,
        }

    def to_bytes(self) -> bytes:
        """The canonical bytes that are stored and whose hash is the artifact_hash."""
        return canonical_json(self.to_document())

    @property
    def report_hash(self) -> str:
        return sha256_digest(self.to_bytes())

    @property
    def citation_count(self) -> int:
        return sum(len(c.citations) for c in self.claims)

    def source_for(self, source_ref: str) -> SourceRecord | None:
        for source in self.sources:
            if source.source_ref == source_ref:
                return source
        return None


# --------------------------------------------------------------------------
# Boundary validation (build time)
# --------------------------------------------------------------------------


def is_valid_claim_id(value: object) -> bool:
    """1-64 of ``A-Z a-z 0-9 _ . : -``, not starting with ``.``, ``:`` or ``-``."""
    return isinstance(value, str) and _CLAIM_ID_RE.fullmatch(value) is not None


def citation_problem(claim_id: str, citation: CitationRecord, report: ResearchReport) -> tuple[str, str] | None:
    """The first structural fault of one citation as ``(code, message)``, or None.

    Shared by the worker (which refuses) and the verifier (which reports).
    """
    if citation.claim_id != claim_id:
        return RejectCode.CITATION_CLAIM_MISMATCH, f"citation names claim {citation.claim_id!r}"
    if not normalise_text(citation.quote):
        return RejectCode.EMPTY_QUOTE, "quoted span is empty"
    if not is_digest(citation.page_content_hash):
        return RejectCode.MALFORMED_PAGE_HASH, f"page content hash {citation.page_content_hash!r} is not 'sha256:<64 hex>'"
    source = report.source_for(citation.source_ref)
    if source is None:
        return RejectCode.SOURCE_NOT_FETCHED, f"cites source {citation.source_ref!r} that the run did not fetch"
    if source.page_content_hash != citation.page_content_hash:
        return (
            RejectCode.CITATION_SOURCE_MISMATCH,
            f"cites page {citation.page_content_hash!r} but source {citation.source_ref!r} "
            f"was fetched as {source.page_content_hash!r}",
        )
    return None


def validate_report(report: ResearchReport, page_texts: Mapping[str, str] | None = None) -> None:
    """Refuse a report that may not cross the boundary (raises ActivityRejected).

    ``page_texts`` maps each source_ref to its normalised page text
    (``quotes.page_text``); when given, every quote must occur in its page.
    """
    if not report.claims:
        raise ActivityRejected("research report holds no claims", code=RejectCode.NO_CLAIMS)
    seen: set[str] = set()
    for position, claim in enumerate(report.claims, start=1):
        cid = claim.claim_id
        if not is_valid_claim_id(cid):
            raise ActivityRejected(
                f"claim {position} has an invalid claim_id {cid!r} (1-64 of A-Z a-z 0-9 _ . : -)",
                code=RejectCode.INVALID_CLAIM_ID,
                evidence={"position": str(position), "claim_id": repr(cid)},
            )
        if cid in seen:
            raise ActivityRejected(
                f"claim_id {cid!r} is used by more than one claim", code=RejectCode.DUPLICATE_CLAIM_ID, evidence={"claim_id": cid}
            )
        seen.add(cid)
        if not normalise_text(claim.statement):
            raise ActivityRejected(
                f"claim {cid!r} has an empty statement", code=RejectCode.EMPTY_STATEMENT, evidence={"claim_id": cid}
            )
        if not claim.citations:
            raise ActivityRejected(
                f"claim {cid!r} has no citation; every claim must quote a fetched page",
                code=RejectCode.UNCITED_CLAIM,
                evidence={"claim_id": cid},
            )
        for index, citation in enumerate(claim.citations):
            evidence = {
                "claim_id": cid,
                "citation": str(index),
                "source_ref": citation.source_ref,
                "page_content_hash": citation.page_content_hash,
            }
            problem = citation_problem(cid, citation, report)
            if problem is not None:
                code, message = problem
                raise ActivityRejected(f"claim {cid!r} citation {index}: {message}", code=code, evidence=evidence)
            if page_texts is not None:
                text = page_texts.get(citation.source_ref)
                if text is None or not quote_occurs(citation.quote, text):
                    raise ActivityRejected(
                        f"claim {cid!r} citation {index}: quoted span {_clip(citation.quote)!r} does not occur in the "
                        f"page fetched from {citation.source_ref!r} ({citation.page_content_hash}) under "
                        f"{NORMALISATION_VERSION}",
                        code=RejectCode.QUOTE_NOT_IN_PAGE,
                        evidence={**evidence, "quote": _clip(citation.quote)},
                    )


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------
# Parsing (verify time)
# --------------------------------------------------------------------------


def load_document(data: bytes) -> dict[str, Any]:
    """Parse artifact bytes that must be one canonical JSON object."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedResearchArtifact(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise MalformedResearchArtifact("not a JSON object")
    try:
        canonical = canonical_json(document)
    except CanonicalizationError as exc:
        raise MalformedResearchArtifact(f"has no canonical form: {exc.message}") from None
    if canonical != data:
        raise MalformedResearchArtifact("is not RFC 8785 canonical JSON")
    return document


class _Reader:
    """Typed field access over an untrusted JSON object, naming the path on failure."""

    def __init__(self, value: object, path: str, keys: Sequence[str]) -> None:
        if not isinstance(value, dict):
            raise MalformedResearchArtifact("must be an object", field=path)
        unknown = sorted(set(value) - set(keys))
        missing = [k for k in keys if k not in value]
        if unknown:
            raise MalformedResearchArtifact(f"unexpected field(s) {', '.join(unknown)}", field=path)
        if missing:
            raise MalformedResearchArtifact(f"missing field(s) {', '.join(missing)}", field=path)
        self.value: dict[str, Any] = value
        self.path = path

    def text(self, key: str, *, nullable: bool = False) -> Any:
        item = self.value[key]
        if isinstance(item, str) or (nullable and item is None):
            return item
        raise MalformedResearchArtifact("must be a string", field=f"{self.path}.{key}")

    def integer(self, key: str, *, nullable: bool = False) -> Any:
        item = self.value[key]
        if (isinstance(item, int) and not isinstance(item, bool)) or (nullable and item is None):
            return item
        raise MalformedResearchArtifact("must be an integer", field=f"{self.path}.{key}")

    def array(self, key: str) -> list[Any]:
        item = self.value[key]
        if not isinstance(item, list):
            raise MalformedResearchArtifact("must be an array", field=f"{self.path}.{key}")
        return item


def parse_report(data: bytes) -> ResearchReport:
    """Load canonical report bytes (raises MalformedResearchArtifact)."""
    return parse_report_document(load_document(data))


def parse_report_document(document: Mapping[str, Any]) -> ResearchReport:
    root = _Reader(dict(document), "report", ("format", "query", "plan", "sources", "claims", "quote_normalisation"))
    if root.text("format") != REPORT_FORMAT:
        raise MalformedResearchArtifact(f"is {root.value['format']!r}, expected {REPORT_FORMAT!r}", field="report.format")
    normalisation = root.text("quote_normalisation")
    if normalisation != NORMALISATION_VERSION:
        raise MalformedResearchArtifact(
            f"{normalisation!r} is not a quote normalisation this verifier implements ({NORMALISATION_VERSION!r})",
            field="report.quote_normalisation",
        )
    plan = []
    for i, ref in enumerate(root.array("plan")):
        if not isinstance(ref, str):
            raise MalformedResearchArtifact("must be a string", field=f"report.plan[{i}]")
        plan.append(ref)
    sources = [_parse_source(item, f"report.sources[{i}]") for i, item in enumerate(root.array("sources"))]
    refs = [s.source_ref for s in sources]
    if len(set(refs)) != len(refs) or not set(refs) <= set(plan):
        raise MalformedResearchArtifact("source_refs must be distinct members of the plan", field="report.sources")
    claims = [_parse_claim(item, f"report.claims[{i}]") for i, item in enumerate(root.array("claims"))]
    return ResearchReport(
        query=root.text("query"),
        plan=tuple(plan),
        sources=tuple(sources),
        claims=tuple(claims),
        quote_normalisation=normalisation,
    )


def _parse_source(value: object, path: str) -> SourceRecord:
    r = _Reader(value, path, ("source_ref", "final_url", "status", "content_type", "redirects", "page_content_hash", "size"))
    redirects = []
    for i, item in enumerate(r.array("redirects")):
        hop = _Reader(item, f"{path}.redirects[{i}]", ("status", "url"))
        redirects.append(Redirect(status=hop.integer("status"), url=hop.text("url")))
    page_hash = r.text("page_content_hash")
    if not is_digest(page_hash):
        raise MalformedResearchArtifact("is not 'sha256:<64 hex>'", field=f"{path}.page_content_hash")
    return SourceRecord(
        source_ref=r.text("source_ref"),
        final_url=r.text("final_url"),
        status=r.integer("status", nullable=True),
        content_type=r.text("content_type", nullable=True),
        redirects=tuple(redirects),
        page_content_hash=page_hash,
        size=r.integer("size"),
    )


def _parse_claim(value: object, path: str) -> ClaimRecord:
    r = _Reader(value, path, ("claim_id", "statement", "citations"))
    citations = []
    for i, item in enumerate(r.array("citations")):
        c = _Reader(item, f"{path}.citations[{i}]", ("claim_id", "source_ref", "page_content_hash", "quote"))
        # page_content_hash is checked per claim by the verifier, so one bad pin names its claim.
        citations.append(
            CitationRecord(
                claim_id=c.text("claim_id"),
                source_ref=c.text("source_ref"),
                page_content_hash=c.text("page_content_hash"),
                quote=c.text("quote"),
            )
        )
    return ClaimRecord(claim_id=r.text("claim_id"), statement=r.text("statement"), citations=tuple(citations))
