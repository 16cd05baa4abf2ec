"""The research pages a run's journal pins: what its WACZ archive must hold, and what each record must say.

One function, ``research_pages``, serves both sides: the export writes one WARC record per page it returns, and the
check recomputes the same list from the journal and compares the archive with it. A page is a ``page`` observation
of a ``research`` stage's journal entry: its ref (the planned source URL) and content hash come from the journal
itself, so the bytes are checked without a content store. The fetch metadata the replay uses (the final URL after
redirects, the HTTP status, the content type, the redirect hops) comes from the stage's report, read from the
content store by the artifact hash the entry pins and re-hashed there; when the report cannot be read (no store,
``--records-only``, a missing blob) or the stage anchored an abort record (a budget refusal or a failed fetch, which
records no metadata), the page carries none (``metadata`` False): it is archived as a ``resource`` record at its
planned URL, and the check then compares the bytes and the journal's names only.

The journal records no fetch time: a page's date is its journal entry's Kafka timestamp, which the scheduler takes
from the submission (after the fetch).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from bernstein.schemas import codec
from bernstein.schemas.canonical import is_digest, sha256_digest
from bernstein.schemas.documents.research import (
    PAGE_OBSERVATION,
    MalformedResearchArtifact,
    ResearchReport,
    load_document,
    parse_report_document,
)
from bernstein.schemas.records import ENTRY_ACTIVITY_RESULT
from bernstein.substrate.cas import BlobStore, CasError
from bernstein.verifier.sources import RecordSource

RESEARCH_KIND: Final = "research"


@dataclass(frozen=True)
class ArchivedPage:
    """One fetched page of a research stage, as the journal pins it and its report describes it."""

    run_id: str
    stage_id: str
    observation: int
    """The observation's position in the entry's observations (a page's key with run and stage)."""
    partition: int
    offset: int
    """The journal record's offset: the entry that pins the page."""
    seq: int
    timestamp_ms: int
    source_ref: str
    """The observation's ref: the source URL the run planned."""
    content_hash: str
    """The journal's ``sha256:<hex>`` of the page bytes."""
    metadata: bool = False
    """True when the fields below come from the stage's report (else: the planned URL, nothing recorded)."""
    final_url: str = ""
    status: int | None = None
    content_type: str | None = None
    redirects: tuple[tuple[int, str], ...] = ()

    @property
    def url(self) -> str:
        """Where the page replays: the URL that answered with these bytes (the planned one when not recorded)."""
        return self.final_url if self.metadata and self.final_url else self.source_ref

    @property
    def is_response(self) -> bool:
        """A ``response`` record (the report recorded an HTTP status), else a ``resource`` record."""
        return self.metadata and self.status is not None and 100 <= self.status <= 599

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.run_id, self.stage_id, self.observation)

    def describe(self) -> str:
        return f"stage {self.stage_id!r} page {self.observation} ({self.source_ref})"


@dataclass(frozen=True)
class _Entry:
    partition: int
    offset: int
    timestamp_ms: int
    entry: Mapping[str, Any]


def research_pages(
    source: RecordSource, run_id: str, *, cas: BlobStore | None, partition: int | None = None
) -> list[ArchivedPage]:
    """Every page observation of the run's research stages, in journal order (``partition``: only that one)."""
    pages: list[ArchivedPage] = []
    for found in _research_entries(source, run_id, partition):
        entry = found.entry
        report = _report(cas, str(entry.get("artifact_hash", "")))
        for position, observation in enumerate(entry.get("observations") or ()):
            if not isinstance(observation, Mapping) or observation.get("kind") != PAGE_OBSERVATION:
                continue
            ref, digest = str(observation.get("ref", "")), observation.get("content_hash")
            if not is_digest(digest):
                continue
            page = ArchivedPage(
                run_id=run_id,
                stage_id=str(entry.get("stage_id", "")),
                observation=position,
                partition=found.partition,
                offset=found.offset,
                seq=int(entry.get("seq", -1)),
                timestamp_ms=found.timestamp_ms,
                source_ref=ref,
                content_hash=str(digest),
            )
            pages.append(_described(page, report))
    return pages


def runs_with_research(source: RecordSource) -> list[str]:
    """Every run (journal key) with at least one research stage, in run id order."""
    runs: set[str] = set()
    for partition in source.partitions("journal"):
        for record in source.records("journal", partition, headers=False):
            if record.key is None:
                continue
            entry = _research_entry(record.value)
            if entry is not None:
                try:
                    runs.add(record.key.decode("utf-8"))
                except UnicodeDecodeError:
                    continue
    return sorted(runs)


def _research_entries(source: RecordSource, run_id: str, partition: int | None) -> Iterator[_Entry]:
    key = run_id.encode()
    partitions = source.partitions("journal") if partition is None else [partition]
    for number in partitions:
        for record in source.records("journal", number, headers=False):
            if record.key != key:
                continue
            entry = _research_entry(record.value)
            if entry is not None:
                yield _Entry(record.partition, record.offset, record.timestamp_ms, entry)


def _research_entry(value: bytes | None) -> Mapping[str, Any] | None:
    try:
        name, fields = codec.split_envelope(value or b"")
        if name != codec.JOURNAL_RECORD:
            return None
        decoded = codec.decode(fields[0])
    except (codec.DecodeError, IndexError, TypeError, ValueError):
        return None  # the verifier's chain check names an undecodable record; nothing of it is archived
    entry = decoded.record
    if decoded.schema.name not in codec.JOURNAL_ENTRIES or entry.get("entry_type") != ENTRY_ACTIVITY_RESULT:
        return None
    return entry if entry.get("kind") == RESEARCH_KIND else None


def _report(cas: BlobStore | None, artifact_hash: str) -> ResearchReport | None:
    """The stage's report, when the store holds bytes hashing to the pinned artifact hash and they parse as one."""
    if cas is None or not is_digest(artifact_hash):
        return None
    try:
        data = cas.get(artifact_hash)
    except CasError:
        return None
    if sha256_digest(data) != artifact_hash:
        return None
    try:
        return parse_report_document(load_document(data))
    except MalformedResearchArtifact:
        return None  # an abort record (budget refusal, failed fetch) or a malformed report: no fetch metadata


def _described(page: ArchivedPage, report: ResearchReport | None) -> ArchivedPage:
    source = report.source_for(page.source_ref) if report is not None else None
    if source is None or source.page_content_hash != page.content_hash:
        return page
    return replace(
        page,
        metadata=True,
        final_url=source.final_url,
        status=source.status,
        content_type=source.content_type,
        redirects=tuple((hop.status, hop.url) for hop in source.redirects),
    )
