"""Checks of an exported WACZ that the integration tests share: its records read back, its validation, one page edited.

Everything here reads the archive independently of the code under test: the ZIP with ``zipfile``, the WARC with
warcio's ``ArchiveIterator``, gzip members with ``zlib``; validation is py-wacz's own ``wacz validate`` entry point,
and the verifier is the real command line (``bernstein activity verify --wacz``).
"""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from bernstein.cli import main as bernstein_main
from tests.support import tamper as kit

WARC_MEMBER = "archive/research-pages.warc.gz"

WarcRecord = tuple[str, dict[str, str], str | None, bytes]
"""(record type, WARC headers, HTTP status line or None, payload bytes)."""


def warc_records(wacz: Path) -> list[WarcRecord]:
    """The archive's ``response`` and ``resource`` records, in file order."""
    from warcio.archiveiterator import ArchiveIterator

    found = []
    with zipfile.ZipFile(wacz) as archive, archive.open(WARC_MEMBER) as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type in ("response", "resource"):
                status = record.http_headers.statusline if record.http_headers is not None else None
                found.append((record.rec_type, dict(record.rec_headers.headers), status, record.raw_stream.read()))
    return found


def payload_digest_hex(headers: dict[str, str]) -> str:
    """A record's ``WARC-Payload-Digest`` (warcio's ``sha256:<base32>``) in the journal's form, ``sha256:<hex>``."""
    algorithm, _, value = headers["WARC-Payload-Digest"].partition(":")
    assert algorithm == "sha256", headers["WARC-Payload-Digest"]
    return "sha256:" + base64.b32decode(value).hex()


def wacz_validate(wacz: Path) -> int:
    """py-wacz's own validator (its ``wacz validate -f FILE``); it prints its verdict to stdout."""
    with warnings.catch_warnings():  # surt, under py-wacz, has escapes Python warns about; py-wacz leaves files open
        warnings.simplefilter("ignore")
        from wacz.main import main as wacz_main

        return int(wacz_main(["validate", "-f", str(wacz)]))


def with_one_byte_changed(wacz: Path, page: bytes, out: Path) -> Path:
    """``wacz`` with one byte of ``page`` flipped inside its WARC record, re-gzipped and re-zipped."""
    with zipfile.ZipFile(wacz) as archive:
        files = [(info, archive.read(info.filename)) for info in archive.infolist()]
    with zipfile.ZipFile(out, "w") as archive:
        for info, data in files:
            if info.filename == WARC_MEMBER:
                members = []
                while data:
                    inflater = zlib.decompressobj(wbits=31)
                    member = inflater.decompress(data)
                    data = inflater.unused_data
                    if page in member:
                        at = member.index(page) + 20
                        member = member[:at] + bytes([member[at] ^ 0x20]) + member[at + 1 :]
                    members.append(gzip.compress(member, mtime=0))
                data = b"".join(members)
            archive.writestr(info, data, compress_type=info.compress_type)
    return out


def verify_archive(run_id: str, dump: Path, trust: Path, wacz: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``bernstein activity verify RUN --from DUMP --trusted-keys TRUST --wacz WACZ``: the console script, offline."""
    args = ["activity", "verify", run_id, "--from", str(dump), "--trusted-keys", str(trust), "--wacz", str(wacz), *extra]
    return kit.bernstein(args, kit.offline_env(), cwd=dump.parent)


def archive_problems(
    run_id: str, dump: Path, trust: Path, wacz: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[dict[str, Any]]]:
    """The same command line with ``--json``, in process (to stay lean): its exit code and the archive's problems."""
    capsys.readouterr()
    args = ["activity", "verify", run_id, "--from", str(dump), "--trusted-keys", str(trust), "--wacz", str(wacz), "--json"]
    code = bernstein_main(args)
    document = json.loads(capsys.readouterr().out)
    return code, list(document["archive"]["problems"])
