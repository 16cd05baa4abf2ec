"""Research pages as standard web archives (WACZ), written from the journal and checked against it.

- ``export_wacz`` (``bernstein topic export --wacz``): each exported run's research pages, from the dump's journal
  and ``cas/``, as ``<dump>/wacz/<run>.wacz``: WARC records whose payload digests are the journal's page hashes,
  packaged by py-wacz so the pages replay in standard archive tools (ReplayWeb.page, pywb);
- ``verify_with_archive`` (``bernstein activity verify RUN --wacz FILE``): the run's verdict, then the archive checked
  against the pages its journal pins (``check_wacz``: every page there, with the journal's bytes, and nothing else).

Modules: ``pages`` (what the journal pins), ``warc`` (what a record holds; the writer), ``package`` (py-wacz),
``check`` and ``verdict`` (the check and its typed problems), ``export``, ``verify``; ``libs`` is the only door to
warcio and py-wacz, which the ``archive`` extra installs (docs/research.md, "Pages as a web archive").
"""

from __future__ import annotations

from bernstein.verifier.archive.check import check_wacz, open_wacz
from bernstein.verifier.archive.export import WaczWritten, export_wacz
from bernstein.verifier.archive.libs import ARCHIVE_EXTRA, ArchiveError, ArchiveExtraMissing, ArchiveUnreadable, require
from bernstein.verifier.archive.package import Validation, validate_wacz
from bernstein.verifier.archive.pages import ArchivedPage, research_pages
from bernstein.verifier.archive.verdict import ArchiveCode, ArchiveVerdict, PageProblem
from bernstein.verifier.archive.verify import verify_with_archive

__all__ = [
    "ARCHIVE_EXTRA",
    "ArchiveCode",
    "ArchiveError",
    "ArchiveExtraMissing",
    "ArchiveUnreadable",
    "ArchiveVerdict",
    "ArchivedPage",
    "PageProblem",
    "Validation",
    "WaczWritten",
    "check_wacz",
    "export_wacz",
    "open_wacz",
    "require",
    "research_pages",
    "validate_wacz",
    "verify_with_archive",
]
