"""In-memory test doubles for the computer-use boundary (no browser, no Kafka); no shipped package imports them.

* ``FakeDriver``: serves scripted frames, records what it was asked to do,
  raises scripted faults.
* ``RecordingPublisher``: keeps every published action value and result, and
  encodes results with the emitter's own ``submission_record``, signed as the
  emitter signs them, so a test can fold the scheduler core over them.
* ``MemorySource``: ``bernstein.verifier.memory_source``'s, re-exported here.
* ``InMemoryScheduler``: the real, pure scheduler core folded over published
  values without Kafka, with the given producers registered; its outputs land in
  a ``MemorySource``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bernstein.consumers.core.model import InputRecord, Producer, ProducerKey, ProducerRegistry, SchedulerConfig
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.producers.activity import ActivityResult
from bernstein.producers.computer_use.boundary import Frame, ProposedAction
from bernstein.producers.emitter import encode_signed_close, encode_signed_submission, submission_record
from bernstein.producers.identity import SigningProducer
from bernstein.schemas import codec
from bernstein.substrate.keys import AuditKey, Ed25519Signer, KeyPurpose, TrustedKey, TrustedKeys
from bernstein.verifier.memory_source import MemorySource as MemorySource
from bernstein.verifier.sources import StoredRecord


class SchedulerKeys(Protocol):
    """The scheduler's seal and audit keys (``bernstein.substrate.keys.InstallKeys``, which producer code never loads)."""

    @property
    def signer(self) -> Ed25519Signer: ...

    @property
    def audit(self) -> AuditKey: ...


class FakeDriver:
    """A ``BrowserDriver`` over scripted frames: frame ``i`` is shown before action ``i``."""

    def __init__(
        self,
        frames: Sequence[Frame],
        *,
        faults: Mapping[int, Exception] | None = None,
        observe_faults: Mapping[int, Exception] | None = None,
    ) -> None:
        if not frames:
            raise ValueError("a fake driver needs at least one frame")
        self.frames = tuple(frames)
        self.faults = dict(faults or {})
        self.observe_faults = dict(observe_faults or {})
        self.performed: list[ProposedAction] = []
        self.closed = False
        self.profile_dir: Path | None = None

    def observe(self) -> Frame:
        index = len(self.performed)
        fault = self.observe_faults.get(index)
        if fault is not None:
            raise fault
        return self.frames[min(index, len(self.frames) - 1)]

    def perform(self, action: ProposedAction) -> None:
        index = len(self.performed)
        self.performed.append(action)
        fault = self.faults.get(index)
        if fault is not None:
            raise fault

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeDriverFactory:
    """A ``DriverFactory`` that hands out one ``FakeDriver`` and counts launches."""

    driver: FakeDriver
    launches: list[Path] = field(default_factory=list)
    launch_error: Exception | None = None

    def __call__(self, profile_dir: Path) -> FakeDriver:
        self.launches.append(profile_dir)
        if self.launch_error is not None:
            raise self.launch_error
        self.driver.profile_dir = profile_dir
        return self.driver


@dataclass
class PublishedResult:
    run_id: str
    stage_id: str
    role: str
    result: ActivityResult


class RecordingPublisher:
    """An ``ActionPublisher`` that keeps everything in memory; results are signed by ``producer``."""

    def __init__(self, producer: SigningProducer) -> None:
        self.producer = producer
        self.producer_id = producer.name
        self.actions: list[tuple[str, str, bytes]] = []
        self.results: list[PublishedResult] = []
        self._order: list[tuple[str, bytes]] = []

    def publish_action(self, run_id: str, submission_id: str, value: bytes) -> str:
        self.actions.append((run_id, submission_id, value))
        self._order.append((run_id, value))
        return f"memory@{len(self._order) - 1}"

    def publish_result(self, run_id: str, stage_id: str, role: str, result: ActivityResult) -> str:
        published = PublishedResult(run_id, stage_id, role, result)
        self.results.append(published)
        self._order.append((run_id, self.submission_value(published)))  # encoded once: the same bytes on every read
        return f"memory@{len(self._order) - 1}"

    def values(self) -> list[tuple[str, bytes]]:
        """Every published value in publication order, as (run_id, encoded submission)."""
        return list(self._order)

    def submission_value(self, published: PublishedResult) -> bytes:
        record = submission_record(
            published.result,
            submission_id=f"result-{published.stage_id}",
            run_id=published.run_id,
            stage_id=published.stage_id,
            role=published.role,
            producer_id=self.producer_id,
            sdk="fake",
        )
        return encode_signed_submission(record, self.producer.signer)


class InMemoryScheduler:
    """The scheduler's pure core over one in-memory partition (tests of what a session publishes).

    Each of ``producers`` is registered with every role of ``roles`` and agent kind
    ``browser`` (its computer-use actions carry no role). ``keys`` are the scheduler's
    seal and audit keys; without them the scheduler makes fresh ones. ``trusted()``
    pins what a verifier of its output needs.
    """

    def __init__(
        self,
        *producers: SigningProducer,
        keys: SchedulerKeys | None = None,
        roles: Mapping[str, str] | None = None,
        prefix: str = "mem",
    ) -> None:
        roles = dict(roles or {"navigator": "browser"})
        self.producers = tuple(producers)
        self.seal = keys.signer if keys is not None else Ed25519Signer.generate()
        self.audit = keys.audit if keys is not None else AuditKey.from_secret(os.urandom(32))
        self.registry = ProducerRegistry.of(
            [
                Producer(
                    p.name,
                    frozenset(roles),
                    frozenset({"browser", *roles.values()}),
                    (ProducerKey(p.signer.key_id, p.signer.public_key_raw),),
                )
                for p in self.producers
            ]
        )
        config = SchedulerConfig(
            roles=roles,
            signer=self.seal,
            audit_key=self.audit.secret,
            audit_key_id=self.audit.key_id,
            producers=self.registry,
        )
        self.core = SchedulerCore(config)
        self.state = initial_state(config, 0)
        self.prefix = prefix
        self.source = MemorySource()
        self._offsets: dict[str, int] = {}
        self.inputs = 0

    def trusted(self, *, include_audit_key: bool = True) -> TrustedKeys:
        """The seal key, the audit key (unless left out) and every registered producer key, pinned."""
        pinned = [TrustedKey(self.seal.key_id, KeyPurpose.SEAL, self.seal.public_key_raw)]
        if include_audit_key:
            pinned.append(TrustedKey(self.audit.key_id, KeyPurpose.AUDIT, self.audit.secret))
        pinned += [
            TrustedKey(p.signer.key_id, KeyPurpose.PRODUCER, p.signer.public_key_raw, producer=p.name) for p in self.producers
        ]
        return TrustedKeys.of(pinned)

    def feed(self, run_id: str, value: bytes, *, timestamp_ms: int = 1_700_000_000_000) -> None:
        record = InputRecord(f"{self.prefix}.activity.submissions", 0, self.inputs, timestamp_ms, run_id.encode(), value)
        self.inputs += 1
        self.state, outputs = self.core.step(self.state, record)
        for out in outputs:
            stream = out.stream.value
            offset = self._offsets.get(stream, 0)
            self._offsets[stream] = offset + 1
            self.source.add(
                StoredRecord(stream, f"{self.prefix}.{stream}", 0, offset, out.timestamp_ms, out.key, out.value, out.headers)
            )

    def feed_all(self, publisher: RecordingPublisher) -> None:
        for run_id, value in publisher.values():
            self.feed(run_id, value)

    def close_run(self, run_id: str) -> None:
        """Close ``run_id`` with a RunClose.v2 signed by the first registered producer."""
        if not self.producers:
            raise ValueError("InMemoryScheduler.close_run needs a registered producer to sign the close")
        closer = self.producers[0]
        self.feed(
            run_id,
            encode_signed_close(
                submission_id=f"close-{run_id}",
                run_id=run_id,
                producer_id=closer.name,
                occurred_at_ms=0,
                signer=closer.signer,
                sdk="fake",
            ),
        )

    def refusals(self) -> list[dict[str, Any]]:
        return [codec.decode(r.value or b"").record for r in self.source.all("refusals")]
