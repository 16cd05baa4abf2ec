"""Helpers for scheduler tests against the real broker.

Read a partition fully (read_committed) into decoded records, build and send
submissions, run the scheduler in-process, and fold the pure core over an
input partition to get the outputs a correct scheduler must have written.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bernstein.consumers.core.model import InputRecord, OutputRecord, ProducerRegistry, SchedulerConfig
from bernstein.consumers.core.native import NativeSchedulerCore, SchedulerCoreLike
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.consumers.shell import Counters, SchedulerShell, ShellOptions
from bernstein.producers.activity import ActivityResult, observe
from bernstein.schemas import codec
from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import BlobStore
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import client_config, ensure_topics
from bernstein.substrate.keys import InstallKeys
from bernstein.verifier.kafka_source import KafkaSource
from bernstein.verifier.sources import StoredRecord
from tests.support.producers import NAMES, encode_signed_close, encode_signed_submission
from tests.support.producers import producer as test_producer
from tests.support.roles import ROLES

OUTPUT_STREAMS = ("journal", "refusals", "audit", "deadletter", "checkpoints")

_ENVELOPES = {
    codec.JOURNAL_RECORD: codec.JOURNAL_ENTRIES | codec.COMPUTER_USE_ENTRIES,
    codec.SEAL_RECORD: codec.RUN_SEALS,
    codec.AUDIT_RECORD: frozenset({codec.AUDIT_ENTRY, codec.AUDIT_ENTRY_V2}),
    codec.AUDIT_RECORD_V2: frozenset({codec.AUDIT_ENTRY, codec.AUDIT_ENTRY_V2}),
    codec.CHECKPOINT_RECORD: codec.PARTITION_CHECKPOINTS,
}


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec(StoredRecord):
    """One stored record, exactly as read back (read_committed), with its decoded forms."""

    @property
    def schema(self) -> str:
        return codec.decode(self.value or b"").schema.name

    @property
    def record(self) -> dict[str, Any]:
        return codec.decode(self.value or b"").record

    @property
    def inner(self) -> dict[str, Any]:
        """The decoded payload of an envelope (JournalRecord, SealRecord, AuditRecord)."""
        decoded = codec.decode(self.value or b"")
        return codec.decode(decoded.record["payload"], expect=_ENVELOPES[decoded.schema.name]).record

    @property
    def ce_type(self) -> bytes:
        return dict(self.headers)["ce_type"]

    def stored(self) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]:
        """What must be byte-identical on replay: key, value, headers, timestamp."""
        return (self.key, self.value, self.headers, self.timestamp_ms)


def wait_stable(bootstrap: str, topic: str, partition: int = 0, *, timeout: float = 30.0) -> None:
    """Poll until no transaction is pending on the partition (last stable offset == high watermark).

    A transaction is durable once commit_transaction returns, but read_committed readers see it only
    after the coordinator has written its markers, a moment later; read before that and the last
    batch seems missing.
    """
    tp = TopicPartition(topic, partition)
    committed = Consumer(client_config(bootstrap, **{"group.id": "tests.stable", "isolation.level": "read_committed"}))
    uncommitted = Consumer(client_config(bootstrap, **{"group.id": "tests.stable", "isolation.level": "read_uncommitted"}))
    try:
        deadline = time.monotonic() + timeout
        while True:
            # ListOffsets(latest) answers the last stable offset to a read_committed client
            lso = committed.get_watermark_offsets(tp, timeout=timeout, cached=False)[1]
            high = uncommitted.get_watermark_offsets(tp, timeout=timeout, cached=False)[1]
            if lso >= high:
                return
            assert time.monotonic() < deadline, (
                f"{topic}[{partition}] keeps a transaction open (LSO {lso} < high watermark {high})"
            )
            time.sleep(0.01)
    finally:
        committed.close()
        uncommitted.close()


def read_partition(bootstrap: str, topics: Topics, stream: str, partition: int = 0) -> list[Rec]:
    """Every committed record of one stream's partition, in offset order (after any pending commit became visible).

    Read with the verifier's reader (``KafkaSource.records``: read_committed, from the beginning to the end).
    """
    wait_stable(bootstrap, topics.by_stream(stream), partition)
    return [
        Rec(**{f.name: getattr(r, f.name) for f in fields(StoredRecord)})
        for r in KafkaSource(bootstrap, topics).records(stream, partition)
    ]


def read_outputs(bootstrap: str, topics: Topics, partition: int = 0) -> dict[str, list[Rec]]:
    return {stream: read_partition(bootstrap, topics, stream, partition) for stream in OUTPUT_STREAMS}


# ---------------------------------------------------------------------------
# building and sending inputs
# ---------------------------------------------------------------------------


def result(
    kind: str = "coding", pages: Iterable[bytes] = (b"page one", b"page two"), artifact: bytes = b"report"
) -> ActivityResult:
    observations = [observe("page", f"https://example.test/{i}", data) for i, data in enumerate(pages)]
    return ActivityResult.build(kind, artifact, observations)


def submission_record(
    *,
    run_id: str,
    stage_id: str,
    role: str = "developer",
    kind: str = "coding",
    pages: Iterable[bytes] = (b"page one", b"page two"),
    artifact: bytes = b"report",
    submission_id: str | None = None,
    occurred_at_ms: int = 1_700_000_000_000,
    producer_id: str = "tests@host",
    store: BlobStore | None = None,
) -> dict[str, Any]:
    """A valid ActivitySubmission record (before encoding); its blobs go to ``store`` first, as the SDK does."""
    pages = tuple(pages)
    r = result(kind if kind in ("coding", "research", "browser", "data", "ops") else "coding", pages, artifact)
    if store is not None:
        for blob in (artifact, *pages):
            store.put(blob)
    return {
        "submission_id": submission_id or f"{run_id}/{stage_id}",
        "run_id": run_id,
        "stage_id": stage_id,
        "role": role,
        "producer": {"id": producer_id, "sdk": "tests"},
        "kind": kind,
        "artifact": r.artifact,
        "artifact_hash": r.artifact_hash,
        "evidence_set_hash": r.evidence_set_hash,
        "observations": [o.to_record() for o in r.observations],
        "terminal_state": r.terminal_state.value,
        "reason_code": r.reason_code,
        "occurred_at_ms": occurred_at_ms,
    }


def encode_submission(**kwargs: Any) -> bytes:
    """An ActivitySubmission.v3: sizes declared and signed by its producer's test key (tests/support/producers.py)."""
    return encode_signed_submission(submission_record(**kwargs))


def encode_close(run_id: str, submission_id: str | None = None) -> bytes:
    """A RunClose.v2 signed by tests@host."""
    return encode_signed_close(
        {
            "submission_id": submission_id or f"close/{run_id}",
            "run_id": run_id,
            "producer": {"id": "tests@host", "sdk": "tests"},
            "occurred_at_ms": 1_700_000_000_000,
        }
    )


def signed_stage(run: str, stage: str, store: BlobStore) -> tuple[bytes, bytes]:
    """A signed ActivitySubmission.v3 (every blob's size declared) of one page, keyed by its run."""
    page = f"{run} {stage}".encode()
    record = submission_record(run_id=run, stage_id=stage, pages=[page], store=store)
    sizes = {sha256_digest(page): len(page)}
    record["observations"] = [{**o, "size": sizes[o["content_hash"]]} for o in record["observations"]]
    return run.encode(), encode_signed_submission(record)


def mutate(value: bytes, **changes: Any) -> bytes:
    """Decode an encoded submission, change fields, encode again (a signed one signed again, as its producer.id)."""
    decoded = codec.decode(value)
    record = {**decoded.record, **changes}
    if decoded.schema.name == codec.ACTIVITY_SUBMISSION_V3:
        return encode_signed_submission(record)
    if decoded.schema.name == codec.RUN_CLOSE_V2:
        return encode_signed_close(record)
    return codec.encode(decoded.schema.name, record)


def idempotent_producer(bootstrap: str, **extra: Any) -> Any:
    """The tests' producer: keyed records go where the SDK's would (Kafka's murmur2, ``partition_for``)."""
    return Producer(
        client_config(
            bootstrap,
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.max.bytes": 2097152,
                "partitioner": "murmur2_random",
                **extra,
            },
        )
    )


def produce_all(
    bootstrap: str, topic: str, items: Sequence[tuple[bytes | None, bytes | None]], *, partition: int = 0
) -> list[int]:
    """Produce (key, value) pairs in order to one partition; return their offsets; fail on any delivery error."""
    producer = idempotent_producer(bootstrap)
    offsets: list[int | None] = [None] * len(items)
    errors: list[str] = []

    def delivered(index: int) -> Callable[[Any, Any], None]:
        def callback(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"#{index}: {err}")
            else:
                offsets[index] = msg.offset()

        return callback

    for index, (key, value) in enumerate(items):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, on_delivery=delivered(index))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, f"{remaining} undelivered, errors: {errors[:5]}"
    assert all(o is not None for o in offsets)
    return [o for o in offsets if o is not None]


# ---------------------------------------------------------------------------
# the scheduler, in-process and as a pure fold
# ---------------------------------------------------------------------------


def scheduler_config(keys: InstallKeys, *, roles: dict[str, str] | None = None, seal_every: int = 1000) -> SchedulerConfig:
    """The tests' scheduler: every test producer (tests/support/producers.py) registered with every role of ``roles``.

    They also hold a grant for ``ghost``, a role no manifest declares (a stale grant), so a submission
    under it is refused as UNKNOWN_ROLE by the roles check rather than by the producer check.
    """
    granted = dict(ROLES if roles is None else roles)
    return SchedulerConfig(
        roles=granted,
        signer=keys.signer,
        audit_key=keys.audit.secret,
        audit_key_id=keys.audit.key_id,
        seal_every=seal_every,
        producers=ProducerRegistry.of([test_producer(name, roles=[*granted, "ghost"]) for name in NAMES]),
    )


def fresh_topics(bootstrap: str, prefix: str, partitions: int = 1) -> Topics:
    """The prefix's topics, created (by the admin on a secured broker) with the deployment's ACLs granted."""
    topics = Topics(prefix)
    ensure_topics(bootstrap, topics, partitions=partitions)
    _grant(bootstrap, prefix)
    return topics


def _grant(bootstrap: str, prefix: str) -> None:
    """``tests.conftest.grant`` without the fixture: the ACLs of ``prefix`` when the clients speak SASL (secured broker)."""
    from bernstein.substrate.kafka import security_config

    if security_config().get("security.protocol", "PLAINTEXT").startswith("SASL"):
        from bernstein.commands.kafka import ROLES as ACL_ROLES
        from bernstein.commands.kafka import acls_for, apply_acls, load_spec

        apply_acls(bootstrap, acls_for(prefix, {r: f"User:{r}" for r in ACL_ROLES}, load_spec()))


def run_scheduler(
    bootstrap: str,
    topics: Topics,
    config: SchedulerConfig,
    *,
    expect: int,
    partition: int = 0,
    input_topic: str | None = None,
    options: ShellOptions | None = None,
    idle_exit: float = 30.0,
) -> tuple[Counters, str]:
    """Run the shell in-process until it has consumed ``expect`` records (or stayed idle ``idle_exit`` s)."""
    log = io.StringIO()
    shell = SchedulerShell(
        bootstrap=bootstrap,
        topics=topics,
        partition=partition,
        core=SchedulerCore(config),
        options=options or ShellOptions(),
        progress=log,
        input_topic=input_topic,
    )
    counters = shell.run(until=lambda c: c.consumed >= expect, idle_exit=idle_exit)
    assert counters.consumed == expect, f"scheduler consumed {counters.consumed} of {expect} records:\n{log.getvalue()}"
    return counters, log.getvalue()


def run_core(core_name: str, bootstrap: str, topics: Topics, config: SchedulerConfig, expect: int) -> SchedulerCoreLike:
    """Run the shell in-process with the Python reference (``python``) or the native core until it consumed ``expect``."""
    core: SchedulerCoreLike = SchedulerCore(config) if core_name == "python" else NativeSchedulerCore(config, 0)
    log = io.StringIO()
    shell = SchedulerShell(bootstrap=bootstrap, topics=topics, partition=0, core=core, progress=log)
    counters = shell.run(until=lambda c: c.consumed >= expect, idle_exit=60.0)
    assert counters.consumed == expect, f"scheduler consumed {counters.consumed} of {expect} records:\n{log.getvalue()}"
    return core


def fold(config: SchedulerConfig, inputs: Sequence[Rec], partition: int = 0) -> dict[str, list[OutputRecord]]:
    """The outputs the pure core produces over an input partition, by stream."""
    core = SchedulerCore(config)
    state = initial_state(config, partition)
    outputs: dict[str, list[OutputRecord]] = {stream: [] for stream in OUTPUT_STREAMS}
    for rec in inputs:
        state, outs = core.step(
            state,
            InputRecord(
                topic=rec.topic,
                partition=partition,
                offset=rec.offset,
                timestamp_ms=rec.timestamp_ms,
                key=rec.key,
                value=rec.value,
            ),
        )
        for out in outs:
            outputs[out.stream.value].append(out)
    return outputs


def stored_form(out: OutputRecord) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]:
    """An OutputRecord as it must read back from Kafka."""
    return (out.key, out.value, out.headers, out.timestamp_ms)


def crossings(outputs: dict[str, list[Rec]]) -> list[tuple[int, str]]:
    """(input offset, what) for every journal entry, refusal, dead letter and final seal: one per input record."""
    found: list[tuple[int, str]] = []
    for rec in outputs["journal"]:
        if rec.schema == codec.JOURNAL_RECORD:
            found.append((rec.inner["input"]["offset"], "journal"))
        elif rec.inner["final"]:
            found.append((rec.inner["last_input_offset"], "close"))
    found += [(rec.record["input"]["offset"], "refusal") for rec in outputs["refusals"]]
    found += [(rec.record["input"]["offset"], "deadletter") for rec in outputs["deadletter"]]
    return sorted(found)


class CachedSource(KafkaSource):
    """A KafkaSource that reads each partition once (the verifier scans the journal several times per run)."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        super().__init__(bootstrap, topics)
        self._cache: dict[tuple[str, int], list[StoredRecord]] = {}
        self._partitions: dict[str, list[int]] = {}

    def partitions(self, stream: str) -> list[int]:
        if stream not in self._partitions:
            self._partitions[stream] = super().partitions(stream)
        return self._partitions[stream]

    def records(self, stream: str, partition: int, **options: Any) -> Iterator[StoredRecord]:
        """Every record with its headers, read once; ``options`` (e.g. ``headers=False``) only ask for less."""
        if (stream, partition) not in self._cache:
            self._cache[(stream, partition)] = list(super().records(stream, partition))
        return iter(self._cache[(stream, partition)])
