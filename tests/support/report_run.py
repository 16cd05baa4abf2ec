"""A small run of every kind, built in memory by the real scheduler core, for the HTML report's tests.

``build_report_run(tmp_path)`` journals, through ``SchedulerCore`` with the test producers registered: a coding
stage, a research report whose page text holds ``<script>alert(1)</script>`` (as text: the page escapes it) and
whose claim quotes it, a research budget refusal, a browser session of four actions in real PNG frames (two
actions see the same frame; one types a value containing HTML into a target containing HTML), a signed ops
receipt (a plan of four steps), a stage refused for its unknown role, and the run's close. Evidence goes to a
``DirBlobStore``. ``build_long_run(tmp_path, n)`` journals ``n`` coding stages and the close the same way.
``export`` writes it as a dump directory, the format ``bernstein topic export`` writes.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bernstein.consumers.core.model import InputRecord, SchedulerConfig
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.producers.computer_use import ComputerUseSession, Frame, ProposedAction, ScriptedAgent
from bernstein.producers.dataops import DataOpsActivity
from bernstein.producers.emitter import submission_record
from bernstein.producers.research import ResearchBudget, ResearchBudgetExceeded, ResearchWorker
from bernstein.producers.research.fetch import FetchedPage
from bernstein.producers.research.synthesis import ClaimDraft, SpanRef
from bernstein.schemas.canonical import evidence_set_hash, sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import AuditKey, InstallKeys, KeyRing, ProducerKeys, TrustedKeys, init_keys
from bernstein.verifier.memory_source import MemorySource
from bernstein.verifier.sources import DUMP_FORMAT, StoredRecord, encode_dump_line
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, RecordingPublisher
from tests.support.producers import TEST_PRODUCERS, encode_signed_close, encode_signed_submission, producer_signer, producer_trust

RUN = "run-report"
PREFIX = "mem"
PRODUCER = "unit@test"
"""The producer that signs every submission of the run but the browser session's, and closes the run."""
NAVIGATOR = "navigator@test"
"""The producer of the browser session (its worker signs the session's records)."""
ROLES = {"developer": "coding", "scout": "research", "navigator": "browser", "operator": "ops"}
TOPICS = {
    "journal": "activity.journal",
    "refusals": "activity.refusals",
    "audit": "audit",
    "deadletter": "activity.deadletter",
    "checkpoints": "checkpoints",
}
SCRIPT_TEXT = "<script>alert(1)</script>"
PAGE = (
    b"<html><head><title>Quill notes</title><script>var hidden = 1;</script></head><body>"
    b"<p>Quill 2.0 ships a <strong>stable</strong> module system.</p>"
    b"<p>Never run &lt;script&gt;alert(1)&lt;/script&gt; from an untrusted page.</p></body></html>"
)
PAGE_URL = "https://quill.test/notes?a=1&b=<x>"
QUOTES = ("Quill 2.0 ships a stable module system.", f"Never run {SCRIPT_TEXT} from an untrusted page.")
TYPED_VALUE = '<img src=x onerror="alert(2)">secret'
TYPED_TARGET = '#name[data-x="<b>bold</b>"]'
FLOW = [
    ProposedAction("navigate", "http://site.test/a.html"),
    ProposedAction("type", TYPED_TARGET, TYPED_VALUE),
    ProposedAction("click", "#next"),
    ProposedAction("submit", "#go"),
]


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A valid PNG of one colour (a real image Chromium decodes)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + bytes(rgb) * width
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


FRAMES = [png(40, 30, (200, 10 * i, 30)) for i in range(3)]
"""Frames shown before actions 0-3 and at the end: actions 2 and 3 (and the final frame) see the same picture."""


@dataclass
class ReportRun:
    source: MemorySource
    store: DirBlobStore
    keys: InstallKeys
    trusted: TrustedKeys
    session_records: int


class _Writer:
    def __init__(self, keys: InstallKeys) -> None:
        config = SchedulerConfig(
            roles=ROLES,
            signer=keys.signer,
            audit_key=keys.audit.secret,
            audit_key_id=keys.audit.key_id,
            seal_every=4,
            producers=TEST_PRODUCERS,
        )
        self.core = SchedulerCore(config)
        self.state = initial_state(config, 0)
        self.source = MemorySource()
        self.offsets: dict[str, int] = {}
        self.inputs = 0

    def feed(self, value: bytes) -> None:
        record = InputRecord(
            f"{PREFIX}.activity.submissions", 0, self.inputs, 1_700_000_000_000 + self.inputs, RUN.encode(), value
        )
        self.inputs += 1
        self.state, outputs = self.core.step(self.state, record)
        for out in outputs:
            stream = out.stream.value
            at = self.offsets.get(stream, 0)
            self.offsets[stream] = at + 1
            self.source.add(
                StoredRecord(stream, f"{PREFIX}.{TOPICS[stream]}", 0, at, out.timestamp_ms, out.key, out.value, out.headers)
            )


def _signed(result: Any, stage_id: str, role: str, producer: str = PRODUCER) -> bytes:
    record = submission_record(
        result, submission_id=f"sub-{stage_id}", run_id=RUN, stage_id=stage_id, role=role, producer_id=producer, sdk="test"
    )
    record["occurred_at_ms"] = 1
    return encode_signed_submission(record)


def _coding(store: DirBlobStore, stage_id: str, role: str = "developer") -> bytes:
    blob = f"print('{stage_id}')\n".encode()
    digest = store.put(blob)
    artifact = f"diff of {stage_id}\n".encode()
    store.put(artifact)
    record = {
        "submission_id": f"sub-{stage_id}",
        "run_id": RUN,
        "stage_id": stage_id,
        "role": role,
        "producer": {"id": PRODUCER, "sdk": "test"},
        "kind": "coding",
        "artifact": artifact,
        "artifact_hash": sha256_digest(artifact),
        "evidence_set_hash": evidence_set_hash([digest]),
        "observations": [{"kind": "file", "ref": f"src/{stage_id}.py", "content_hash": digest, "size": len(blob)}],
        "terminal_state": "completed",
        "reason_code": "ok",
        "occurred_at_ms": 1,
    }
    return encode_signed_submission(record)


def _fetch(url: str) -> FetchedPage:
    content = PAGE if url == PAGE_URL else f"<html><body><p>Another page at {url}.</p></body></html>".encode()
    return FetchedPage(url, content, final_url=url, status=200, content_type="text/html; charset=utf-8")


def _synthesise(query: str, fetched: Any) -> list[ClaimDraft]:
    ref = fetched[0].source_ref
    return [
        ClaimDraft("Quill 2.0 has stable modules.", (SpanRef(ref, QUOTES[0]),)),
        ClaimDraft("Untrusted scripts must not run.", (SpanRef(ref, QUOTES[1]),)),
    ]


def _research(store: DirBlobStore) -> tuple[bytes, bytes]:
    worker = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=4))
    run = worker.run(query="What changed in Quill 2.0?", sources=[PAGE_URL], fetch_fn=_fetch, synthesise=_synthesise)
    store.put(run.result.artifact)
    tight = ResearchWorker(store=store, budget=ResearchBudget(max_fetches=1))
    try:
        tight.run(query="Everything", sources=["https://quill.test/more", PAGE_URL], fetch_fn=_fetch, synthesise=_synthesise)
    except ResearchBudgetExceeded as exceeded:
        refused = tight.refused_result(exceeded)
        store.put(refused.artifact)
        return _signed(run.result, "research-0", "scout"), _signed(refused, "research-1", "scout")
    raise AssertionError("the budget of one fetch was not exceeded")


def _browser(store: DirBlobStore, tmp_path: Path) -> tuple[list[bytes], int]:
    worker = ProducerKeys(
        NAVIGATOR,
        producer_signer(NAVIGATOR),
        lineage=AuditKey.from_secret(b"lineage-key-of-navigator"),
        redaction=AuditKey.from_secret(b"redaction-key-of-navigator"),
        directory=tmp_path / "navigator-keys",
        ring=KeyRing(()),
    )
    publisher = RecordingPublisher(worker)
    session = ComputerUseSession(
        RUN, "browser-0", keys=worker, store=store, publisher=publisher, worker_id=NAVIGATOR, worktree=tmp_path / "w"
    )
    frames = [Frame(FRAMES[min(i, 2)], f'- heading "Step {min(i, 2)}"\n') for i in range(5)]
    outcome = session.run(ScriptedAgent(FLOW), FakeDriverFactory(FakeDriver(frames)))
    return [value for _, value in publisher.values()], len(outcome.records)


def _ops(store: DirBlobStore) -> bytes:
    activity = DataOpsActivity("ops", RUN, "ops-0", store=store, signer=producer_signer(PRODUCER))
    activity.add_input("service.conf", b"workers = 2\n")
    activity.plan(["drain <service> & wait", "set workers = 4", "restart the service", "check its health"])
    activity.add_output("service.conf", b"workers = 4\n")
    result, _ = activity.finish()
    store.put(result.artifact)
    return _signed(result, "ops-0", "operator")


def _close() -> bytes:
    return encode_signed_close(
        {"submission_id": f"close-{RUN}", "run_id": RUN, "producer": {"id": PRODUCER, "sdk": "t"}, "occurred_at_ms": 0}
    )


def build_report_run(tmp_path: Path) -> ReportRun:
    keys = init_keys(tmp_path / "keys")
    store = DirBlobStore(tmp_path / "cas")
    writer = _Writer(keys)
    writer.feed(_coding(store, "code-0"))
    research, refused = _research(store)
    writer.feed(research)
    writer.feed(refused)
    values, actions = _browser(store, tmp_path)
    for value in values:
        writer.feed(value)
    writer.feed(_ops(store))
    writer.feed(_coding(store, "stage-x", role="nobody"))  # refused: UNKNOWN_ROLE
    writer.feed(_close())
    trusted = TrustedKeys.from_install(keys).merged(producer_trust())
    return ReportRun(writer.source, store, keys, trusted, actions)


def build_long_run(tmp_path: Path, stages: int) -> ReportRun:
    """A closed run of ``stages`` coding stages (``code-0``, ``code-1``, ...), journalled the same way."""
    keys = init_keys(tmp_path / "keys")
    store = DirBlobStore(tmp_path / "cas")
    writer = _Writer(keys)
    for index in range(stages):
        writer.feed(_coding(store, f"code-{index}"))
    writer.feed(_close())
    return ReportRun(writer.source, store, keys, TrustedKeys.from_install(keys).merged(producer_trust()), 0)


def export(run: ReportRun, root: Path) -> Path:
    """The run as a dump directory (manifest, topic files, the CAS directory copied)."""
    import shutil

    for stream in TOPICS:
        records = run.source.all(stream)
        (root / "topics" / stream).mkdir(parents=True, exist_ok=True)
        with (root / "topics" / stream / "0.jsonl").open("wb") as handle:
            for record in records:
                handle.write(encode_dump_line(record))
    shutil.copytree(run.store.root, root / "cas")
    blobs = sum(1 for p in (root / "cas").rglob("*") if p.is_file())
    (root / "manifest.json").write_text(json.dumps({"format": DUMP_FORMAT, "runs": [RUN], "blobs": blobs}))
    return root
