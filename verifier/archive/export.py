"""``bernstein topic export --wacz``: each exported run's research pages as a WACZ, inside the dump.

The WACZ files are made from the dump itself, once it is written: its journal (``research_pages``) and its
``cas/`` (each page's bytes read by the hash the journal pins and re-hashed), so an archive holds exactly what the
dump holds. Layout added to the dump::

    wacz/<run>.wacz     one per exported run with at least one research page (run ids are file-name safe)

and ``manifest.json`` gains ``"wacz": {"<run>": {"path", "pages", "missing_pages", "sha256"}}``. A page whose
bytes the store lacks is not archived (``missing_pages`` counts it, and the check reports it missing). Each WACZ is
validated by py-wacz after it is written; one that does not validate is an ``ArchiveError``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bernstein.schemas.canonical import sha256_digest
from bernstein.schemas.records import is_valid_id
from bernstein.substrate.cas import BlobStore, CasError, DirBlobStore
from bernstein.verifier.archive.libs import ArchiveError, require
from bernstein.verifier.archive.package import package_wacz, validate_wacz
from bernstein.verifier.archive.pages import research_pages, runs_with_research
from bernstein.verifier.archive.warc import WARC_NAME, write_warc
from bernstein.verifier.sources import DumpSource

WACZ_DIR: Final = "wacz"


@dataclass(frozen=True)
class WaczWritten:
    run_id: str
    path: Path
    pages: int
    missing_pages: int
    sha256: str


def export_wacz(
    dump: Path, runs: Iterable[str] | None = None, *, progress: Callable[[str], None] | None = None
) -> tuple[WaczWritten, ...]:
    """Write ``<dump>/wacz/<run>.wacz`` for ``runs`` (None: every run of the dump with research stages)."""
    require()
    source = DumpSource(dump)
    if not source.cas_dir.is_dir():
        raise ArchiveError(f"{dump} has no cas/ directory: the pages' bytes are not in the dump (export with a content store)")
    cas = DirBlobStore(source.cas_dir)
    selected = runs_with_research(source) if runs is None else sorted(set(runs))
    directory = dump / WACZ_DIR
    written: list[WaczWritten] = []
    for run_id in selected:
        if not is_valid_id(run_id):
            continue  # the scheduler journals only valid run ids; nothing else is named after a file
        pages = research_pages(source, run_id, cas=cas)
        if not pages:
            continue
        directory.mkdir(exist_ok=True)
        out = directory / f"{run_id}.wacz"
        with tempfile.TemporaryDirectory(prefix=".warc-", dir=directory) as work:
            warc = write_warc(Path(work) / WARC_NAME, run_id, pages, _reader(cas))
            package_wacz(warc.path, warc.pages, out, run_id=run_id)
        validation = validate_wacz(out)
        if not validation.valid:
            raise ArchiveError(
                f"py-wacz does not validate the archive written for run {run_id!r} ({out}): {validation.last_line}"
            )
        done = WaczWritten(run_id, out, len(warc.pages), len(warc.missing), _sha256(out))
        written.append(done)
        if progress:
            missing = f" ({done.missing_pages} missing from the store)" if done.missing_pages else ""
            progress(f"archived {done.pages} research pages of run {run_id} in {out}{missing}")
    _record_in_manifest(dump, written)
    return tuple(written)


def _reader(cas: BlobStore) -> Callable[[str], bytes | None]:
    def read(digest: str) -> bytes | None:
        try:
            data = cas.get(digest)
        except CasError:
            return None
        return data if sha256_digest(data) == digest else None

    return read


def _sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


def _record_in_manifest(dump: Path, written: list[WaczWritten]) -> None:
    path = dump / "manifest.json"
    manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    manifest["wacz"] = {
        w.run_id: {
            "path": f"{WACZ_DIR}/{w.path.name}",
            "pages": w.pages,
            "missing_pages": w.missing_pages,
            "sha256": w.sha256,
        }
        for w in written
    }
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
