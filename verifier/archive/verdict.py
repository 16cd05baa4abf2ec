"""The verdict on a WACZ checked against a run's journal: typed problems, each naming its page, and its lines.

Problems are the verifier's ``Problem`` (``bernstein.verifier.report``), with the page they concern: a page problem
points at the journal entry that pins the page (``stream`` ``journal``, its ``offset`` and ``seq``), ``expected`` is
what the journal (or the report) says and ``recomputed`` what the archive holds. ``PageProblem`` adds where in the
archive it was found (the ZIP member and the record's offset in it) and which page (stage, source).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from bernstein.substrate.text import plural
from bernstein.verifier.report import Problem


class ArchiveCode:
    """Stable problem codes of the archive check (docs/verifier.md, "A WACZ against the journal")."""

    PAGE_CHANGED: Final = "WACZ_PAGE_CHANGED"
    """A record of a page the journal pins holds bytes hashing to something else."""
    PAGE_MISSING: Final = "WACZ_PAGE_MISSING"
    """A page the journal pins has no record in the archive."""
    RECORD_UNEXPECTED: Final = "WACZ_RECORD_UNEXPECTED"
    """A page-bearing record (response, resource, revisit, conversion) that is no page of the run's journal, or a
    second record for one."""
    DIGEST_MISMATCH: Final = "WACZ_DIGEST_MISMATCH"
    """The page bytes are right, but a digest header states other ones (``WARC-Payload-Digest``,
    ``WARC-Bernstein-Content-Hash``)."""
    METADATA_MISMATCH: Final = "WACZ_METADATA_MISMATCH"
    """The page bytes are right, but the record says something else than the journal and the report about them
    (type, URL, date, HTTP status or headers, source, redirects, journal position)."""
    PACKAGE_MISMATCH: Final = "WACZ_PACKAGE_MISMATCH"
    """The package does not agree with itself: a file's hash is not the one ``datapackage.json`` lists, a file is
    missing or not listed, or ``datapackage.json`` is not the one ``datapackage-digest.json`` hashes."""
    MEMBER_UNREADABLE: Final = "WACZ_MEMBER_UNREADABLE"
    """A file of the package cannot be read (its ZIP checksum fails, a WARC does not decompress or parse); the
    records after the damage are not read."""


CODES: Final = tuple(value for name, value in vars(ArchiveCode).items() if name.isupper())
"""Every code of the archive check, in the order above."""


@dataclass(frozen=True)
class PageProblem(Problem):
    """A ``Problem`` of the archive check, with the page and the archive position it concerns (fields may be empty)."""

    stage_id: str = ""
    source_ref: str = ""
    url: str = ""
    member: str = ""
    """The file inside the WACZ (``archive/research-pages.warc.gz``, ``datapackage.json``)."""
    member_offset: int | None = None
    """The record's offset in the (decompressed WARC) member, as warcio reports it."""


@dataclass(frozen=True)
class ArchiveVerdict:
    """The archive of one run's research pages, checked against the run's journal."""

    run_id: str
    file: str
    pages: int
    """Pages the journal pins (page observations of research stages)."""
    stages: int
    """Research stages with pages."""
    matched: int
    """Pages whose record holds exactly the journal's bytes."""
    records: int
    """Page-bearing records read from the archive's WARC files."""
    metadata_checked: int
    """Matched pages whose fetch metadata was compared too (the stage's report was read)."""
    problems: tuple[PageProblem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "run": self.run_id,
            "file": self.file,
            "pages": self.pages,
            "stages": self.stages,
            "matched": self.matched,
            "records": self.records,
            "metadata_checked": self.metadata_checked,
            "problems": [p.to_json() for p in self.problems],
        }

    def lines(self) -> Iterator[str]:
        """The text section: a heading, one line per problem, the archive's last line (escaped by the caller)."""
        yield f"Archive check run={self.run_id} file={self.file}"
        if self.ok:
            checked = f"; fetch metadata of {self.metadata_checked} compared with the report" if self.pages else ""
            yield (
                f"  OK pages ({plural(self.pages, 'page')} of {plural(self.stages, 'research stage')}: each record holds "
                f"the bytes the journal pins{checked})"
            )
            yield f"archive verified -- the archive holds exactly the {plural(self.pages, 'page')} the journal pins."
            return
        for problem in self.problems:
            where = f" {problem.stage_id} {problem.url or problem.source_ref}" if problem.stage_id else ""
            member = f" ({problem.member}" + (f" @{problem.member_offset}" if problem.member_offset is not None else "") + ")"
            yield f"  MISMATCH {problem.code}{where}{member if problem.member else ''} -- {problem.message}"
        yield (
            f"archive mismatch -- {plural(len(self.problems), 'problem')}; {self.matched} of {plural(self.pages, 'page')} "
            "match the journal."
        )
