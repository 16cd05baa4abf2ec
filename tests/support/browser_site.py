"""The browser integration tests' site and helpers: the demo site and flow, the scheduler over real Chromium, broker and S3."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil

from bernstein.consumers.core.model import SchedulerConfig
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell
from bernstein.producers.identity import SigningProducer
from bernstein.schemas import codec
from bernstein.schemas.canonical import journal_entry_hash
from bernstein.substrate.cas import BlobStore
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import InstallKeys
from bernstein.verifier.kafka_source import KafkaSource
from bernstein.verifier.sources import StoredRecord
from tests.support.computer_use import edit_entry
from tests.support.producer_setup import registry_of

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "demo" / "site"
SIGNUP_FLOW = REPO / "demo" / "flows" / "signup.json"
STREAMS = ("submissions", "journal", "refusals", "audit", "deadletter", "checkpoints")


class RecordingStore:
    """A ``BlobStore`` that remembers every digest it was asked to store."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.digests: set[str] = set()

    def put(self, data: bytes) -> str:
        digest = self.inner.put(data)
        self.digests.add(digest)
        return digest

    def get(self, digest: str) -> bytes:
        return self.inner.get(digest)

    def has(self, digest: str) -> bool:
        return self.inner.has(digest)

    def describe(self) -> str:
        return self.inner.describe()


def scheduler_config(keys: InstallKeys, producers: Sequence[SigningProducer] = ()) -> SchedulerConfig:
    """``producers`` are registered (every role, agent kind browser) besides the test identities."""
    return SchedulerConfig(
        roles={"navigator": "browser", "developer": "coding"},
        signer=keys.signer,
        audit_key=keys.audit.secret,
        audit_key_id=keys.audit.key_id,
        producers=registry_of(*producers),
    )


def run_scheduler(
    bootstrap: str, topics: Topics, keys: InstallKeys, *, expect: int, producers: Sequence[SigningProducer] = ()
) -> None:
    """The real transactional scheduler, in-process, until it has consumed ``expect`` records."""
    log = io.StringIO()
    shell = SchedulerShell(
        bootstrap=bootstrap, topics=topics, partition=0, core=SchedulerCore(scheduler_config(keys, producers)), progress=log
    )
    counters = shell.run(until=lambda c: c.consumed >= expect, idle_exit=60.0)
    assert counters.consumed == expect, f"scheduler consumed {counters.consumed} of {expect}:\n{log.getvalue()}"


def all_topic_records(bootstrap: str, topics: Topics) -> Iterator[StoredRecord]:
    """Every record of every topic under the prefix, submissions included."""
    source = KafkaSource(bootstrap, topics)
    for stream in STREAMS:
        for partition in source.partitions(stream):
            yield from source.records(stream, partition)


def refusals(bootstrap: str, topics: Topics) -> list[dict[str, object]]:
    source = KafkaSource(bootstrap, topics)
    return [codec.decode(r.value or b"").record for p in source.partitions("refusals") for r in source.records("refusals", p)]


def edit_action(record: StoredRecord, **changes: object) -> StoredRecord:
    """One ComputerUseEntry re-encoded with ``changes`` (its stored entry hash left as it was)."""
    edited = edit_entry(record, rehash=False, **changes)
    envelope = codec.decode(edited.value or b"").record
    assert journal_entry_hash(envelope["payload"]) != envelope["entry_hash"]
    return edited


def chromium_processes(marker: str) -> list[psutil.Process]:
    """Live Chromium processes whose command line mentions ``marker`` (a profile path of this test run)."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or ())
            if "chrom" in (process.info["name"] or "").lower() and marker in cmdline:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
