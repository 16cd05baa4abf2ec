"""Runs for the verifier tests, written by the real scheduler core into an in-memory source.

``Writer`` steps submissions, closes and computer-use actions through ``SchedulerCore`` and keeps
every output; ``build`` gives the standard run (``Built``); the rest read a run's records and a
report's verdict (``json_of``, ``text_of``, ``first_problem``, ``assert_exit``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bernstein.consumers.core.model import InputRecord, SchedulerConfig
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.producers.computer_use import ComputerUseSession, Frame, ProposedAction, ScriptedAgent
from bernstein.schemas import codec
from bernstein.schemas.canonical import evidence_set_hash, journal_entry_hash, sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import AuditKey, InstallKeys, KeyRing, ProducerKeys, TrustedKeys, init_keys
from bernstein.verifier.render import render_json, render_text
from bernstein.verifier.report import EXIT_VERIFIED, Problem, RunReport
from bernstein.verifier.sources import DumpSource, KcatSource, StoredRecord
from bernstein.verifier.verify import verify
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, MemorySource, RecordingPublisher
from tests.support.producers import TEST_PRODUCERS, encode_signed_close, encode_signed_submission, producer_signer, producer_trust

C = codec.default_codec()
RUN = "run-a"
OTHER = "run-b"
PREFIX = "mem"
ROLES = {"developer": "coding", "navigator": "browser"}
VERIFIED = "verified -- every activity reconstructs from the journal."
TOPICS = {
    "journal": "activity.journal",
    "refusals": "activity.refusals",
    "audit": "audit",
    "deadletter": "activity.deadletter",
    "checkpoints": "checkpoints",
}


@dataclass
class Built:
    source: MemorySource
    store: DirBlobStore
    keys: InstallKeys
    trusted: TrustedKeys

    def verify(self, source: MemorySource | DumpSource | KcatSource | None = None, **options: Any) -> RunReport:
        options.setdefault("cas", self.store)
        options.setdefault("trusted", self.trusted)
        return verify(options.pop("run_id", RUN), source or self.source, **options)

    def records(self, stream: str) -> list[StoredRecord]:
        return self.source.all(stream)


class Writer:
    """The pure scheduler core over one in-memory partition, input offsets chosen by the test."""

    def __init__(self, keys: InstallKeys, store: DirBlobStore, *, seal_every: int = 2) -> None:
        config = SchedulerConfig(
            roles=ROLES,
            signer=keys.signer,
            audit_key=keys.audit.secret,
            audit_key_id=keys.audit.key_id,
            seal_every=seal_every,
            producers=TEST_PRODUCERS,
        )
        self.core = SchedulerCore(config)
        self.state = initial_state(config, 0)
        self.source = MemorySource()
        self.store = store
        self.offsets: dict[str, int] = {}
        self.next_input = 0

    def feed(self, run_id: str, value: bytes, *, at: int | None = None) -> None:
        offset = self.next_input if at is None else at
        self.next_input = offset + 1
        self.state, outputs = self.core.step(
            self.state,
            InputRecord(f"{PREFIX}.activity.submissions", 0, offset, 1_700_000_000_000 + offset, run_id.encode(), value),
        )
        for out in outputs:
            stream = out.stream.value
            at_ = self.offsets.get(stream, 0)
            self.offsets[stream] = at_ + 1
            self.source.add(
                StoredRecord(stream, f"{PREFIX}.{TOPICS[stream]}", 0, at_, out.timestamp_ms, out.key, out.value, out.headers)
            )

    def stage(
        self,
        run_id: str,
        stage_id: str,
        *,
        role: str = "developer",
        at: int | None = None,
        sized: bool = True,
        under_declare: int = 0,
        producer: str = "verdicts@test",
    ) -> None:
        """A coding stage with two file blobs: an ActivitySubmission.v2 declaring their sizes, the first
        ``under_declare`` bytes too few; without ``sized`` an ActivitySubmission.v1 (refused as
        EVIDENCE_SIZES_UNDECLARED unless the core accepts undeclared sizes)."""
        blobs = [f"{run_id}/{stage_id}/{name}\n".encode() * 20 for name in ("a.py", "b.py")]
        observations: list[dict[str, Any]] = [
            {"kind": "file", "ref": f"src/{stage_id}/{i}.py", "content_hash": self.store.put(blob)}
            for i, blob in enumerate(blobs)
        ]
        if sized:
            for i, (observation, blob) in enumerate(zip(observations, blobs, strict=True)):
                observation["size"] = len(blob) - (under_declare if i == 0 else 0)
        artifact = f"diff for {run_id} {stage_id}\n".encode()
        self.store.put(artifact)
        record = {
            "submission_id": f"sub-{run_id}-{stage_id}",
            "run_id": run_id,
            "stage_id": stage_id,
            "role": role,
            "producer": {"id": producer, "sdk": "test"},
            "kind": "coding",
            "artifact": artifact,
            "artifact_hash": sha256_digest(artifact),
            "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in observations),
            "observations": observations,
            "terminal_state": "completed",
            "reason_code": "ok",
            "occurred_at_ms": 1,
        }
        # an ActivitySubmission.v3 signed by its producer; v1 (no sizes, no signature) is refused
        value = encode_signed_submission(record) if sized else C.encode(codec.ACTIVITY_SUBMISSION, record)
        self.feed(run_id, value, at=at)

    def close(self, run_id: str, *, at: int | None = None, producer: str = "t") -> None:
        value = encode_signed_close(
            {"submission_id": f"close-{run_id}", "run_id": run_id, "producer": {"id": producer, "sdk": "t"}, "occurred_at_ms": 0}
        )
        self.feed(run_id, value, at=at)

    def garbage(self, *, at: int | None = None) -> None:
        self.feed("junk", b"definitely not avro", at=at)


class LegacyCodec:
    """The codec of a scheduler from before producer signatures: it writes JournalEntry.v2 (or v1, without sizes)
    and RunSeal.v1 where today's writes JournalEntry.v3 and RunSeal.v2. Handed to the real core, every hash, seal,
    MAC and checkpoint it computes covers those older bytes, exactly as an older scheduler wrote them."""

    def __init__(self, entry: str = codec.JOURNAL_ENTRY_V2) -> None:
        self.inner = codec.default_codec()
        self.entry = entry

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode(self, name: str, record: Any) -> bytes:
        if name == codec.JOURNAL_ENTRY_V3:
            record = {k: v for k, v in record.items() if k not in ("producer_key_id", "producer_signature")}
            if self.entry == codec.JOURNAL_ENTRY:
                record["observations"] = [{k: v for k, v in o.items() if k != "size"} for o in record["observations"]]
            return self.inner.encode(self.entry, record)
        if name == codec.RUN_SEAL_V2:
            return self.inner.encode(codec.RUN_SEAL, {k: v for k, v in record.items() if k != "closed_by"})
        return self.inner.encode(name, record)


def build(
    tmp_path: Path,
    *,
    script: Callable[[Writer], None] | None = None,
    keys: InstallKeys | None = None,
) -> Built:
    keys = keys or init_keys(tmp_path / "keys")
    store = DirBlobStore(tmp_path / "cas")
    writer = Writer(keys, store)
    (script or standard)(writer)
    return Built(writer.source, store, keys, TrustedKeys.from_install(keys).merged(producer_trust()))


def standard(w: Writer) -> None:
    """run-a: four stages (periodic seals after 2 and 4), a refusal, a dead letter between; run-b interleaved; both closed."""
    w.stage(RUN, "stage-0")
    w.stage(OTHER, "other-0")
    w.stage(RUN, "stage-1")
    w.stage(RUN, "stage-x", role="nobody")  # refused: unknown role
    w.garbage()  # dead-lettered
    w.stage(RUN, "stage-2")
    w.stage(RUN, "stage-3")
    w.close(OTHER)
    w.close(RUN)
    w.garbage()  # a second dead letter


def kind_of(value: bytes | None) -> str:
    return codec.split_envelope(value or b"")[0]


def inner(value: bytes | None) -> dict[str, Any]:
    return dict(C.decode(C.decode(value or b"").record["payload"]).record)


def journal_of(b: Built, run_id: str = RUN) -> list[tuple[int, StoredRecord]]:
    """(index in the journal stream, record) of the run's journal records."""
    return [(i, r) for i, r in enumerate(b.records("journal")) if r.key == run_id.encode()]


def entries(b: Built, run_id: str = RUN) -> list[tuple[int, StoredRecord]]:
    return [(i, r) for i, r in journal_of(b, run_id) if kind_of(r.value) == codec.JOURNAL_RECORD]


def entry_value(payload: bytes) -> bytes:
    return C.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": journal_entry_hash(payload)})


def text_of(report: RunReport) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = render_text(report.header, iter(report.stages), out)
    return code, out.getvalue().splitlines()


def json_of(report: RunReport) -> dict[str, Any]:
    out = io.StringIO()
    render_json(report.header, iter(report.stages), out)
    return dict(json.loads(out.getvalue()))


def first_problem(report: RunReport, section: str) -> Problem:
    verdict = getattr(report.header, section)
    assert verdict is not None and verdict.problem is not None, (section, report.header)
    return verdict.problem  # type: ignore[no-any-return]


def located(problem: Problem) -> tuple[str, str, int | None]:
    return problem.code, problem.stream, problem.offset


def assert_exit(report: RunReport, code: int) -> list[str]:
    """The exit code is ``code`` in the report, the text and the JSON; return the text lines."""
    assert report.exit_code == code, report.header
    text_code, lines = text_of(report)
    assert text_code == code
    document = json_of(report)
    assert (document["exit_code"], document["ok"]) == (code, code == EXIT_VERIFIED)
    return lines


def kcat_file(b: Built, path: Path, stream: str) -> Path:
    """What ``kcat -C -J`` prints for one topic (bytes written into JSON strings as they are)."""

    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode("utf-8", "surrogateescape")

    lines = [
        json.dumps(
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "ts": r.timestamp_ms,
                "key": text(r.key),
                "payload": text(r.value),
            }
        )
        for r in b.records(stream)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
    return path


FLOW = [ProposedAction("navigate", "http://site/a.html"), ProposedAction("click", "#next"), ProposedAction("submit", "#go")]


def producer_keys_of(name: str, directory: Path) -> ProducerKeys:
    """A producer host's keys with the test identity of ``name`` (``tests.support.producers``: registered and pinned)."""
    return ProducerKeys(
        name,
        producer_signer(name),
        lineage=AuditKey.from_secret(b"lineage-key-of-" + name.encode()),
        redaction=AuditKey.from_secret(b"redaction-key-of-" + name.encode()),
        directory=directory,
        ring=KeyRing(()),
    )


def session_script(keys: InstallKeys, tmp_path: Path) -> tuple[Callable[[Writer], None], list[Any]]:
    """run-a: one coding stage, then a browser session whose actions were published but whose result never was."""
    worker = producer_keys_of("navigator@test", tmp_path / "navigator-keys")
    publisher = RecordingPublisher(worker)
    session = ComputerUseSession(
        RUN,
        "browser-0",
        keys=worker,
        store=DirBlobStore(tmp_path / "cas"),
        publisher=publisher,
        worker_id="navigator@test",
        worktree=tmp_path / "w",
    )
    frames = [Frame(b"\x89PNG" + f"frame-{i}".encode() * 30, f'- heading "Step {i}"\n') for i in range(4)]
    outcome = session.run(ScriptedAgent(FLOW), FakeDriverFactory(FakeDriver(frames)))
    actions = [value for _, _, value in publisher.actions]

    def script(w: Writer) -> None:
        w.stage(RUN, "stage-0")
        for value in actions:  # the worker was killed before it published its result
            w.feed(RUN, value)
        w.close(RUN)

    return script, list(outcome.records)


def build_checkpointed(
    tmp_path: Path, script: Callable[[Writer], None], *, checkpoint_every: int = 1000, keys: InstallKeys | None = None
) -> Built:
    """A run written by ``script`` through the reference core with ``checkpoint_every`` small enough for periodic
    checkpoints (seals every 2 entries), its keys (``keys``: another build's, for the same log), content store and
    pinned keys."""
    keys = keys or init_keys(tmp_path / "keys")
    store = DirBlobStore(tmp_path / "cas")
    writer = Writer(keys, store)
    config = SchedulerConfig(
        roles=ROLES,
        signer=keys.signer,
        audit_key=keys.audit.secret,
        audit_key_id=keys.audit.key_id,
        seal_every=2,
        checkpoint_every=checkpoint_every,
        producers=TEST_PRODUCERS,
    )
    writer.core = SchedulerCore(config)
    writer.state = initial_state(config, 0)
    script(writer)
    return Built(writer.source, store, keys, TrustedKeys.from_install(keys).merged(producer_trust()))
