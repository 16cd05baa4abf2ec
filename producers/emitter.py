"""The emitter SDK: store the evidence, then publish one Avro submission.

Order matters and is enforced: every observation's bytes and the artifact
bytes are in the CAS before the event that names them is produced, so a
journalled hash can always be reattached. Publishing uses an idempotent
producer (acks=all) keyed by run id and waits for the broker's
acknowledgement; a broker or S3 failure raises a typed ``EmitError``, never
a silent loss.

A producer never creates topics: before its first publish the emitter checks that
``<prefix>.activity.submissions`` exists (``Emitter.require_topic``) and raises
``TopicMissing`` (``E_TOPIC_MISSING``) naming the topic, the prefix and
``bernstein topic create --prefix P`` when it does not, so a mistyped prefix fails
instead of publishing where no scheduler reads.

Every submission is signed by the producer (docs/security.md): an
``ActivitySubmission.v3`` or ``RunClose.v2`` carries the producer's key id and its
Ed25519 signature over ``bernstein.schemas.canonical.submission_statement`` /
``run_close_statement``, and ``producer.id`` is the name of the producer's key ring
(``bernstein keys init --producer NAME``; see ``bernstein.producers.identity`` for where the
keys are loaded from). The scheduler refuses a submission that is unsigned, signed by
a key the manifest does not register to that name, or outside the key's lifetime.

Retries reuse the submission: when an acknowledgement does not come, the
emitter produces the very same bytes again (same ``submission_id``, same
``occurred_at_ms``, and, Ed25519 being deterministic, the same signature), up to
``retries`` more times, and a caller may do the same later with
``Emitter.retry(failed)``. A publish whose first attempt did land after all is then
journalled once: the scheduler refuses the repeated ``submission_id``
(DUPLICATE_SUBMISSION) instead of journalling it twice.

    emitter = Emitter.from_settings(Settings.load())          # producer keys from $BERNSTEIN_PRODUCER_KEYS_DIR
    page = emitter.capture("page", "https://example/a", body)    # stored now
    result = ActivityResult.build("research", report, [page])
    emitter.publish(run_id="run-42", stage_id="research-0", role="scout", result=result)
    emitter.close_run("run-42")
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from bernstein.producers.activity import ActivityRejected, ActivityResult, require_valid_ids
from bernstein.producers.identity import SigningProducer, load_producer, resolve_producer_id
from bernstein.schemas import codec
from bernstein.schemas.canonical import content_hash, run_close_statement, submission_signing_input, submission_statement
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.records import Observation, Position, is_valid_id
from bernstein.substrate.cas import BlobNotFound, BlobStore, CasError, S3BlobStore, check_blob_size
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import TopicMissing as TopicMissing  # re-exported: what a publish raises without the topic
from bernstein.substrate.kafka import (
    emitter_producer_config,
    is_unknown_topic,
    require_bootstrap,
    require_submissions_topic,
    topic_missing,
)
from bernstein.substrate.keys import Ed25519Signer

SDK: Final = "bernstein-python/0.1.0"


class EmitError(BernsteinError):
    """Publishing failed; nothing was acknowledged by the broker."""

    code = "E_EMIT"


class EvidenceNotStored(EmitError):
    """An observation names bytes the CAS does not hold, so it may not be published."""

    code = "E_EVIDENCE_NOT_STORED"


class PublishFailed(EmitError):
    """Not acknowledged. ``submission_id``, ``run_id`` and ``value`` say what to retry (``Emitter.retry``)."""

    code = "E_PUBLISH_FAILED"

    def __init__(
        self, message: str, *, run_id: str = "", submission_id: str = "", value: bytes = b"", retriable: bool = False
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.submission_id = submission_id
        self.value = value
        self.retriable = retriable
        """True when trying the same bytes again may succeed (a timeout, a retriable broker error)."""


@dataclass(frozen=True)
class Published:
    """Where a submission landed."""

    submission_id: str
    run_id: str
    topic: str
    partition: int
    offset: int
    value: bytes

    @property
    def where(self) -> str:
        """``topic[partition]@offset``: how commands and summaries name where it landed."""
        return str(Position(self.topic, self.partition, self.offset))


def submission_schema(result: ActivityResult) -> str:
    """ActivitySubmission.v2 (sizes declared, the per-run evidence cap applies) when every observation has
    its size, as ``capture``, ``observe`` and the modalities give it; v1 (no sizes) otherwise, which the
    scheduler refuses when it has observations (EVIDENCE_SIZES_UNDECLARED): ``Emitter`` first gives every
    observation its stored blob's size, so what it publishes is v2."""
    if all(o.size is not None for o in result.observations):
        return codec.ACTIVITY_SUBMISSION_V2
    return codec.ACTIVITY_SUBMISSION


def encode_submission(result: ActivityResult, record: Mapping[str, Any]) -> bytes:
    """``record`` (``submission_record(result, ...)``) single-object encoded as ``submission_schema(result)``."""
    return codec.encode(submission_schema(result), record)


def signed_submission(record: Mapping[str, Any], signer: Ed25519Signer) -> dict[str, Any]:
    """``record`` (an ActivitySubmission.v2 record, every observation sized) as a signed v3 record.

    The signature covers ``submission_statement(record, key id)``: every field the journal also
    keeps (``artifact`` through ``artifact_hash``; not ``producer.sdk``).
    """
    fields = {k: v for k, v in record.items() if k not in ("producer_key_id", "producer_signature")}
    statement = submission_statement(fields, signer.key_id)
    return {**fields, "producer_key_id": signer.key_id, "producer_signature": signer.sign(submission_signing_input(statement))}


def encode_signed_submission(record: Mapping[str, Any], signer: Ed25519Signer) -> bytes:
    """``record`` signed (``signed_submission``) and single-object encoded as ActivitySubmission.v3."""
    return codec.encode(codec.ACTIVITY_SUBMISSION_V3, signed_submission(record, signer))


def encode_signed_close(
    *, submission_id: str, run_id: str, producer_id: str, occurred_at_ms: int, signer: Ed25519Signer, sdk: str = ""
) -> bytes:
    """A RunClose.v2: the close signed over ``run_close_statement``."""
    statement = run_close_statement(submission_id, run_id, producer_id, occurred_at_ms, signer.key_id)
    return codec.encode(
        codec.RUN_CLOSE_V2,
        {
            "submission_id": submission_id,
            "run_id": run_id,
            "producer": {"id": producer_id, "sdk": sdk or SDK},
            "occurred_at_ms": occurred_at_ms,
            "producer_key_id": signer.key_id,
            "producer_signature": signer.sign(submission_signing_input(statement)),
        },
    )


def submission_record(
    result: ActivityResult, *, submission_id: str, run_id: str, stage_id: str, role: str, producer_id: str, sdk: str
) -> dict[str, Any]:
    """The ``ActivitySubmission`` record of ``result`` (ids are not checked here).

    The one mapping from a result to the wire record, shared by ``Emitter`` and
    the in-memory ``RecordingPublisher`` so a test double cannot drift from it.
    """
    return {
        "submission_id": submission_id,
        "run_id": run_id,
        "stage_id": stage_id,
        "role": role,
        "producer": {"id": producer_id, "sdk": sdk},
        "kind": result.kind.value,
        "artifact": result.artifact,
        "artifact_hash": result.artifact_hash,
        "evidence_set_hash": result.evidence_set_hash,
        "observations": [o.to_record() for o in result.observations],
        "terminal_state": result.terminal_state.value,
        "reason_code": result.reason_code,
        "occurred_at_ms": int(time.time() * 1000),
    }


class Emitter:
    """Publishes activity submissions for one producer identity, each signed with its producer key.

    ``producer`` is the producer's keys (``load_producer_keys``) or a ``ProducerIdentity``;
    ``producer_id``, when given, must be its name (``ProducerIdMismatch`` otherwise).
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        store: BlobStore,
        topics: Topics,
        producer: SigningProducer,
        producer_id: str | None = None,
        delivery_timeout: float = 30.0,
        retries: int = 2,
    ) -> None:
        from confluent_kafka import Producer

        self.store = store
        self.topics = topics
        self.producer_id = resolve_producer_id(producer, producer_id)
        self.signer = producer.signer
        self._bootstrap = require_bootstrap(bootstrap)
        self._timeout = delivery_timeout
        self._retries = retries
        self._topics_ready = False
        self._producer = Producer(emitter_producer_config(self._bootstrap))

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        producer: SigningProducer | None = None,
        producer_id: str | None = None,
        keys_dir: Path | None = None,
        store: BlobStore | None = None,
    ) -> Emitter:
        """An emitter for these settings; ``producer`` defaults to the keys of ``keys_dir`` or
        ``$BERNSTEIN_PRODUCER_KEYS_DIR`` (``bernstein.producers.identity.default_producer_keys_dir``)."""
        if producer is None:
            producer = load_producer(keys_dir)
        if store is None:
            if settings.s3 is None:
                raise EmitError("no S3 endpoint: set BERNSTEIN_S3_ENDPOINT or run `infra/up` (it writes .infra/env)")
            store = S3BlobStore(settings.s3)
        return cls(
            bootstrap=require_bootstrap(settings.kafka_bootstrap),
            store=store,
            topics=settings.topics,
            producer=producer,
            producer_id=producer_id,
        )

    # -- evidence -------------------------------------------------------------

    def capture(self, kind: str, ref: str, data: bytes) -> Observation:
        """Store ``data`` in the CAS now and return its Observation (with its size, declared when published)."""
        try:
            digest = self.store.put(data)
        except CasError as exc:
            raise EmitError(f"cannot store observation {ref!r}: {exc}") from exc
        return Observation(kind=kind, ref=ref, content_hash=digest, size=len(data))

    def store_blobs(self, blobs: Mapping[str, bytes] | list[bytes]) -> None:
        """Store extra blobs (bytes a modality's artifact names) before publishing."""
        items = blobs.values() if isinstance(blobs, Mapping) else blobs
        for data in items:
            try:
                self.store.put(data)
            except CasError as exc:
                raise EmitError(f"cannot store blob {content_hash(data)}: {exc}") from exc

    # -- publishing -----------------------------------------------------------

    def submission_value(
        self, *, run_id: str, stage_id: str, role: str, result: ActivityResult, submission_id: str | None = None
    ) -> tuple[str, bytes]:
        """The encoded, signed submission (ActivitySubmission.v3, without publishing): its id and value bytes."""
        require_valid_ids(("run_id", run_id), ("stage_id", stage_id), ("role", role))
        result = self._with_sizes(result)
        sid = submission_id or uuid.uuid4().hex
        record = submission_record(
            result, submission_id=sid, run_id=run_id, stage_id=stage_id, role=role, producer_id=self.producer_id, sdk=SDK
        )
        return sid, encode_signed_submission(record, self.signer)

    def publish(
        self, *, run_id: str, stage_id: str, role: str, result: ActivityResult, submission_id: str | None = None
    ) -> Published:
        """Store the artifact, check every observation is stored, publish, wait for the ack.

        ``submission_id`` (default: a fresh one) is the submission's identity: publishing
        again under the same id is journalled once (see the module doc).
        """
        self._require_evidence(result)
        sid, value = self.submission_value(
            run_id=run_id, stage_id=stage_id, role=role, result=result, submission_id=submission_id
        )
        return self._produce(run_id, sid, value)

    def retry(self, failed: PublishFailed) -> Published:
        """Publish again exactly what ``failed`` did not get acknowledged (same bytes, same submission_id)."""
        if not failed.value or not failed.run_id:
            raise EmitError("this PublishFailed carries nothing to retry (it was not raised by a publish)")
        return self._produce(failed.run_id, failed.submission_id, failed.value)

    def close_run(self, run_id: str, *, submission_id: str | None = None) -> Published:
        """Ask the scheduler to seal the run for good (a signed RunClose.v2)."""
        if not is_valid_id(run_id):
            raise ActivityRejected(f"run_id {run_id!r} is not a valid id", code="INVALID_RUN_ID")
        sid = submission_id or uuid.uuid4().hex
        value = encode_signed_close(
            submission_id=sid,
            run_id=run_id,
            producer_id=self.producer_id,
            occurred_at_ms=int(time.time() * 1000),
            signer=self.signer,
        )
        return self._produce(run_id, sid, value)

    def publish_raw(self, run_id: str, value: bytes, *, submission_id: str = "") -> Published:
        """Publish pre-encoded bytes as they are (tests and tools that send malformed input)."""
        return self._produce(run_id, submission_id, value)

    def flush(self) -> None:
        remaining = self._producer.flush(self._timeout)
        if remaining:
            raise PublishFailed(f"{remaining} submissions were not acknowledged within {self._timeout:.0f}s")

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> Emitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------

    def _with_sizes(self, result: ActivityResult) -> ActivityResult:
        """``result`` with every observation's size: one built without it gets its stored blob's length.

        So a submission with observations is always an ActivitySubmission.v2 (the scheduler refuses a v1
        one with EVIDENCE_SIZES_UNDECLARED: the per-run evidence cap could not count it).
        """
        if all(o.size is not None for o in result.observations):
            return result
        sized = []
        for observation in result.observations:
            if observation.size is None:
                try:
                    observation = replace(observation, size=check_blob_size(self.store, observation.content_hash))
                except BlobNotFound as exc:
                    raise EvidenceNotStored(
                        f"observation {observation.ref!r} ({observation.content_hash}) is not in the CAS, so its size "
                        "is unknown; capture it with Emitter.capture() or store_blobs() before publishing"
                    ) from exc
                except CasError as exc:
                    raise EmitError(f"cannot read the size of observation {observation.ref!r}: {exc}") from exc
            sized.append(observation)
        return replace(result, observations=tuple(sized))

    def _require_evidence(self, result: ActivityResult) -> None:
        try:
            self.store.put(result.artifact)
            # S3: stored with its checksum (``holds``), not merely present; bytes placed at the address first by
            # someone else are not this observation's evidence
            holds = getattr(self.store, "holds", self.store.has)
            for observation in result.observations:
                if not holds(observation.content_hash):
                    raise EvidenceNotStored(
                        f"observation {observation.ref!r} ({observation.content_hash}) is not in the CAS; "
                        "capture it with Emitter.capture() or store_blobs() before publishing"
                    )
        except CasError as exc:
            raise EmitError(f"cannot store evidence before publishing: {exc}") from exc

    def require_topic(self) -> None:
        """Check once that the submissions topic exists; ``TopicMissing`` (or another ``KafkaError``) if not.

        Publishing does it before its first record; a caller may do it first, e.g. before storing blobs.
        Never creates a topic: that is the Kafka admin's job (``bernstein topic create``).
        """
        if not self._topics_ready:
            require_submissions_topic(self._bootstrap, self.topics, timeout=self._timeout)
            self._topics_ready = True

    def _produce(self, run_id: str, submission_id: str, value: bytes) -> Published:
        """Produce ``value`` keyed by the run id; retry the same bytes while it is not acknowledged."""
        self.require_topic()
        attempt = 0
        while True:
            try:
                return self._produce_once(run_id, submission_id, value)
            except PublishFailed as exc:
                attempt += 1
                if attempt > self._retries or not exc.retriable:
                    raise

    def _produce_once(self, run_id: str, submission_id: str, value: bytes) -> Published:
        from confluent_kafka import KafkaException

        outcome: dict[str, Any] = {}

        def on_delivery(err: Any, msg: Any) -> None:
            outcome["err"] = err
            outcome["msg"] = msg

        def failed(message: str, *, retriable: bool) -> PublishFailed:
            return PublishFailed(message, run_id=run_id, submission_id=submission_id, value=value, retriable=retriable)

        try:
            self._producer.produce(self.topics.submissions, key=run_id.encode(), value=value, on_delivery=on_delivery)
        except BufferError:
            self._producer.flush(self._timeout)
            self._producer.produce(self.topics.submissions, key=run_id.encode(), value=value, on_delivery=on_delivery)
        except KafkaException as exc:
            raise failed(f"cannot publish submission for run {run_id!r}: {exc}", retriable=False) from exc
        deadline = time.monotonic() + self._timeout
        while "err" not in outcome and time.monotonic() < deadline:
            self._producer.poll(0.05)
        if "err" not in outcome:
            raise failed(
                f"submission {submission_id!r} for run {run_id!r} was not acknowledged within {self._timeout:.0f}s "
                "(is Kafka reachable?); it may still be delivered: Emitter.retry(error) publishes the same "
                "submission_id, which is journalled once",
                retriable=True,
            )
        if outcome["err"] is not None:
            err = outcome["err"]
            if is_unknown_topic(err):  # deleted since the check
                raise topic_missing(self._bootstrap, self.topics)
            retriable = bool(getattr(err, "retriable", lambda: False)())
            raise failed(f"broker refused submission for run {run_id!r}: {err}", retriable=retriable)
        msg = outcome["msg"]
        return Published(submission_id, run_id, msg.topic(), msg.partition(), msg.offset(), value)
