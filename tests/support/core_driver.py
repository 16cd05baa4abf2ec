"""The Python scheduler core fed record by record (``Driver``), and the inputs the core tests build.

The unit manifest and keys, submissions, closes and computer-use actions, the decoded outputs
(``Out``), a mixed stream, a rotated key ring and the checkpoint tests' configuration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bernstein.consumers.core.model import (
    AuditKeyVersion,
    InputRecord,
    Lifetime,
    OutputRecord,
    SchedulerConfig,
    SchedulerState,
    SealKey,
    Stream,
)
from bernstein.consumers.core.rebuild import rebuild_state
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.producers.activity import ActivityResult, observe
from bernstein.schemas import codec
from bernstein.schemas.canonical import computer_use_genesis, hmac_key_id, sha256_digest
from bernstein.substrate.keys import Ed25519Signer
from tests.support.producers import NAMES, encode_signed_close, encode_signed_submission, producer, producer_signer, registry
from tests.support.roles import ROLES

TOPIC = "unit.activity.submissions"
PARTITION = 3
BASE_TS = 1_760_000_000_000
AUDIT_KEY = bytes(range(100, 132))
SIGNER = Ed25519Signer.from_seed(bytes(range(32)))
ROTATION_TS = BASE_TS + 7 * 3
"""Keys of the rotation tests change hands here (inputs 0-2 before, 3 on after)."""
RETIRED = producer("retired@test", lifetime=Lifetime(0, BASE_TS))
"""A producer whose only key was retired (or revoked) before the first input."""
FUTURE = producer("future@test", lifetime=Lifetime(BASE_TS + 1_000_000))
"""A producer whose key is not valid yet."""
SCOUT_ONLY = producer("scout@test", roles=["scout"], agent_kinds=[])
"""A producer granted one role, and no agent kind besides its role's (research)."""
UNIT_PRODUCERS = registry(
    *(name for name in NAMES if name != "unit@test"),
    # unit@test is also granted a role the manifest does not declare (a stale grant): UNKNOWN_ROLE
    extra=[producer("unit@test", roles=[*ROLES, "ghost"]), RETIRED, FUTURE, SCOUT_ONLY],
)


def make_config(seal_every: int = 1000) -> SchedulerConfig:
    return SchedulerConfig(
        roles=ROLES,
        signer=SIGNER,
        audit_key=AUDIT_KEY,
        audit_key_id=hmac_key_id(AUDIT_KEY),
        seal_every=seal_every,
        producers=UNIT_PRODUCERS,
    )


def submission(
    *,
    run_id: str = "run-1",
    stage_id: str = "stage-0",
    role: str = "developer",
    kind: str = "coding",
    pages: Iterable[bytes] = (b"page one", b"page two"),
    artifact: bytes = b'{"report":"two pages"}',
    terminal_state: str = "completed",
    reason_code: str = "ok",
    submission_id: str | None = None,
    occurred_at_ms: int = 1_700_000_000_123,
) -> dict[str, Any]:
    """A valid ActivitySubmission record (as a dict, before encoding)."""
    observations = [observe("page", f"https://example.test/{i}", data) for i, data in enumerate(pages)]
    result = ActivityResult.build(
        kind if kind in ("coding", "research", "browser", "data", "ops") else "coding", artifact, observations
    )
    return {
        "submission_id": submission_id or f"sub-{run_id}-{stage_id}",
        "run_id": run_id,
        "stage_id": stage_id,
        "role": role,
        "producer": {"id": "unit@test", "sdk": "bernstein-python/0.1.0"},
        "kind": kind,
        "artifact": result.artifact,
        "artifact_hash": result.artifact_hash,
        "evidence_set_hash": result.evidence_set_hash,
        "observations": [o.to_record() for o in result.observations],  # with sizes: published as v2
        "terminal_state": terminal_state,
        "reason_code": reason_code,
        "occurred_at_ms": occurred_at_ms,
    }


def run_close(run_id: str = "run-1", submission_id: str | None = None) -> dict[str, Any]:
    return {
        "submission_id": submission_id or f"close-{run_id}",
        "run_id": run_id,
        "producer": {"id": "unit@test", "sdk": "bernstein-python/0.1.0"},
        "occurred_at_ms": 1_700_000_000_999,
    }


def enc_sub(**kwargs: Any) -> bytes:
    """An ActivitySubmission.v3, signed by the test identity of its producer (registered in TEST_PRODUCERS)."""
    return encode_signed_submission(submission(**kwargs))


def enc_close(run_id: str = "run-1") -> bytes:
    """A RunClose.v2, signed like a submission."""
    return encode_signed_close(run_close(run_id))


def record(offset: int, value: bytes | None, key: bytes | None = b"run-1") -> InputRecord:
    return InputRecord(topic=TOPIC, partition=PARTITION, offset=offset, timestamp_ms=BASE_TS + 7 * offset, key=key, value=value)


@dataclass(frozen=True)
class Out:
    """One decoded output: what it is, its record and (for envelopes) its decoded payload."""

    raw: OutputRecord
    what: str  # journal-entry | seal | refusal | deadletter | audit
    record: dict[str, Any]
    inner: Any  # the decoded payload of an envelope, else None


def decode_out(out: OutputRecord) -> Out:
    decoded = codec.decode(out.value)
    name = decoded.schema.name
    rec = decoded.record
    if name == codec.JOURNAL_RECORD:
        assert out.stream is Stream.JOURNAL
        entry = codec.decode(rec["payload"], expect=codec.JOURNAL_ENTRIES | codec.COMPUTER_USE_ENTRIES).record
        return Out(out, "journal-entry", rec, entry)
    if name == codec.SEAL_RECORD:
        assert out.stream is Stream.JOURNAL
        return Out(out, "seal", rec, codec.decode(rec["payload"], expect=frozenset({codec.RUN_SEAL_V2})).record)
    if name == codec.REFUSAL_V2:
        assert out.stream is Stream.REFUSALS
        return Out(out, "refusal", rec, None)
    if name == codec.DEAD_LETTER_V2:
        assert out.stream is Stream.DEADLETTER
        return Out(out, "deadletter", rec, None)
    if name == codec.AUDIT_RECORD_V2:
        assert out.stream is Stream.AUDIT
        return Out(
            out, "audit", rec, codec.decode(rec["payload"], expect=frozenset({codec.AUDIT_ENTRY, codec.AUDIT_ENTRY_V2})).record
        )
    if name == codec.CHECKPOINT_RECORD:
        assert out.stream is Stream.CHECKPOINTS
        return Out(out, "checkpoint", rec, codec.decode(rec["payload"], expect=codec.PARTITION_CHECKPOINTS).record)
    raise AssertionError(f"unexpected output schema {name}")


class Driver:
    """Feeds records to one core, keeping the state, every output and the next offset."""

    def __init__(self, seal_every: int = 1000) -> None:
        self.config = make_config(seal_every)
        self.core = SchedulerCore(self.config)
        self.state = initial_state(self.config, PARTITION)
        self.outputs: list[OutputRecord] = []
        self.offset = 0

    def feed(self, value: bytes | None, key: bytes | None = b"run-1") -> list[Out]:
        self.state, outputs = self.core.step(self.state, record(self.offset, value, key))
        self.offset += 1
        self.outputs.extend(outputs)
        return [decode_out(o) for o in outputs]

    def journal_values(self) -> list[bytes]:
        return [o.value for o in self.outputs if o.stream is Stream.JOURNAL]

    def last_audit(self) -> bytes | None:
        audits = [o.value for o in self.outputs if o.stream is Stream.AUDIT]
        return audits[-1] if audits else None

    def audit_values(self) -> list[bytes]:
        return [o.value for o in self.outputs if o.stream is Stream.AUDIT]

    def checkpoint_values(self) -> list[bytes]:
        return [o.value for o in self.outputs if o.stream is Stream.CHECKPOINTS]

    def rebuilt(self) -> SchedulerState:
        return rebuild_state(
            self.config, PARTITION, self.journal_values(), self.audit_values(), checkpoint_values=self.checkpoint_values()
        )


VALID_BYTES = enc_sub()


def mixed_inputs() -> list[tuple[bytes | None, bytes | None]]:
    """Accepted, refused, redundant, duplicate, dead letters, periodic seals and closes over three runs."""
    inputs: list[tuple[bytes | None, bytes | None]] = []
    for i in range(12):
        run_id = ("run-a", "run-b", "run-c")[i % 3]
        inputs.append((run_id.encode(), enc_sub(run_id=run_id, stage_id=f"s{i}", pages=[f"p{i}".encode(), b"shared"])))
    inputs += [
        (b"run-a", enc_sub(run_id="run-a", stage_id="again", pages=[b"shared", b"p0"])),  # redundant with s0
        (b"run-b", enc_sub(run_id="run-b", stage_id="s1", pages=[b"fresh"], submission_id="again")),  # duplicate stage
        (b"run-a", enc_sub(run_id="run-a", stage_id="s0", pages=[b"p0", b"shared"])),  # a retried publish: repeated id
        (b"run-a", enc_sub(run_id="run-a", stage_id="x", role="ghost")),  # unknown role
        (b"run-a", b"\x00garbage"),
        (None, None),
        (b"run-b", enc_close("run-b")),
        (b"run-b", enc_sub(run_id="run-b", stage_id="late", pages=[b"late"])),  # run closed
        (b"run-a", VALID_BYTES[:-3]),
        (b"run-c", enc_sub(run_id="run-c", stage_id="empty-1", pages=[])),
        (b"run-c", enc_sub(run_id="run-c", stage_id="empty-2", pages=[])),
        (b"run-a", enc_close("run-a")),
        (b"run-a", enc_close("run-a")),  # second close refused
    ]
    for i in range(12, 20):
        inputs.append((b"run-c", enc_sub(run_id="run-c", stage_id=f"s{i}", pages=[f"p{i}".encode()])))
    return inputs


def run_all(inputs: list[tuple[bytes | None, bytes | None]], seal_every: int = 4) -> Driver:
    d = Driver(seal_every=seal_every)
    for key, value in inputs:
        d.feed(value, key=key)
    return d


NAVIGATOR = producer_signer("navigator@test")
"""The browser worker's producer key (registered in TEST_PRODUCERS): its lineage signature is the producer's."""


def cu_action(
    *,
    entry_suffix: bytes = b"",
    index: int = 0,
    signer: Ed25519Signer = NAVIGATOR,
    worker: str = "navigator@test",
    hmac_key: bytes = AUDIT_KEY,
    hmac: str | None = None,
    hmac_key_id: str | None = None,
) -> bytes:
    """A ComputerUseAction the core accepts (with ``entry_suffix`` spliced into its lineage entry before the last brace).

    ``signer`` signs the lineage entry as ``worker`` (producer.id); the envelope is HMAC'd with
    ``hmac_key`` unless ``hmac`` gives it.
    """
    from bernstein.schemas import canonical

    prev = computer_use_genesis("run-1", "browser-0")
    observation = canonical.observation_hash(b"shot", sha256_digest(b"dom"))
    action = {"kind": "click", "target": "#go", "value_digest": ""}
    anchor = canonical.action_anchor(prev, observation, action)
    entry = canonical.canonical_json(
        {
            "run_id": "run-1",
            "session_id": "browser-0",
            "action_index": index,
            "content_hash": anchor,
            "parent_hashes": [prev],
            "worker_id": worker,
            "key_id": signer.key_id,
            **({} if hmac_key_id is None else {"hmac_key_id": hmac_key_id}),
        }
    )
    if entry_suffix:
        entry = entry[:-1] + entry_suffix + b"}"
    return codec.encode(
        codec.COMPUTER_USE_ACTION_V2,
        {
            "screenshot_size": len(b"shot"),
            "dom_size": len(b"dom"),
            "submission_id": f"action-{index}",
            "run_id": "run-1",
            "session_id": "browser-0",
            "action_index": index,
            "producer": {"id": worker, "sdk": "unit"},
            "prev_anchor": prev,
            "screenshot_hash": sha256_digest(b"shot"),
            "dom_digest": sha256_digest(b"dom"),
            "observation_hash": observation,
            "action": action,
            "anchor": anchor,
            "lineage": {
                "entry": entry,
                "hmac": hmac if hmac is not None else canonical.lineage_hmac(hmac_key, entry),
                "key_id": signer.key_id,
                "signature": signer.sign(canonical.lineage_signing_input(entry)),
            },
            "occurred_at_ms": 1_700_000_000_500,
        },
    )


OLD_SEAL, NEW_SEAL = Ed25519Signer.from_seed(bytes(range(1, 33))), Ed25519Signer.from_seed(bytes(range(2, 34)))
OLD_AUDIT, NEW_AUDIT = b"old audit key".ljust(32, b"-"), b"new audit key".ljust(32, b"-")


def rotated_config(seal_every: int = 2) -> SchedulerConfig:
    """Seal and audit keys rotated at ROTATION_TS (inputs 0-2 are stamped before it, 3 on after it)."""
    return dataclasses.replace(
        make_config(seal_every),
        signer=NEW_SEAL,
        audit_key=NEW_AUDIT,
        audit_key_id=hmac_key_id(NEW_AUDIT),
        seal_keys=(SealKey(OLD_SEAL, Lifetime(0, ROTATION_TS)), SealKey(NEW_SEAL, Lifetime(ROTATION_TS))),
        audit_keys=(
            AuditKeyVersion(OLD_AUDIT, hmac_key_id(OLD_AUDIT), Lifetime(0, ROTATION_TS)),
            AuditKeyVersion(NEW_AUDIT, hmac_key_id(NEW_AUDIT), Lifetime(ROTATION_TS)),
        ),
    )


def rotated_driver() -> Driver:
    d = Driver(seal_every=2)
    d.config = rotated_config()
    d.core = SchedulerCore(d.config)
    d.state = initial_state(d.config, PARTITION)
    return d


def checkpoint_config(checkpoint_every: int = 1000, seal_every: int = 1000) -> SchedulerConfig:
    return SchedulerConfig(
        roles=ROLES,
        signer=SIGNER,
        audit_key=AUDIT_KEY,
        audit_key_id=hmac_key_id(AUDIT_KEY),
        seal_every=seal_every,
        checkpoint_every=checkpoint_every,
        producers=UNIT_PRODUCERS,
    )
