"""Check a WACZ against the pages a run's journal pins (``research_pages``): every page there, with its bytes, once.

In order:

1. the package agrees with itself: every file hashes to what ``datapackage.json`` lists, every file is listed, and
   ``datapackage.json`` hashes to what ``datapackage-digest.json`` says (``WACZ_PACKAGE_MISMATCH``);
2. every WARC under ``archive/`` is read with warcio, record by record (``WACZ_MEMBER_UNREADABLE`` where one cannot
   be read further). A page-bearing record (``response``, ``resource``, ``revisit``, ``conversion``) names its page
   by its ``WARC-Bernstein-Run``, ``-Stage`` and ``-Observation`` headers; one that names no page of the journal,
   or a page already matched, is ``WACZ_RECORD_UNEXPECTED``;
3. a matched record's payload is hashed here: bytes other than the journal's are ``WACZ_PAGE_CHANGED`` (the page,
   the journal's hash, the recomputed one). Right bytes under a wrong digest header are ``WACZ_DIGEST_MISMATCH``;
   under other names, dates or fetch metadata than the journal and the report give, ``WACZ_METADATA_MISMATCH``
   (one problem per record: the first that applies);
4. a page with no record is ``WACZ_PAGE_MISSING``.

The archive's own claims (its digests, its index) are never trusted: the journal's hashes are the reference, and
the payloads are re-hashed. A file that is not a ZIP at all is unreadable input (``ArchiveUnreadable``), not a
verdict. warcio's and zipfile's exceptions stop here.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import io
import json
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Final

from bernstein.schemas.canonical import DIGEST_PREFIX
from bernstein.verifier.archive import libs
from bernstein.verifier.archive.libs import ArchiveUnreadable
from bernstein.verifier.archive.pages import ArchivedPage
from bernstein.verifier.archive.verdict import ArchiveCode, ArchiveVerdict, PageProblem
from bernstein.verifier.archive.warc import (
    H_CONTENT_HASH,
    H_HTTP,
    H_JOURNAL,
    H_OBSERVATION,
    H_REDIRECTS,
    H_RUN,
    H_SOURCE,
    H_STAGE,
    content_type,
    field,
    http_headers,
    http_status_line,
    page_headers,
    record_type,
    warc_date,
)

PAGE_RECORDS: Final = frozenset({"response", "resource", "revisit", "conversion"})
"""Record types a replay tool shows as a URL's content."""
DATAPACKAGE: Final = "datapackage.json"
DIGEST_FILE: Final = "datapackage-digest.json"
_CHUNK: Final = 1 << 16
_UNREADABLE: Final = (OSError, ValueError, LookupError, EOFError, zlib.error, zipfile.BadZipFile)


def check_wacz(path: Path, pages: Sequence[ArchivedPage], *, run_id: str) -> ArchiveVerdict:
    """The verdict on ``path`` against ``pages`` (all of one run's, from ``research_pages``)."""
    archive = open_wacz(path)
    with archive:
        walk = _Walk(pages)
        _check_package(archive, walk)
        for member in sorted(n for n in archive.namelist() if n.startswith("archive/") and n.endswith((".warc", ".warc.gz"))):
            _check_warc(archive, member, walk)
        for page in pages:
            if page.key not in walk.matched:
                walk.problem(
                    ArchiveCode.PAGE_MISSING,
                    f"{page.describe()} is not in the archive: no record names it (the journal pins {page.content_hash})",
                    page=page,
                    expected=page.content_hash,
                )
    return ArchiveVerdict(
        run_id=run_id,
        file=str(path),
        pages=len(pages),
        stages=len({page.stage_id for page in pages}),
        matched=walk.intact,
        records=walk.records,
        metadata_checked=walk.metadata_checked,
        problems=tuple(walk.problems),
    )


def open_wacz(path: Path) -> zipfile.ZipFile:
    """The WACZ as a ZIP file, or ``ArchiveUnreadable`` (missing, not a regular file, not a ZIP)."""
    if not path.is_file():
        raise ArchiveUnreadable(f"{path}: no such file (name the .wacz written by `bernstein topic export --wacz`)")
    try:
        return zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise ArchiveUnreadable(f"{path} is not a WACZ (a ZIP file): {exc}") from None


class _Walk:
    def __init__(self, pages: Sequence[ArchivedPage]) -> None:
        self.expected = {(field(p.run_id), field(p.stage_id), str(p.observation)): p for p in pages}
        self.matched: set[tuple[str, str, int]] = set()
        self.intact = 0
        self.records = 0
        self.metadata_checked = 0
        self.problems: list[PageProblem] = []

    def problem(
        self,
        code: str,
        message: str,
        *,
        page: ArchivedPage | None = None,
        member: str = "",
        at: int | None = None,
        expected: str = "",
        recomputed: str = "",
        url: str = "",
    ) -> None:
        where: dict[str, Any] = {}
        if page is not None:
            where = {"stream": "journal", "offset": page.offset, "seq": page.seq, "stage_id": page.stage_id}
            where |= {"source_ref": page.source_ref, "url": url or page.url}
        elif url:
            where = {"url": url}
        self.problems.append(
            PageProblem(code, message, expected=expected, recomputed=recomputed, member=member, member_offset=at, **where)
        )


def _check_package(archive: zipfile.ZipFile, walk: _Walk) -> None:
    names = {info.filename for info in archive.infolist() if not info.is_dir()}
    package = _read(archive, DATAPACKAGE, walk)
    if package is None:
        return
    try:
        document = json.loads(package)
        resources = {str(r["path"]): str(r["hash"]) for r in document["resources"]}
    except (ValueError, KeyError, TypeError) as exc:
        walk.problem(ArchiveCode.PACKAGE_MISMATCH, f"{DATAPACKAGE} does not list the package's files: {exc}", member=DATAPACKAGE)
        return
    digest = _read(archive, DIGEST_FILE, walk) if DIGEST_FILE in names else None
    if digest is not None:
        try:
            stated = str(json.loads(digest)["hash"])
        except (ValueError, KeyError, TypeError):
            stated = ""
        actual = "sha256:" + hashlib.sha256(package).hexdigest()
        if stated != actual:
            walk.problem(
                ArchiveCode.PACKAGE_MISMATCH,
                f"{DATAPACKAGE} hashes to {actual}, not to the {stated or 'missing hash'} {DIGEST_FILE} states",
                member=DATAPACKAGE,
                expected=stated,
                recomputed=actual,
            )
    for name in sorted(names - set(resources) - {DATAPACKAGE, DIGEST_FILE}):
        walk.problem(ArchiveCode.PACKAGE_MISMATCH, f"{name} is in the package but not listed in {DATAPACKAGE}", member=name)
    for name, stated in sorted(resources.items()):
        if name not in names:
            walk.problem(ArchiveCode.PACKAGE_MISMATCH, f"{DATAPACKAGE} lists {name}, which the package lacks", member=name)
            continue
        hashed = _member_hash(archive, name, stated.partition(":")[0], walk)
        if hashed is not None and hashed != stated:
            walk.problem(
                ArchiveCode.PACKAGE_MISMATCH,
                f"{name} hashes to {hashed}, not to the {stated} {DATAPACKAGE} lists",
                member=name,
                expected=stated,
                recomputed=hashed,
            )


def _read(archive: zipfile.ZipFile, name: str, walk: _Walk) -> bytes | None:
    try:
        return archive.read(name)
    except KeyError:
        walk.problem(ArchiveCode.PACKAGE_MISMATCH, f"the package has no {name}", member=name)
    except _UNREADABLE as exc:
        walk.problem(ArchiveCode.MEMBER_UNREADABLE, f"{name} cannot be read: {exc}", member=name)
    return None


def _member_hash(archive: zipfile.ZipFile, name: str, algorithm: str, walk: _Walk) -> str | None:
    if algorithm not in ("sha256", "md5"):
        walk.problem(
            ArchiveCode.PACKAGE_MISMATCH, f"{DATAPACKAGE} lists {name} with an unknown hash type {algorithm!r}", member=name
        )
        return None
    hasher = hashlib.new(algorithm, usedforsecurity=algorithm == "sha256")
    try:
        with archive.open(name) as stream:
            for chunk in iter(lambda: stream.read(_CHUNK), b""):
                hasher.update(chunk)
    except _UNREADABLE as exc:
        walk.problem(ArchiveCode.MEMBER_UNREADABLE, f"{name} cannot be read: {exc}", member=name)
        return None
    return f"{algorithm}:{hasher.hexdigest()}"


def _check_warc(archive: zipfile.ZipFile, member: str, walk: _Walk) -> None:
    iterator_module: Any = libs.module("warcio.archiveiterator")
    failures: tuple[type[BaseException], ...] = (*_UNREADABLE, *_warcio_errors())
    try:
        # warcio writes its own warnings about malformed records to stderr; the problems below say what matters
        with archive.open(member) as stream, contextlib.redirect_stderr(io.StringIO()):
            records = iterator_module.ArchiveIterator(stream)
            for record in records:
                if record.rec_type not in PAGE_RECORDS:
                    continue
                walk.records += 1
                payload = _hash_payload(record)  # first: asking for the offset reads the record to its end
                _check_record(walk, member, int(records.get_record_offset()), record, payload)
    except failures as exc:
        walk.problem(
            ArchiveCode.MEMBER_UNREADABLE,
            f"{member} cannot be read past this point: {type(exc).__name__}: {exc}",
            member=member,
        )


def _warcio_errors() -> tuple[type[BaseException], ...]:
    exceptions: Any = libs.module("warcio.exceptions")
    statusandheaders: Any = libs.module("warcio.statusandheaders")
    return (exceptions.ArchiveLoadFailed, statusandheaders.StatusAndHeadersParserException)


def _check_record(walk: _Walk, member: str, at: int, record: Any, payload: tuple[bytes, int]) -> None:
    headers = record.rec_headers
    key = (
        str(headers.get_header(H_RUN) or ""),
        str(headers.get_header(H_STAGE) or ""),
        str(headers.get_header(H_OBSERVATION) or ""),
    )
    payload_sha256, payload_size = payload
    recomputed = DIGEST_PREFIX + payload_sha256.hex()
    target = str(headers.get_header("WARC-Target-URI") or "")
    page = walk.expected.get(key)
    if page is None or page.key in walk.matched:
        again = "a second record for " + page.describe() if page is not None else "it names no page of the run's journal"
        walk.problem(
            ArchiveCode.RECORD_UNEXPECTED,
            f"{record.rec_type} record for {target!r}: {again} (run, stage, observation {list(key)!r})",
            member=member,
            at=at,
            recomputed=recomputed,
            url=target,
        )
        return
    walk.matched.add(page.key)
    if recomputed != page.content_hash:
        walk.problem(
            ArchiveCode.PAGE_CHANGED,
            f"{page.describe()}: the archived bytes ({payload_size} bytes) hash to {recomputed}, the journal pins "
            f"{page.content_hash}",
            page=page,
            member=member,
            at=at,
            expected=page.content_hash,
            recomputed=recomputed,
            url=target,
        )
        return
    walk.intact += 1
    stated = str(headers.get_header("WARC-Payload-Digest") or "")
    content_hash = str(headers.get_header(H_CONTENT_HASH) or "")
    wrong, right = "", ""
    if not _states(stated, payload_sha256):
        wrong, right = stated, warc_digest_of(payload_sha256)
    elif content_hash != page.content_hash:
        wrong, right = content_hash, page.content_hash
    if wrong != right:
        walk.problem(
            ArchiveCode.DIGEST_MISMATCH,
            f"{page.describe()}: the bytes are the journal's, but the record states the digest {wrong!r}",
            page=page,
            member=member,
            at=at,
            expected=right,
            recomputed=wrong,
            url=target,
        )
        return
    difference = _metadata_difference(page, record, payload_size)
    if page.metadata:
        walk.metadata_checked += 1
    if difference is not None:
        name, expected, found = difference
        walk.problem(
            ArchiveCode.METADATA_MISMATCH,
            f"{page.describe()}: the bytes are the journal's, but the record's {name} is {found!r}, not {expected!r}",
            page=page,
            member=member,
            at=at,
            expected=expected,
            recomputed=found,
            url=target,
        )


def _hash_payload(record: Any) -> tuple[bytes, int]:
    """SHA-256 of the record's payload as stored (after the HTTP headers; no decoding), and its size."""
    hasher = hashlib.sha256()
    size = 0
    stream: IO[bytes] = record.raw_stream
    for chunk in iter(lambda: stream.read(_CHUNK), b""):
        hasher.update(chunk)
        size += len(chunk)
    return hasher.digest(), size


def warc_digest_of(sha256: bytes) -> str:
    return "sha256:" + base64.b32encode(sha256).decode("ascii")


def _states(stated: str, sha256: bytes) -> bool:
    """Whether a ``WARC-Payload-Digest`` value states these SHA-256 bytes (base32 as warcio writes, or hex)."""
    algorithm, _, value = stated.partition(":")
    if algorithm.lower() not in ("sha256", "sha-256"):
        return False
    try:
        return base64.b32decode(value.upper()) == sha256
    except (binascii.Error, ValueError):
        pass
    try:
        return bytes.fromhex(value) == sha256
    except ValueError:
        return False


def _metadata_difference(page: ArchivedPage, record: Any, size: int) -> tuple[str, str, str] | None:
    """The first field the record states otherwise than the journal (and, when read, the report): name, expected, found."""
    headers = record.rec_headers
    wanted: list[tuple[str, str]] = [
        ("WARC-Date", warc_date(page.timestamp_ms)),
        (H_SOURCE, field(page.source_ref)),
        (H_JOURNAL, page_headers(page)[H_JOURNAL]),
    ]
    if page.metadata:
        full = page_headers(page)
        wanted += [
            ("WARC-Type", record_type(page)),
            ("WARC-Target-URI", field(page.url)),
            (H_REDIRECTS, full.get(H_REDIRECTS, "")),
            (H_HTTP, full.get(H_HTTP, "")),
        ]
    for name, expected in wanted:
        found = str(headers.get_header(name) or "") if name != "WARC-Type" else str(record.rec_type)
        if found != expected:
            return name, expected, found
    if not page.metadata:
        return None
    if page.is_response:
        http = record.http_headers
        status = str(http.statusline) if http is not None else ""
        if status != http_status_line(page):
            return "HTTP status line", http_status_line(page), status
        found_headers = [(str(k), str(v)) for k, v in http.headers] if http is not None else []
        if found_headers != http_headers(page, size):
            return "HTTP headers", json.dumps(http_headers(page, size)), json.dumps(found_headers)
    elif str(headers.get_header("Content-Type") or "") != content_type(page):
        return "Content-Type", content_type(page), str(headers.get_header("Content-Type") or "")
    return None
