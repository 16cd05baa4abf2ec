"""The scheduler core's value types: what goes into ``step`` and what comes out.

Nothing here touches Kafka; the transaction shell (``consumers/shell.py``)
turns Kafka messages into ``InputRecord`` and ``OutputRecord`` into produces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Protocol

from schemas.canonical import checkpoint_genesis, journal_genesis
from schemas.records import MAX_MESSAGE_BYTES

OUTPUT_FRAMING_ALLOWANCE: Final = 16 * 1024
"""What ``max_output_bytes`` leaves of the topics' ``max.message.bytes`` for Kafka's own framing:
the record batch header (61 bytes), the record's varints (at most 36) and the header
varints (at most 10 per header) take under 200 bytes; the rest is margin."""
DEFAULT_MAX_OUTPUT_BYTES: Final = MAX_MESSAGE_BYTES - OUTPUT_FRAMING_ALLOWANCE
"""2,080,768: the largest output (key + value + header names and values) the core writes."""
MIN_MAX_OUTPUT_BYTES: Final = 64 * 1024
"""A smaller limit could not hold a refusal or a dead letter without its raw value."""
MAX_CHECKPOINT_EVERY: Final = 1000
"""The largest ``checkpoint_every``: the verifier relies on it before a partition's first checkpoint."""


class Stream(StrEnum):
    """The output topics, by role; the shell maps them to ``<prefix>.…`` names."""

    JOURNAL = "journal"
    REFUSALS = "refusals"
    AUDIT = "audit"
    DEADLETTER = "deadletter"
    CHECKPOINTS = "checkpoints"


@dataclass(frozen=True, slots=True)
class InputRecord:
    """One record of the input partition, exactly as Kafka delivered it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None

    @classmethod
    def of_message(cls, message: Any, partition: int) -> InputRecord:
        """A consumed ``confluent_kafka.Message`` of input partition ``partition`` (no timestamp -> 0)."""
        ts_type, ts = message.timestamp()
        return cls(message.topic(), partition, message.offset(), ts if ts_type != 0 else 0, message.key(), message.value())


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """One record to produce, in the same transaction as the input offset.

    Written to the same partition number as the input it came from, with the
    input's timestamp, so a replay reproduces every byte.
    """

    stream: Stream
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


class Signer(Protocol):
    """Deterministic signer (Ed25519): same bytes in, same signature out."""

    @property
    def key_id(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


@dataclass(frozen=True)
class SchedulerConfig:
    """Everything besides the input that the outputs depend on."""

    roles: Mapping[str, str]
    """role -> agent_kind, from the roles manifest."""
    signer: Signer
    audit_key: bytes
    audit_key_id: str
    seal_every: int = 1000
    """A non-final seal after every this many entries of a run."""
    producer_keys: Mapping[str, bytes] = field(default_factory=dict)
    """key_id -> raw Ed25519 public key of producers whose signed lineage entries are accepted
    (computer-use actions); the scheduler's own signing key is always included."""
    checkpoint_every: int = MAX_CHECKPOINT_EVERY
    """A signed partition checkpoint after every step that leaves this many audit records (or more)
    uncovered since the last one (1 to ``MAX_CHECKPOINT_EVERY``); one also follows every final seal."""
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    """No output is larger than this: len(key) + len(value) + the byte length of every header
    name and value. A record whose journal entry would be larger is dead-lettered
    (OUTPUT_TOO_LARGE) by digest and size. At least ``MIN_MAX_OUTPUT_BYTES``."""
    accept_undeclared_sizes: bool = False
    """Accept ActivitySubmission.v1 inputs with observations and ComputerUseAction.v1 inputs, which declare
    no blob sizes (a migration from old producers). The per-run evidence cap does not hold for them: they
    count nothing, and only the verifier's real totals catch a run past the cap. Off: they are refused
    with EVIDENCE_SIZES_UNDECLARED."""

    def producer_key(self, key_id: str) -> bytes | None:
        if key_id == self.signer.key_id:
            return getattr(self.signer, "public_key_raw", None)
        return self.producer_keys.get(key_id)


@dataclass(slots=True)
class SessionState:
    """A computer-use session's action chain inside a run."""

    next_index: int
    last_anchor: str
    closed: bool = False


@dataclass(slots=True)
class RunState:
    """What the scheduler remembers of one run."""

    head: str
    entry_count: int = 0
    stages: dict[str, str] = field(default_factory=dict)
    """stage_id -> evidence_set_hash of every accepted stage."""
    evidence: dict[str, str] = field(default_factory=dict)
    """evidence_set_hash -> the first stage that contributed it (non-empty sets only)."""
    closed: bool = False
    sealed_count: int = 0
    sessions: dict[str, SessionState] = field(default_factory=dict)
    """session_id -> its action chain (computer-use actions)."""
    submissions: dict[str, str] = field(default_factory=dict)
    """submission_id -> the stage (or computer-use session) of every journalled entry: a
    repeated submission_id is refused (DUPLICATE_SUBMISSION), so a retried publish is journalled once."""
    evidence_bytes: int = 0
    """The declared sizes of the run's distinct evidence blobs so far (observations of ActivitySubmission.v2,
    screenshots and DOM snapshots of ComputerUseAction.v2), at most ``MAX_RUN_EVIDENCE_BYTES``."""
    blobs: set[str] = field(default_factory=set)
    """Every blob digest counted in ``evidence_bytes`` (a blob seen again in the run counts once). Grows by one
    digest (71 characters) per distinct blob: a run at the 64 MiB cap of 4 KiB blobs holds 16k of them."""

    @classmethod
    def new(cls, run_id: str) -> RunState:
        return cls(head=journal_genesis(run_id))


@dataclass(slots=True)
class SchedulerState:
    """The whole memory of one partition's scheduler.

    ``step`` takes ownership of a state and returns its successor; callers must
    not keep using the state they passed in (copy it first if they need to).
    """

    partition: int
    audit_seq: int
    audit_head: str
    runs: dict[str, RunState] = field(default_factory=dict)
    checkpoint_seq: int = 0
    """Checkpoints written on the partition (the next one's seq)."""
    checkpoint_head: str = ""
    """checkpoint_hash of the last checkpoint's payload (the partition's checkpoint genesis before the first)."""
    checkpoint_audit_seq: int = 0
    """audit_seq the last checkpoint committed to (0 before the first)."""

    def __post_init__(self) -> None:
        if not self.checkpoint_head:
            self.checkpoint_head = checkpoint_genesis(self.partition)

    def run(self, run_id: str) -> RunState | None:
        return self.runs.get(run_id)

    def run_for(self, run_id: str) -> RunState:
        """The run's state, created (at its genesis) on first use."""
        run = self.runs.get(run_id)
        if run is None:
            run = self.runs[run_id] = RunState.new(run_id)
        return run
