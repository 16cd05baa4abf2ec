"""The HTML run report's cost against the verifier's own, on one run of 1,000 stages and 1,000 screenshots.

    python -m bench.report [--sessions 100] [--actions 10] [--stages 1000] [--trials 3]

Builds (once; cached under .infra/bench-cache) a dump of one run produced by the real scheduler core: ``--sessions``
browser sessions of ``--actions`` actions each (every action a distinct 128x80 PNG screenshot of noise, about 31 KB,
recorded by the real computer-use session with signed lineage), and research stages (one page, one quoted claim)
and ops stages (a signed receipt) in turn up to ``--stages`` stages; signed submissions, the audit chain,
checkpoints and a final seal. Then, in the same run, best of ``--trials`` each, interleaved: the verifier alone
(``verify`` with the dump's CAS: every blob reattached and re-hashed, every session replayed) and the report
(``build_report``: that same verification once, then the journal read again, the evidence read back and the page
written). Prints both times, the page's size and what it holds; the last line is ``report_vs_verify=<ratio>`` (the
report's time over the verifier's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from bernstein.consumers.core.model import InputRecord, Producer, ProducerKey, ProducerRegistry, SchedulerConfig, Stream
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.producers.activity import ActivityResult
from bernstein.producers.computer_use import ComputerUseSession, Frame, ProposedAction, ScriptedAgent
from bernstein.producers.dataops import DataOpsActivity
from bernstein.producers.emitter import encode_signed_close, encode_signed_submission, submission_record
from bernstein.producers.research import ResearchBudget, ResearchWorker
from bernstein.producers.research.fetch import FetchedPage
from bernstein.producers.research.synthesis import ClaimDraft, SpanRef
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import AuditKey, Ed25519Signer, KeyPurpose, KeyRing, ProducerKeys, TrustedKey, TrustedKeys
from bernstein.verifier.html import build_report
from bernstein.verifier.sources import DUMP_FORMAT, DumpSource, StoredRecord, encode_dump_line
from bernstein.verifier.verify import verify

REPO = Path(__file__).resolve().parent.parent
RUN = "bench-report"
FORMAT = "report-v1"
SEAL = Ed25519Signer.from_seed(b"\x0c" * 32)
AUDIT = AuditKey.from_secret(b"bench-report-audit-key-012345678")
PRODUCER = Ed25519Signer.from_seed(b"\x0d" * 32)
ROLES = {"scout": "research", "navigator": "browser", "operator": "ops"}
TOPICS = {
    "journal": "bench.activity.journal",
    "audit": "bench.audit",
    "refusals": "bench.activity.refusals",
    "deadletter": "bench.activity.deadletter",
    "checkpoints": "bench.checkpoints",
}


def trusted() -> TrustedKeys:
    return TrustedKeys.of(
        [
            TrustedKey(SEAL.key_id, KeyPurpose.SEAL, SEAL.public_key_raw),
            TrustedKey(AUDIT.key_id, KeyPurpose.AUDIT, AUDIT.secret),
            TrustedKey(PRODUCER.key_id, KeyPurpose.PRODUCER, PRODUCER.public_key_raw, producer="bench"),
        ]
    )


def noise_png(width: int = 128, height: int = 80) -> bytes:
    """A real PNG of random pixels (incompressible, like a busy screenshot's detail)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + os.urandom(width * 3) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b"")


class _Driver:
    """A browser that shows the next scripted frame before each action."""

    def __init__(self, frames: list[Frame]) -> None:
        self.frames = frames
        self.done = 0

    def observe(self) -> Frame:
        return self.frames[min(self.done, len(self.frames) - 1)]

    def perform(self, action: ProposedAction) -> None:
        self.done += 1

    def close(self) -> None:
        pass


class _Publisher:
    producer_id = "bench"

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def publish_action(self, run_id: str, submission_id: str, value: bytes) -> str:
        self.values.append(value)
        return f"memory@{len(self.values)}"

    def publish_result(self, run_id: str, stage_id: str, role: str, result: ActivityResult) -> str:
        self.values.append(signed(result, stage_id, role))
        return f"memory@{len(self.values)}"


def signed(result: ActivityResult, stage_id: str, role: str) -> bytes:
    record = submission_record(
        result, submission_id=f"s-{stage_id}", run_id=RUN, stage_id=stage_id, role=role, producer_id="bench", sdk="bench"
    )
    record["occurred_at_ms"] = 1
    return encode_signed_submission(record, PRODUCER)


def build_dump(root: Path, sessions: int, actions: int, stages: int) -> None:
    manifest = root / "manifest.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("bench_format") == [FORMAT, sessions, actions, stages]:
        return
    if root.exists():
        shutil.rmtree(root)
    print(f"bench: building a run of {stages} stages and {sessions * actions} screenshots in {root} (cached)", flush=True)
    cas = DirBlobStore(root / "cas")
    registry = ProducerRegistry.of(
        [Producer("bench", frozenset(ROLES), frozenset(ROLES.values()), (ProducerKey(PRODUCER.key_id, PRODUCER.public_key_raw),))]
    )
    core = SchedulerCore(
        SchedulerConfig(
            roles=ROLES, signer=SEAL, audit_key=AUDIT.secret, audit_key_id=AUDIT.key_id, seal_every=10**9, producers=registry
        )
    )
    state = initial_state(core.config, 0)
    streams = ("journal", "audit", "checkpoints", "refusals")
    for stream in streams:
        (root / "topics" / stream).mkdir(parents=True, exist_ok=True)
    files = {stream: (root / "topics" / stream / "0.jsonl").open("wb") for stream in streams}
    offsets = dict.fromkeys(streams, 0)
    inputs = 0

    def feed(value: bytes) -> None:
        nonlocal state, inputs
        state, outputs = core.step(state, InputRecord("bench.activity.submissions", 0, inputs, inputs, RUN.encode(), value))
        inputs += 1
        if any(o.stream is Stream.REFUSALS or o.stream is Stream.DEADLETTER for o in outputs):
            raise SystemExit("bench: the synthetic input was refused; fix the generator")
        for out in outputs:
            stream = out.stream.value
            files[stream].write(
                encode_dump_line(
                    StoredRecord(stream, TOPICS[stream], 0, offsets[stream], out.timestamp_ms, out.key, out.value, out.headers)
                )
            )
            offsets[stream] += 1

    lineage = AuditKey.from_secret(b"bench-report-lineage-key-0123456")
    keys = ProducerKeys("bench", PRODUCER, lineage=lineage, redaction=lineage, directory=root / "producer", ring=KeyRing(()))
    flow = [ProposedAction("navigate", "https://site.test/0")] + [
        ProposedAction("type", "#q", f"value {i}") if i % 3 == 1 else ProposedAction("click", f"#b{i}") for i in range(1, actions)
    ]
    for s in range(sessions):
        publisher = _Publisher()
        frames = [Frame(noise_png(), f'- heading "session {s} frame {i}"\n') for i in range(actions)]
        session = ComputerUseSession(
            RUN, f"browser-{s}", keys=keys, store=cas, publisher=publisher, worker_id="bench", worktree=root / "w"
        )
        session.run(ScriptedAgent(flow), lambda _profile, frames=frames: _Driver(frames))  # type: ignore[misc]
        for value in publisher.values:
            feed(value)
    for i in range(stages - sessions):
        if i % 2 == 0:
            url = f"https://pages.test/{i}"
            page = f"<html><body><p>Page {i} says the figure is {i * 7}.</p><p>{'filler ' * 200}</p></body></html>".encode()

            def fetch(u: str, page: bytes = page) -> FetchedPage:
                return FetchedPage(u, page, final_url=u, status=200, content_type="text/html")

            def synthesise(query: str, fetched: Any, i: int = i) -> list[ClaimDraft]:
                return [
                    ClaimDraft(
                        f"The figure is {i * 7}.", (SpanRef(fetched[0].source_ref, f"Page {i} says the figure is {i * 7}."),)
                    )
                ]

            run = ResearchWorker(store=cas, budget=ResearchBudget(max_fetches=2)).run(
                query=f"figure {i}", sources=[url], fetch_fn=fetch, synthesise=synthesise
            )
            cas.put(run.result.artifact)
            feed(signed(run.result, f"research-{i}", "scout"))
        else:
            activity = DataOpsActivity("ops", RUN, f"ops-{i}", store=cas, signer=PRODUCER)
            activity.add_input("service.conf", f"workers = {i}\n".encode())
            activity.plan([f"set workers = {i + 1}"])
            activity.add_output("service.conf", f"workers = {i + 1}\n".encode())
            result, _ = activity.finish()
            cas.put(result.artifact)
            feed(signed(result, f"ops-{i}", "operator"))
    feed(
        encode_signed_close(
            submission_id="close", run_id=RUN, producer_id="bench", occurred_at_ms=0, signer=PRODUCER, sdk="bench"
        )
    )
    for handle in files.values():
        handle.close()
    shutil.rmtree(root / "w", ignore_errors=True)
    blobs = sum(1 for p in (root / "cas").rglob("*") if p.is_file())
    manifest.write_text(
        json.dumps({"format": DUMP_FORMAT, "runs": [RUN], "blobs": blobs, "bench_format": [FORMAT, sessions, actions, stages]})
    )


def time_verify(root: Path) -> float:
    started = time.perf_counter()
    report = verify(RUN, DumpSource(root), cas=DirBlobStore(root / "cas"), trusted=trusted())
    elapsed = time.perf_counter() - started
    if report.exit_code != 0:
        raise SystemExit(f"bench: the run did not verify (exit {report.exit_code})")
    return elapsed


def time_report(root: Path) -> tuple[float, int, int, int]:
    started = time.perf_counter()
    rendered = build_report(RUN, DumpSource(root), cas=DirBlobStore(root / "cas"), trusted=trusted(), command=["bench"])
    data = rendered.html.encode("utf-8")
    elapsed = time.perf_counter() - started
    if rendered.exit_code != 0:
        raise SystemExit(f"bench: the report's verdict is {rendered.verdict}")
    return elapsed, len(data), rendered.stages, rendered.images


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--actions", type=int, default=10)
    parser.add_argument("--stages", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=REPO / ".infra" / "bench-cache")
    args = parser.parse_args()
    root = args.cache / f"report-{args.sessions}x{args.actions}-{args.stages}"
    build_dump(root, args.sessions, args.actions, args.stages)
    verifies: list[float] = []
    reports: list[float] = []
    size = stages = images = 0
    for _ in range(args.trials):
        verifies.append(time_verify(root))
        seconds, size, stages, images = time_report(root)
        reports.append(seconds)
    best_verify, best_report = min(verifies), min(reports)
    blob_bytes = sum(p.stat().st_size for p in (root / "cas").rglob("*") if p.is_file())
    print(f"run:      {stages} stages, {images} distinct screenshots embedded, {blob_bytes / 1e6:.1f} MB of blobs in the CAS")
    print(f"verify:   {best_verify:.2f}s (best of {args.trials}: {', '.join(f'{s:.2f}' for s in verifies)})")
    print(
        f"report:   {best_report:.2f}s (best of {args.trials}: {', '.join(f'{s:.2f}' for s in reports)}), the verification "
        f"included; page {size / 1e6:.1f} MB ({size / max(stages, 1) / 1e3:.1f} kB a stage)"
    )
    print(f"report_seconds={best_report:.2f}")
    print(f"report_bytes={size}")
    print(f"report_vs_verify={best_report / best_verify:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
