"""The research artifact: report format, citation model, abort records and their rules.

A report is RFC 8785 canonical JSON (``bernstein.schemas.canonical.canonical_json``)
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

A run that stopped before its report anchors an abort record instead
(``bernstein.research.refusal/v1`` for a budget refusal, ``.../failure/v1`` for
a failed fetch)::

    {"format": ..., "query", "plan": [...],
     "refusal" | "failure": {"code", "source", ...},
     "fetched": [{"source_ref", "page_content_hash"}, ...]}

Rules (``report_problem``), in order, the first failure wins: the report has
claims; each claim has a valid, unique id, a non-empty statement and at least
one citation; each citation names its claim, has a non-empty quote and a
well-formed page hash, cites a source the report fetched as exactly that hash
and, when the stage's observations are given, a page among them; when the
pages' text is given, the quote occurs in it. The first group is decidable
from the submission's own bytes, so the scheduler enforces it
(``submission_violation``); only the quote check needs the page bytes and is
left to the worker (build time) and the verifier (reattached from the CAS).

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import orjson

from bernstein.schemas.canonical import canonical_json, is_digest, sha256_digest
from bernstein.schemas.documents.common import Submission, Violation, clip, show
from bernstein.schemas.documents.quotes import NORMALISATION_VERSION, normalise_text, quote_occurs
from bernstein.schemas.errors import CanonicalizationError, MalformedInput
from bernstein.schemas.records import RefusalCode, TerminalState

REPORT_FORMAT: Final = "bernstein.research.report/v1"
REFUSAL_FORMAT: Final = "bernstein.research.refusal/v1"
FAILURE_FORMAT: Final = "bernstein.research.failure/v1"
REASON_BUDGET_EXHAUSTED: Final = "budget_exhausted"
REASON_FETCH_FAILED: Final = "fetch_failed"
PAGE_OBSERVATION: Final = "page"
"""Observation kind of a fetched page; its ref is the planned source URL."""

_CLAIM_ID_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}")

ABORT_SHAPES: Final = {
    REFUSAL_FORMAT: ("refusal", TerminalState.REFUSED, REASON_BUDGET_EXHAUSTED),
    FAILURE_FORMAT: ("failure", TerminalState.FAILED, REASON_FETCH_FAILED),
}
"""format -> (outcome member, terminal state, reason code) of each abort record."""


class MalformedResearchArtifact(MalformedInput):
    """Artifact bytes that do not parse as a research report or abort record."""

    code = "E_MALFORMED_RESEARCH_ARTIFACT"

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class RejectCode:
    """Stable codes of the research boundary refusals; appended to, never renamed.

    The scheduler refuses the byte-decidable ones as ``RefusalCode.RESEARCH_<code>``.
    """

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
    CITATION_NOT_OBSERVED: Final = "CITATION_NOT_OBSERVED"


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Redirect:
    """One redirect hop: ``url`` answered with ``status`` (3xx) and a Location."""

    status: int
    url: str

    def to_document(self) -> dict[str, Any]:
        return {"status": self.status, "url": self.url}


class _Hop(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def url(self) -> str: ...


class FetchedPageLike(Protocol):
    """What ``SourceRecord.from_page`` reads (``bernstein.producers.research.fetch.FetchedPage``)."""

    @property
    def source_ref(self) -> str: ...
    @property
    def final_url(self) -> str: ...
    @property
    def status(self) -> int | None: ...
    @property
    def content_type(self) -> str | None: ...
    @property
    def redirects(self) -> Iterable[_Hop]: ...
    @property
    def content_hash(self) -> str: ...
    @property
    def size(self) -> int: ...


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
    def from_page(cls, page: FetchedPageLike) -> SourceRecord:
        return cls(
            source_ref=page.source_ref,
            final_url=page.final_url,
            status=page.status,
            content_type=page.content_type,
            redirects=tuple(Redirect(hop.status, hop.url) for hop in page.redirects),
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


@dataclass(frozen=True, slots=True)
class AbortRecord:
    """A parsed abort document (a research run that stopped before its report)."""

    format: str
    query: str
    plan: tuple[str, ...]
    outcome: Mapping[str, Any]
    fetched: tuple[tuple[str, str], ...]
    """(source_ref, page_content_hash) in fetch order."""

    @property
    def terminal_state(self) -> str:
        return ABORT_SHAPES[self.format][1].value

    @property
    def reason_code(self) -> str:
        return ABORT_SHAPES[self.format][2]

    def describe(self) -> str:
        o = self.outcome
        if self.format == REFUSAL_FORMAT:
            return f"budget refusal recorded: {o.get('cap')}={o.get('limit')} at source {o.get('source')!r}"
        return f"fetch failure recorded: {o.get('code')} at source {o.get('source')!r}"


# --------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReportProblem:
    """The first rule a report breaks: a ``RejectCode``, a sentence, and where.

    ``path`` is a JSON path inside the report (``report.claims[0].citations[1].quote``);
    ``declared`` the offending value and ``expected`` what the rule wanted ("" if nothing).
    """

    code: str
    message: str
    path: str
    evidence: Mapping[str, str] = field(default_factory=dict)
    declared: str = ""
    expected: str = ""


def is_valid_claim_id(value: object) -> bool:
    """1-64 of ``A-Z a-z 0-9 _ . : -``, not starting with ``.``, ``:`` or ``-``."""
    return isinstance(value, str) and _CLAIM_ID_RE.fullmatch(value) is not None


def citation_problem(claim_id: str, citation: CitationRecord, report: ResearchReport) -> tuple[str, str] | None:
    """The first structural fault of one citation as ``(code, message)``, or None.

    Shared by the worker and the scheduler (which refuse) and the verifier (which reports).
    """
    found = _citation_fault(claim_id, citation, report)
    return None if found is None else (found[0], found[1])


def _citation_fault(claim_id: str, citation: CitationRecord, report: ResearchReport) -> tuple[str, str, str, str, str] | None:
    """(code, message, field, declared, expected) of a citation's first structural fault."""
    if citation.claim_id != claim_id:
        return (
            RejectCode.CITATION_CLAIM_MISMATCH,
            f"citation names claim {show(citation.claim_id)}",
            "claim_id",
            citation.claim_id,
            claim_id,
        )
    if not normalise_text(citation.quote):
        return RejectCode.EMPTY_QUOTE, "quoted span is empty", "quote", citation.quote, ""
    if not is_digest(citation.page_content_hash):
        return (
            RejectCode.MALFORMED_PAGE_HASH,
            f"page content hash {show(citation.page_content_hash)} is not 'sha256:<64 hex>'",
            "page_content_hash",
            citation.page_content_hash,
            "",
        )
    source = report.source_for(citation.source_ref)
    if source is None:
        return (
            RejectCode.SOURCE_NOT_FETCHED,
            f"cites source {show(citation.source_ref)} that the run did not fetch",
            "source_ref",
            citation.source_ref,
            "",
        )
    if source.page_content_hash != citation.page_content_hash:
        return (
            RejectCode.CITATION_SOURCE_MISMATCH,
            f"cites page {citation.page_content_hash!r} but source {show(citation.source_ref)} "
            f"was fetched as {source.page_content_hash!r}",
            "page_content_hash",
            citation.page_content_hash,
            source.page_content_hash,
        )
    return None


def report_problem(
    report: ResearchReport,
    *,
    observed: frozenset[str] | None = None,
    page_texts: Mapping[str, str] | None = None,
) -> ReportProblem | None:
    """The first rule ``report`` breaks, or None (see the module docstring for the order).

    ``observed`` is the set of the stage's observation content hashes: when
    given, every cited page must be one of them. ``page_texts`` maps each
    source_ref to its normalised page text (``quotes.page_text``): when given,
    every quote must occur in its page.
    """
    if not report.claims:
        return ReportProblem(RejectCode.NO_CLAIMS, "research report holds no claims", "report.claims", declared="0")
    seen: set[str] = set()
    for position, claim in enumerate(report.claims, start=1):
        cid = claim.claim_id
        where = f"report.claims[{position - 1}]"
        if not is_valid_claim_id(cid):
            return ReportProblem(
                RejectCode.INVALID_CLAIM_ID,
                f"claim {position} has an invalid claim_id {show(cid)} (1-64 of A-Z a-z 0-9 _ . : -)",
                f"{where}.claim_id",
                {"position": str(position), "claim_id": show(cid)},
                declared=cid,
            )
        if cid in seen:
            return ReportProblem(
                RejectCode.DUPLICATE_CLAIM_ID,
                f"claim_id {cid!r} is used by more than one claim",
                f"{where}.claim_id",
                {"claim_id": cid},
                declared=cid,
            )
        seen.add(cid)
        if not normalise_text(claim.statement):
            return ReportProblem(
                RejectCode.EMPTY_STATEMENT,
                f"claim {cid!r} has an empty statement",
                f"{where}.statement",
                {"claim_id": cid},
                declared=claim.statement,
            )
        if not claim.citations:
            return ReportProblem(
                RejectCode.UNCITED_CLAIM,
                f"claim {cid!r} has no citation; every claim must quote a fetched page",
                f"{where}.citations",
                {"claim_id": cid},
                declared=cid,
            )
        for index, citation in enumerate(claim.citations):
            at = f"{where}.citations[{index}]"
            evidence = {
                "claim_id": cid,
                "citation": str(index),
                "source_ref": clip(citation.source_ref),
                "page_content_hash": clip(citation.page_content_hash),
            }
            fault = _citation_fault(cid, citation, report)
            if fault is not None:
                code, message, name, declared, expected = fault
                return ReportProblem(
                    code, f"claim {cid!r} citation {index}: {message}", f"{at}.{name}", evidence, declared, expected
                )
            if observed is not None and citation.page_content_hash not in observed:
                return ReportProblem(
                    RejectCode.CITATION_NOT_OBSERVED,
                    f"claim {cid!r} citation {index}: cited page {citation.page_content_hash!r} "
                    "is not among the stage's observations",
                    f"{at}.page_content_hash",
                    evidence,
                    declared=citation.page_content_hash,
                )
            if page_texts is not None:
                text = page_texts.get(citation.source_ref)
                if text is None or not quote_occurs(citation.quote, text):
                    return ReportProblem(
                        RejectCode.QUOTE_NOT_IN_PAGE,
                        f"claim {cid!r} citation {index}: quoted span {_clip_quote(citation.quote)!r} does not occur in "
                        f"the page fetched from {show(citation.source_ref)} ({citation.page_content_hash}) under "
                        f"{NORMALISATION_VERSION}",
                        f"{at}.quote",
                        {**evidence, "quote": _clip_quote(citation.quote)},
                        declared=citation.quote,
                    )
    return None


def _clip_quote(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------


def load_document(data: bytes) -> dict[str, Any]:
    """Parse artifact bytes that must be one canonical JSON object."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        # The decoder's own wording is not part of the contract (refusal records must replay byte-identically).
        raise MalformedResearchArtifact("is not JSON (UTF-8, RFC 8259)") from None
    if not isinstance(document, dict):
        raise MalformedResearchArtifact("is not a JSON object")
    try:
        canonical = canonical_json(document)
    except CanonicalizationError as exc:
        raise MalformedResearchArtifact(f"has no canonical form: {exc.message}") from None
    except RecursionError:
        raise MalformedResearchArtifact("is nested too deeply") from None
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
            raise MalformedResearchArtifact(f"unexpected field(s) {clip(', '.join(unknown))}", field=path)
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
        raise MalformedResearchArtifact(f"is {show(root.value['format'])}, expected {REPORT_FORMAT!r}", field="report.format")
    normalisation = root.text("quote_normalisation")
    if normalisation != NORMALISATION_VERSION:
        raise MalformedResearchArtifact(
            f"{show(normalisation)} is not a quote normalisation this verifier implements ({NORMALISATION_VERSION!r})",
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
        # page_content_hash is checked per claim (report_problem), so one bad pin names its claim.
        citations.append(
            CitationRecord(
                claim_id=c.text("claim_id"),
                source_ref=c.text("source_ref"),
                page_content_hash=c.text("page_content_hash"),
                quote=c.text("quote"),
            )
        )
    return ClaimRecord(claim_id=r.text("claim_id"), statement=r.text("statement"), citations=tuple(citations))


def parse_abort_document(document: Mapping[str, Any]) -> AbortRecord:
    """Shape-check an abort document (raises MalformedResearchArtifact)."""
    fmt = document.get("format")
    if fmt not in ABORT_SHAPES:
        raise MalformedResearchArtifact(f"unknown research artifact format {show(fmt)}", field="format")
    member = ABORT_SHAPES[fmt][0]
    expected = {"format", "query", "plan", member, "fetched"}
    if set(document) != expected:
        raise MalformedResearchArtifact(f"fields must be exactly {', '.join(sorted(expected))}", field=str(fmt))
    query, plan, outcome, fetched = document["query"], document["plan"], document[member], document["fetched"]
    if not isinstance(query, str):
        raise MalformedResearchArtifact("must be a string", field="query")
    if not isinstance(plan, list) or not all(isinstance(p, str) for p in plan):
        raise MalformedResearchArtifact("must be an array of strings", field="plan")
    if not isinstance(outcome, dict) or not isinstance(outcome.get("code"), str) or not isinstance(outcome.get("source"), str):
        raise MalformedResearchArtifact("must be an object with string code and source", field=member)
    pairs: list[tuple[str, str]] = []
    if not isinstance(fetched, list):
        raise MalformedResearchArtifact("must be an array", field="fetched")
    for i, item in enumerate(fetched):
        if (
            not isinstance(item, dict)
            or set(item) != {"source_ref", "page_content_hash"}
            or not isinstance(item["source_ref"], str)
            or not is_digest(item["page_content_hash"])
        ):
            raise MalformedResearchArtifact("must be {source_ref, page_content_hash: sha256:<hex>}", field=f"fetched[{i}]")
        pairs.append((item["source_ref"], item["page_content_hash"]))
    return AbortRecord(format=fmt, query=query, plan=tuple(plan), outcome=dict(outcome), fetched=tuple(pairs))


# --------------------------------------------------------------------------
# The scheduler's rule
# --------------------------------------------------------------------------


def submission_violation(sub: Submission) -> Violation | None:
    """The first research rule a submission breaks, decided from its own bytes only.

    The artifact must be a canonical report or abort record (else
    RESEARCH_ARTIFACT_MALFORMED). A report is anchored only as ``completed``
    and must pass ``report_problem`` with the stage's observations (codes
    ``RESEARCH_<RejectCode>``). An abort record must carry the terminal state
    and reason code of its format, and every page it fetched must be among the
    observations. The quote-in-page check needs the page bytes: the verifier's.
    """
    try:
        document = load_document(sub.artifact)
    except MalformedResearchArtifact as exc:
        return Violation(RefusalCode.RESEARCH_ARTIFACT_MALFORMED, f"research artifact {clip(exc.message)}")
    if document.get("format") in ABORT_SHAPES:
        return _abort_violation(sub, document)
    try:
        report = parse_report_document(document)
    except MalformedResearchArtifact as exc:
        return Violation(
            RefusalCode.RESEARCH_ARTIFACT_MALFORMED, f"research report is malformed: {clip(exc.message)}", _at(exc.field)
        )
    if sub.terminal_state != TerminalState.COMPLETED:
        return Violation(
            RefusalCode.RESEARCH_OUTCOME_MISMATCH,
            f"a research report is anchored as 'completed', not {sub.terminal_state!r}",
            "terminal_state",
            sub.terminal_state,
            TerminalState.COMPLETED.value,
        )
    problem = report_problem(report, observed=sub.observed_hashes)
    if problem is None:
        return None
    return Violation(
        RefusalCode(f"RESEARCH_{problem.code}"),
        clip(problem.message, 1024),
        _at(problem.path),
        problem.declared,
        problem.expected,
    )


def _abort_violation(sub: Submission, document: Mapping[str, Any]) -> Violation | None:
    try:
        record = parse_abort_document(document)
    except MalformedResearchArtifact as exc:
        return Violation(RefusalCode.RESEARCH_ARTIFACT_MALFORMED, f"research abort record is malformed: {clip(exc.message)}")
    for name, declared, expected in (
        ("terminal_state", sub.terminal_state, record.terminal_state),
        ("reason_code", sub.reason_code, record.reason_code),
    ):
        if declared != expected:
            return Violation(
                RefusalCode.RESEARCH_OUTCOME_MISMATCH,
                f"a {record.format} record is anchored with {name} {expected!r}, not {show(declared)}",
                name,
                declared,
                expected,
            )
    observed = sub.observed_hashes
    for index, (source_ref, page_hash) in enumerate(record.fetched):
        if page_hash not in observed:
            return Violation(
                RefusalCode.RESEARCH_PAGE_NOT_OBSERVED,
                f"fetched page {page_hash!r} of source {show(source_ref)} is not among the stage's observations",
                f"artifact.fetched[{index}].page_content_hash",
                page_hash,
            )
    return None


def _at(path: str) -> str:
    """A path inside the report (``report.claims[0]``) as a Refusal's ``field`` (``artifact.claims[0]``)."""
    path = path.removeprefix("report").removeprefix(".")
    return f"artifact.{path}" if path else "artifact"
