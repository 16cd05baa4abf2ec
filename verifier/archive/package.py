"""Packaging a WARC of research pages as a WACZ with py-wacz, and py-wacz's own validation of a WACZ.

py-wacz is a command-line tool first: its ``create`` and ``validate`` print progress on stdout and signal failure
by their return value. Both are called through its entry point (``wacz.main.main``) with stdout captured, so the
project's output stays its own and a failure carries py-wacz's words; warnings it raises are silenced, and its
exceptions become ``ArchiveError`` here.

The WACZ holds ``archive/research-pages.warc.gz``, the CDXJ index py-wacz builds (``indexes/``), ``pages/pages.jsonl``
(one entry per page, at the URL and date of its record, titled with its stage and source), ``datapackage.json``
(every file's SHA-256) and ``datapackage-digest.json``. py-wacz stamps the creation time into the datapackage and
the ZIP entries, so two exports of the same run differ in those bytes only; the WARC inside is the same.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bernstein.verifier.archive import libs
from bernstein.verifier.archive.libs import ArchiveError
from bernstein.verifier.archive.pages import ArchivedPage
from bernstein.verifier.archive.warc import field, record_id, warc_date

_FOREIGN: Final = (OSError, ValueError, LookupError, TypeError, EOFError, zlib.error, zipfile.BadZipFile)
"""What py-wacz and the libraries under it raise on bad input or a failed write."""


@dataclass(frozen=True)
class Validation:
    """py-wacz's verdict on a WACZ, with what it printed."""

    valid: bool
    output: str

    @property
    def last_line(self) -> str:
        lines = [line for line in self.output.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def package_wacz(warc: Path, pages: Sequence[ArchivedPage], out: Path, *, run_id: str) -> None:
    """Write ``out`` (replaced atomically): the WACZ of ``warc``, listing ``pages`` in its page index."""
    main: Any = libs.module("wacz.main").main
    with tempfile.TemporaryDirectory(prefix=".wacz-", dir=out.parent) as work:
        listing = Path(work) / "pages.jsonl"
        listing.write_text(_page_index(pages, run_id), encoding="utf-8")
        staged = Path(work) / "archive.wacz"
        args = ["create", "-o", str(staged), str(warc), "-p", str(listing)]
        args += ["--title", f"research pages of run {field(run_id)}"]
        args += ["--desc", "the fetched pages of the run's research stages, as its journal pins them (bernstein)"]
        code, printed = _call(main, args)
        if code != 0:
            raise ArchiveError(f"py-wacz could not package {out.name}: {_last(printed) or f'exit {code}'}")
        os.chmod(staged, 0o644)
        os.replace(staged, out)


def validate_wacz(path: Path) -> Validation:
    """``wacz validate -f PATH``: py-wacz's checks (required files, datapackage schema, paths and file hashes)."""
    main: Any = libs.module("wacz.main").main
    code, printed = _call(main, ["validate", "-f", str(path)])
    return Validation(code == 0, printed)


def _call(main: Any, args: list[str]) -> tuple[int, str]:
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            warnings.simplefilter("ignore")
            code = main(args)
    except SystemExit as exc:  # its argument parser
        return (exc.code if isinstance(exc.code, int) else 1), printed.getvalue()
    except _FOREIGN as exc:
        raise ArchiveError(f"py-wacz failed on {args[-1]}: {type(exc).__name__}: {exc}") from None
    return (code if isinstance(code, int) else 0), printed.getvalue()


def _page_index(pages: Sequence[ArchivedPage], run_id: str) -> str:
    header = {"format": "json-pages-1.0", "id": "pages", "title": f"research pages of run {field(run_id)}"}
    lines = [json.dumps(header, sort_keys=True)]
    for page in pages:
        entry = {
            "id": record_id(page).removeprefix("<urn:uuid:").removesuffix(">"),
            "url": field(page.url),
            "ts": warc_date(page.timestamp_ms),
            "title": f"{page.stage_id}: {page.source_ref}",
        }
        lines.append(json.dumps(entry, sort_keys=True))
    return "\n".join(lines) + "\n"


def _last(printed: str) -> str:
    lines = [line.strip() for line in printed.splitlines() if line.strip()]
    return lines[-1] if lines else ""
