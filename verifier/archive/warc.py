"""WARC records of research pages: what each record holds (one function, for the writer and the check) and the writer.

Each page is one record, written with warcio (WARC/1.1, gzip per record):

- ``response`` when the stage's report recorded an HTTP status: ``WARC-Target-URI`` the final URL, and HTTP headers
  reconstructed from the report (the status line, ``Content-Type`` when recorded, ``Content-Length``), followed by
  the page bytes exactly as the CAS holds them (the fetcher removed any content encoding before hashing). The
  server's other headers were never journalled; ``WARC-Bernstein-HTTP`` says so.
- ``resource`` when nothing was recorded (an abort record's pages, a fetch function that returned bare bytes, a
  report that could not be read): the page bytes at the planned URL, no HTTP status invented.

``WARC-Payload-Digest`` and ``WARC-Block-Digest`` are SHA-256 in warcio's form (``sha256:<base32>``), so replay tools
and ``warcio check`` verify them; ``WARC-Bernstein-Content-Hash`` is the journal's ``sha256:<hex>`` for the same
bytes. The ``WARC-Bernstein-*`` headers name the page in the journal (run, stage, observation index, source,
journal position) and the redirect hops the report recorded. The record id is derived from the page's key and the
date is its journal entry's timestamp, so the WARC file is a pure function of the journal and the page bytes.
Header values are written with control characters percent-encoded (a ref from another SDK cannot add a header).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from bernstein.verifier.archive import libs
from bernstein.verifier.archive.pages import ArchivedPage

WARC_VERSION: Final = "1.1"
WARC_NAME: Final = "research-pages.warc.gz"
"""The WARC's file name: ``archive/research-pages.warc.gz`` inside the WACZ."""
H_CONTENT_HASH: Final = "WARC-Bernstein-Content-Hash"
H_RUN: Final = "WARC-Bernstein-Run"
H_STAGE: Final = "WARC-Bernstein-Stage"
H_OBSERVATION: Final = "WARC-Bernstein-Observation"
H_SOURCE: Final = "WARC-Bernstein-Source"
H_JOURNAL: Final = "WARC-Bernstein-Journal"
H_REDIRECTS: Final = "WARC-Bernstein-Redirects"
H_HTTP: Final = "WARC-Bernstein-HTTP"
RECONSTRUCTED: Final = "reconstructed from the research report: status line and content type; no other header was journalled"
UNKNOWN_TYPE: Final = "application/octet-stream"
_NAMESPACE: Final = uuid.UUID("6b1f3c52-6f0e-4d55-9d2e-2f0c1b8e7a41")


def field(text: str) -> str:
    """``text`` as a header value: every non-printable character (CR, LF, controls, separators) percent-encoded."""
    return text if text.isprintable() else "".join(c if c.isprintable() else quote(c, safe="") for c in text)


def warc_digest(data: bytes) -> str:
    """warcio's digest form of SHA-256: ``sha256:<base32>``."""
    return "sha256:" + base64.b32encode(hashlib.sha256(data).digest()).decode("ascii")


def warc_date(timestamp_ms: int) -> str:
    """A WARC/1.1 date with milliseconds (the journal's Kafka timestamp resolution)."""
    moment = datetime.fromtimestamp(max(timestamp_ms, 0) // 1000, UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{max(timestamp_ms, 0) % 1000:03d}Z"


def record_id(page: ArchivedPage) -> str:
    return f"<urn:uuid:{uuid.uuid5(_NAMESPACE, json.dumps([page.run_id, page.stage_id, page.observation]))}>"


def record_type(page: ArchivedPage) -> str:
    return "response" if page.is_response else "resource"


def http_status_line(page: ArchivedPage) -> str:
    """``200 OK``: the recorded status and its standard reason phrase."""
    status = int(page.status or 0)
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def http_headers(page: ArchivedPage, size: int) -> list[tuple[str, str]]:
    """The reconstructed HTTP headers of a ``response`` record, in order."""
    headers = [("Content-Type", field(page.content_type))] if page.content_type else []
    return [*headers, ("Content-Length", str(size))]


def page_headers(page: ArchivedPage) -> dict[str, str]:
    """The WARC headers that name the page (besides type, id, date, target URI and the digests)."""
    headers = {
        H_CONTENT_HASH: page.content_hash,
        H_RUN: field(page.run_id),
        H_STAGE: field(page.stage_id),
        H_OBSERVATION: str(page.observation),
        H_SOURCE: field(page.source_ref),
        H_JOURNAL: f"partition {page.partition} offset {page.offset} seq {page.seq}",
    }
    if page.redirects:
        headers[H_REDIRECTS] = field(json.dumps([[status, url] for status, url in page.redirects], ensure_ascii=False))
    if page.is_response:
        headers[H_HTTP] = RECONSTRUCTED
    return headers


def content_type(page: ArchivedPage) -> str:
    """A ``resource`` record's ``Content-Type`` (the recorded type, else unknown)."""
    return field(page.content_type) if page.metadata and page.content_type else UNKNOWN_TYPE


@dataclass(frozen=True)
class WarcWritten:
    path: Path
    pages: tuple[ArchivedPage, ...]
    """The pages written (in journal order)."""
    missing: tuple[ArchivedPage, ...]
    """Pages whose bytes the store did not hold (hashing to the journal's hash): not written."""


def write_warc(path: Path, run_id: str, pages: Sequence[ArchivedPage], read: Callable[[str], bytes | None]) -> WarcWritten:
    """Write ``pages`` to ``path`` (gzipped WARC/1.1); ``read(digest)`` gives bytes hashing to it, or None."""
    writer_module: Any = libs.module("warcio.warcwriter")
    statusandheaders: Any = libs.module("warcio.statusandheaders")
    written: list[ArchivedPage] = []
    missing: list[ArchivedPage] = []
    with path.open("wb") as handle:
        writer = writer_module.WARCWriter(handle, gzip=True, warc_version=WARC_VERSION)
        writer.write_record(_warcinfo(writer, run_id, pages))
        for page in pages:
            data = read(page.content_hash)
            if data is None:
                missing.append(page)
                continue
            writer.write_record(_page_record(writer, statusandheaders, page, data))
            written.append(page)
    return WarcWritten(path, tuple(written), tuple(missing))


def _warcinfo(writer: Any, run_id: str, pages: Sequence[ArchivedPage]) -> Any:
    stages = sorted({page.stage_id for page in pages})
    info = (
        "software: bernstein topic export --wacz (warcio)\r\n"
        "format: WARC File Format 1.1\r\n"
        f"description: the fetched pages of the research stages of run {field(run_id)}, as its journal pins them\r\n"
        f"bernstein-run: {field(run_id)}\r\n"
        f"bernstein-stages: {field(', '.join(stages))}\r\n"
    ).encode()
    first = min((page.timestamp_ms for page in pages), default=0)
    headers = {
        "WARC-Record-ID": f"<urn:uuid:{uuid.uuid5(_NAMESPACE, json.dumps(['warcinfo', run_id]))}>",
        "WARC-Date": warc_date(first),
        "WARC-Filename": WARC_NAME,
        "WARC-Block-Digest": warc_digest(info),
    }
    return writer.create_warc_record(
        "",
        "warcinfo",
        payload=io.BytesIO(info),
        length=len(info),
        warc_content_type="application/warc-fields",
        warc_headers_dict=headers,
    )


def _page_record(writer: Any, statusandheaders: Any, page: ArchivedPage, data: bytes) -> Any:
    headers = {
        "WARC-Record-ID": record_id(page),
        "WARC-Date": warc_date(page.timestamp_ms),
        "WARC-Payload-Digest": warc_digest(data),
        **page_headers(page),
    }
    if not page.is_response:
        headers["WARC-Block-Digest"] = warc_digest(data)
        return writer.create_warc_record(
            field(page.url),
            "resource",
            payload=io.BytesIO(data),
            length=len(data),
            warc_content_type=content_type(page),
            warc_headers_dict=headers,
        )
    http = statusandheaders.StatusAndHeaders(http_status_line(page), http_headers(page, len(data)), protocol="HTTP/1.1")
    http.compute_headers_buffer()
    headers["WARC-Block-Digest"] = warc_digest(http.headers_buff + data)
    return writer.create_warc_record(
        field(page.url), "response", payload=io.BytesIO(data), length=len(data), http_headers=http, warc_headers_dict=headers
    )
