"""Research pages as WACZ: written from a dump's journal and CAS, valid for py-wacz, checked against the journal.

The run (``tests.support.report_run``) is journalled by the real scheduler core; it holds a research report (one
page, fetched with status 200 and a content type) and a research budget refusal (one page fetched before the stop,
no fetch metadata recorded). ``bernstein topic export``'s own function writes the dump, ``export_wacz`` the archive.
Expected hashes are computed here from the served bytes with hashlib, and the archive is read back with zipfile,
gzip and warcio, never through the code under test. Tampering rewrites the archive the way an attacker could:
WARC records edited in their gzip members and the ZIP re-made, with or without fixing the package's own hashes.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bernstein.cli import main
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.exit_codes import EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_NOT_FULLY_VERIFIED, EXIT_OK, EXIT_USAGE
from bernstein.verifier.archive import (
    ArchiveExtraMissing,
    ArchiveVerdict,
    check_wacz,
    export_wacz,
    libs,
    research_pages,
    validate_wacz,
)
from bernstein.verifier.archive.verdict import CODES
from bernstein.verifier.archive.warc import WARC_NAME, field
from bernstein.verifier.export import export_dump
from bernstein.verifier.sources import DumpSource
from tests.support.report_run import PAGE, PAGE_URL, RUN, ReportRun, build_report_run

WARC_MEMBER = f"archive/{WARC_NAME}"
OTHER_URL = "https://quill.test/more"
OTHER_PAGE = f"<html><body><p>Another page at {OTHER_URL}.</p></body></html>".encode()
"""The page the budget refusal fetched before it stopped (the run's fetch function serves it)."""
PAGES = {("research-0", PAGE_URL): PAGE, ("research-1", OTHER_URL): OTHER_PAGE}


def sha256_hex(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sha256_b32(data: bytes) -> str:
    return "sha256:" + base64.b32encode(hashlib.sha256(data).digest()).decode()


@dataclass
class Exported:
    run: ReportRun
    dump: Path
    wacz: Path
    trust: Path


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    root = tmp_path_factory.mktemp("wacz")
    run = build_report_run(root / "build")
    dump = root / "dump"
    export_dump(run.source, dump, cas=run.store, runs=[RUN], trusted=run.trusted)
    (written,) = export_wacz(dump)  # every run of the dump with research pages: this one
    assert written.run_id == RUN
    trust = root / "trusted-keys.json"
    run.trusted.write(trust)
    return Exported(run, dump, written.path, trust)


# ---------------------------------------------------------------------------
# reading and re-making the archive independently
# ---------------------------------------------------------------------------


def warc_records(wacz: Path) -> list[Any]:
    """(type, WARC headers, HTTP status line or None, HTTP headers, payload) of every record, read with warcio."""
    from warcio.archiveiterator import ArchiveIterator

    records = []
    with zipfile.ZipFile(wacz) as archive, archive.open(WARC_MEMBER) as stream:
        for record in ArchiveIterator(stream):
            http = record.http_headers
            records.append(
                (
                    record.rec_type,
                    dict(record.rec_headers.headers),
                    http.statusline if http is not None else None,
                    list(http.headers) if http is not None else [],
                    record.raw_stream.read(),
                )
            )
    return records


def gzip_members(data: bytes) -> list[bytes]:
    """The decompressed gzip members of a WARC.gz, one per record."""
    members = []
    while data:
        inflater = zlib.decompressobj(wbits=31)
        members.append(inflater.decompress(data))
        data = inflater.unused_data
    return members


def remake(wacz: Path, out: Path, edit: Callable[[list[bytes]], list[bytes]], *, fix_package: bool = False) -> Path:
    """``wacz`` with its WARC's records edited (``edit`` maps the decompressed records), re-gzipped and re-zipped;
    ``fix_package``: also rewrite datapackage.json's hash of the WARC and datapackage-digest.json (a careful forger)."""
    with zipfile.ZipFile(wacz) as archive:
        files = {info.filename: (info, archive.read(info.filename)) for info in archive.infolist()}
    warc = b"".join(gzip.compress(member, mtime=0) for member in edit(gzip_members(files[WARC_MEMBER][1])))
    members = {name: data for name, (_, data) in files.items()} | {WARC_MEMBER: warc}
    if fix_package:
        package = json.loads(members["datapackage.json"])
        for resource in package["resources"]:
            if resource["path"] == WARC_MEMBER:
                resource.update(hash=sha256_hex(warc), bytes=len(warc))
        members["datapackage.json"] = json.dumps(package, indent=2).encode()
        digest = {"path": "datapackage.json", "hash": sha256_hex(members["datapackage.json"])}
        members["datapackage-digest.json"] = json.dumps(digest).encode()
    with zipfile.ZipFile(out, "w") as archive:
        for name, (info, _) in files.items():
            archive.writestr(info, members[name], compress_type=info.compress_type)
    return out


def page_member(members: list[bytes], page: bytes) -> int:
    (index,) = [i for i, member in enumerate(members) if page in member]
    return index


def flip_byte(page: bytes) -> Callable[[list[bytes]], list[bytes]]:
    """Change one byte in the middle of ``page``'s bytes inside its record (same length: every length stays right)."""

    def edit(members: list[bytes]) -> list[bytes]:
        i = page_member(members, page)
        at = members[i].index(page) + len(page) // 2
        members[i] = members[i][:at] + bytes([members[i][at] ^ 0x01]) + members[i][at + 1 :]
        return members

    return edit


def check(exported: Exported, wacz: Path, *, records_only: bool = False) -> ArchiveVerdict:
    source = DumpSource(exported.dump)
    cas = None if records_only else DirBlobStore(exported.dump / "cas")
    return check_wacz(wacz, research_pages(source, RUN, cas=cas), run_id=RUN)


def verify_cli(exported: Exported, wacz: Path, *extra: str) -> int:
    args = ["activity", "verify", RUN, "--from", str(exported.dump), "--trusted-keys", str(exported.trust)]
    return main([*args, "--wacz", str(wacz), *extra])


def journal_page_hashes(exported: Exported) -> dict[tuple[str, str], str]:
    """(stage, source) -> the page hash the journal's research entries pin, decoded from the dump's journal file."""
    from bernstein.schemas import codec

    found = {}
    for line in (exported.dump / "topics" / "journal" / "0.jsonl").read_text().splitlines():
        value = base64.b64decode(json.loads(line)["value"])
        name, fields = codec.split_envelope(value)
        entry = codec.decode(fields[0]).record
        if name == codec.JOURNAL_RECORD and entry.get("kind") == "research":
            for observation in entry["observations"]:
                found[(entry["stage_id"], observation["ref"])] = observation["content_hash"]
    return found


# ---------------------------------------------------------------------------
# what the archive holds
# ---------------------------------------------------------------------------


def test_every_payload_digest_is_the_journals_page_hash(exported: Exported) -> None:
    journal = journal_page_hashes(exported)
    assert journal == {key: sha256_hex(page) for key, page in PAGES.items()}
    records = [r for r in warc_records(exported.wacz) if r[0] in ("response", "resource")]
    assert len(records) == len(PAGES) == 2
    for _, headers, _, _, payload in records:
        key = (headers["WARC-Bernstein-Stage"], headers["WARC-Bernstein-Source"])
        assert payload == PAGES[key]
        assert headers["WARC-Payload-Digest"] == sha256_b32(payload)
        assert headers["WARC-Bernstein-Content-Hash"] == journal[key] == sha256_hex(payload)
        assert headers["WARC-Bernstein-Run"] == RUN


def test_records_carry_the_fetch_metadata_the_report_records(exported: Exported) -> None:
    by_stage = {r[1]["WARC-Bernstein-Stage"]: r for r in warc_records(exported.wacz) if r[0] in ("response", "resource")}
    kind, headers, status, http, payload = by_stage["research-0"]
    assert (kind, headers["WARC-Target-URI"], status) == ("response", PAGE_URL, "200 OK")
    assert http == [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(PAGE)))]
    assert headers["WARC-Date"].startswith("2023-11-14T22:13:20.")  # the journal entry's Kafka timestamp
    # the budget refusal's page: no status or type was recorded, so none is invented
    kind, headers, status, http, payload = by_stage["research-1"]
    assert (kind, headers["WARC-Target-URI"], status, http) == ("resource", OTHER_URL, None, [])
    assert headers["Content-Type"] == "application/octet-stream"


def test_the_page_index_lists_each_page_where_it_replays(exported: Exported) -> None:
    with zipfile.ZipFile(exported.wacz) as archive:
        lines = [json.loads(line) for line in archive.read("pages/pages.jsonl").decode().splitlines()]
        manifest = json.loads((exported.dump / "manifest.json").read_text())
    assert lines[0]["format"] == "json-pages-1.0"
    assert sorted(line["url"] for line in lines[1:]) == sorted([PAGE_URL, OTHER_URL])
    assert manifest["wacz"][RUN]["path"] == f"wacz/{RUN}.wacz"
    assert manifest["wacz"][RUN]["pages"] == 2 and manifest["wacz"][RUN]["missing_pages"] == 0
    assert manifest["wacz"][RUN]["sha256"] == hashlib.sha256(exported.wacz.read_bytes()).hexdigest()


def test_wacz_validate_passes(exported: Exported) -> None:
    assert validate_wacz(exported.wacz).valid
    # and the package's own command line, and warcio's digest check, agree
    cli = subprocess.run([sys.executable, "-m", "wacz", "validate", "-f", str(exported.wacz)], capture_output=True, text=True)
    assert cli.returncode == 0 and "Validation succeeded" in cli.stdout, cli.stdout + cli.stderr
    with zipfile.ZipFile(exported.wacz) as archive:
        warc = exported.wacz.parent / "check.warc.gz"
        warc.write_bytes(archive.read(WARC_MEMBER))
    checked = subprocess.run([sys.executable, "-m", "warcio.cli", "check", "-v", str(warc)], capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout.count("digest pass") == 3, checked.stdout + checked.stderr


def test_the_warc_is_a_pure_function_of_the_journal_and_the_pages(exported: Exported, tmp_path: Path) -> None:
    again = tmp_path / "dump"
    export_dump(exported.run.source, again, cas=exported.run.store, runs=[RUN], trusted=exported.run.trusted)
    (written,) = export_wacz(again, [RUN])
    with zipfile.ZipFile(exported.wacz) as first, zipfile.ZipFile(written.path) as second:
        assert first.read(WARC_MEMBER) == second.read(WARC_MEMBER)


# ---------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------


def test_the_archive_verifies_against_the_journal(exported: Exported, capsys: pytest.CaptureFixture[str]) -> None:
    verdict = check(exported, exported.wacz)
    assert verdict.ok and (verdict.pages, verdict.matched, verdict.records, verdict.metadata_checked) == (2, 2, 2, 1)
    assert verify_cli(exported, exported.wacz) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert "verified -- every activity reconstructs from the journal." in lines
    assert lines[-1] == "archive verified -- the archive holds exactly the 2 pages the journal pins."


@pytest.mark.parametrize("fix_package", [False, True], ids=["re-zipped", "package-hashes-forged"])
def test_an_edited_byte_of_a_page_is_reported_naming_the_page(
    exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str], fix_package: bool
) -> None:
    tampered = remake(exported.wacz, tmp_path / "t.wacz", flip_byte(PAGE), fix_package=fix_package)
    edited = [r[4] for r in warc_records(tampered) if r[1].get("WARC-Bernstein-Stage") == "research-0"][0]
    assert edited != PAGE and len(edited) == len(PAGE)
    # a forger who re-hashes the package passes py-wacz's validation: only the journal catches the edit
    assert validate_wacz(tampered).valid is fix_package
    verdict = check(exported, tampered)
    changed = [p for p in verdict.problems if p.code == "WACZ_PAGE_CHANGED"]
    assert len(changed) == 1
    (problem,) = changed
    assert (problem.stage_id, problem.url, problem.source_ref) == ("research-0", PAGE_URL, PAGE_URL)
    assert (problem.expected, problem.recomputed) == (sha256_hex(PAGE), sha256_hex(edited))
    assert (problem.stream, problem.member) == ("journal", WARC_MEMBER)
    package = [p for p in verdict.problems if p.code == "WACZ_PACKAGE_MISMATCH"]
    assert [p.member for p in package] == ([] if fix_package else [WARC_MEMBER])
    assert verdict.matched == 1 and not verdict.ok

    assert verify_cli(exported, tampered, "--json") == EXIT_MISMATCH
    document = json.loads(capsys.readouterr().out)
    assert (document["verdict"], document["exit_code"], document["ok"]) == ("mismatch", EXIT_MISMATCH, False)
    assert document["stages"] and all(stage["ok"] for stage in document["stages"])  # the run itself verifies
    (reported,) = [p for p in document["archive"]["problems"] if p["code"] == "WACZ_PAGE_CHANGED"]
    assert reported["stage_id"] == "research-0" and reported["expected"] == sha256_hex(PAGE)
    assert reported["offset"] == problem.offset and reported["seq"] == problem.seq


def test_a_missing_page_is_reported(exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def drop(members: list[bytes]) -> list[bytes]:
        del members[page_member(members, OTHER_PAGE)]
        return members

    tampered = remake(exported.wacz, tmp_path / "t.wacz", drop, fix_package=True)
    verdict = check(exported, tampered)
    assert [p.code for p in verdict.problems] == ["WACZ_PAGE_MISSING"]
    (problem,) = verdict.problems
    assert (problem.stage_id, problem.source_ref, problem.expected) == ("research-1", OTHER_URL, sha256_hex(OTHER_PAGE))
    assert problem.stream == "journal" and problem.offset is not None
    assert verify_cli(exported, tampered) == EXIT_MISMATCH
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith(f"  MISMATCH WACZ_PAGE_MISSING research-1 {OTHER_URL} -- ")
    assert out[-1] == "archive mismatch -- 1 problem; 1 of 2 pages match the journal."


def replace_in(page: bytes, old: bytes, new: bytes) -> Callable[[list[bytes]], list[bytes]]:
    def edit(members: list[bytes]) -> list[bytes]:
        i = page_member(members, page)
        assert old in members[i]
        members[i] = members[i].replace(old, new, 1)
        return members

    return edit


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (replace_in(PAGE, sha256_b32(PAGE).encode(), sha256_b32(b"other").encode()), "WACZ_DIGEST_MISMATCH"),
        (replace_in(PAGE, sha256_hex(PAGE).encode(), sha256_hex(b"other").encode()), "WACZ_DIGEST_MISMATCH"),
        (
            replace_in(PAGE, b"WARC-Target-URI: https://quill.test/", b"WARC-Target-URI: https://evil.test/"),
            "WACZ_METADATA_MISMATCH",
        ),
        (replace_in(PAGE, b"HTTP/1.1 200 OK", b"HTTP/1.1 203 OK"), "WACZ_METADATA_MISMATCH"),
        (replace_in(PAGE, b"WARC-Bernstein-Observation: 0", b"WARC-Bernstein-Observation: 7"), "WACZ_RECORD_UNEXPECTED"),
    ],
    ids=["payload-digest", "content-hash", "target-uri", "http-status", "unknown-page"],
)
def test_records_that_say_otherwise_than_the_journal_are_named(
    exported: Exported, tmp_path: Path, edit: Callable[[list[bytes]], list[bytes]], code: str
) -> None:
    verdict = check(exported, remake(exported.wacz, tmp_path / "t.wacz", edit, fix_package=True))
    assert verdict.problems and verdict.problems[0].code == code
    if code == "WACZ_RECORD_UNEXPECTED":  # the record names no page, so the page it held is missing too
        assert [p.code for p in verdict.problems] == [code, "WACZ_PAGE_MISSING"]
    else:
        assert len(verdict.problems) == 1 and verdict.problems[0].stage_id == "research-0"


def test_a_second_record_for_a_page_is_unexpected(exported: Exported, tmp_path: Path) -> None:
    def duplicate(members: list[bytes]) -> list[bytes]:
        return [*members, members[page_member(members, PAGE)]]

    verdict = check(exported, remake(exported.wacz, tmp_path / "t.wacz", duplicate, fix_package=True))
    assert [p.code for p in verdict.problems] == ["WACZ_RECORD_UNEXPECTED"]
    assert "a second record for stage 'research-0'" in verdict.problems[0].message


def test_a_damaged_zip_member_is_unreadable_not_a_crash(exported: Exported, tmp_path: Path) -> None:
    data = bytearray(exported.wacz.read_bytes())
    with zipfile.ZipFile(exported.wacz) as archive:
        info = archive.getinfo(WARC_MEMBER)
    at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + 40  # inside the stored WARC bytes
    data[at] ^= 0xFF
    (tmp_path / "t.wacz").write_bytes(bytes(data))
    verdict = check(exported, tmp_path / "t.wacz")
    codes = {p.code for p in verdict.problems}
    assert "WACZ_MEMBER_UNREADABLE" in codes and not verdict.ok


def test_records_only_still_checks_every_pages_bytes(exported: Exported, tmp_path: Path) -> None:
    assert verify_cli(exported, exported.wacz, "--records-only") == EXIT_NOT_FULLY_VERIFIED  # the run's verdict stands
    verdict = check(exported, exported.wacz, records_only=True)
    assert verdict.ok and verdict.matched == 2 and verdict.metadata_checked == 0
    tampered = remake(exported.wacz, tmp_path / "t.wacz", flip_byte(PAGE), fix_package=True)
    assert [p.code for p in check(exported, tampered, records_only=True).problems] == ["WACZ_PAGE_CHANGED"]
    assert verify_cli(exported, tampered, "--records-only") == EXIT_MISMATCH


# ---------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------


def test_a_run_not_in_the_source_stays_not_found(exported: Exported, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["activity", "verify", "no-such-run", "--from", str(exported.dump), "--trusted-keys", str(exported.trust)]
    assert main([*args, "--wacz", str(exported.wacz), "--json"]) == EXIT_NOT_FOUND
    archive = json.loads(capsys.readouterr().out)["archive"]
    assert archive["pages"] == 0 and [p["code"] for p in archive["problems"]] == ["WACZ_RECORD_UNEXPECTED"] * 2


def test_user_errors_are_one_line_and_exit_3(exported: Exported, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "not.wacz").write_bytes(b"this is no zip file")
    assert verify_cli(exported, tmp_path / "not.wacz") == EXIT_USAGE
    assert verify_cli(exported, tmp_path / "absent.wacz") == EXIT_USAGE
    args = ["activity", "verify", RUN, "other-run", "--from", str(exported.dump), "--wacz", str(exported.wacz)]
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "is not a WACZ" in err and "no such file" in err and "name exactly one RUN" in err
    assert "Traceback" not in err


def test_without_the_extra_wacz_says_which_to_install(
    exported: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(libs, "_loaded", {})
    for name in ("wacz.main", "warcio.archiveiterator"):  # importing them raises ModuleNotFoundError
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ArchiveExtraMissing):
        libs.require()
    assert verify_cli(exported, exported.wacz) == EXIT_USAGE
    out = tmp_path / "dump"
    assert main(["topic", "export", "--run", RUN, "--out", str(out), "--wacz"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("pip install 'bernstein-journal[archive]'") == 2 and "Traceback" not in err
    assert not out.exists()  # nothing exported


def test_the_codes_are_the_documented_ones() -> None:
    assert CODES == (
        "WACZ_PAGE_CHANGED",
        "WACZ_PAGE_MISSING",
        "WACZ_RECORD_UNEXPECTED",
        "WACZ_DIGEST_MISMATCH",
        "WACZ_METADATA_MISMATCH",
        "WACZ_PACKAGE_MISMATCH",
        "WACZ_MEMBER_UNREADABLE",
    )


def test_header_values_cannot_add_a_header() -> None:
    assert field("https://a.test/x\r\nWARC-Type: resource") == "https://a.test/x%0D%0AWARC-Type: resource"
    assert field("plain ünïcode") == "plain ünïcode"
    buffer = io.StringIO()
    buffer.write(field("\u202e"))
    assert buffer.getvalue() == "%E2%80%AE"
