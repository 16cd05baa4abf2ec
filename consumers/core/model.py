"""The scheduler core's value types: what goes into ``step`` and what comes out.

Nothing here touches Kafka; the transaction shell (``consumers/shell/``)
turns Kafka messages into ``InputRecord`` and ``OutputRecord`` into produces.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from bernstein.schemas.canonical import checkpoint_genesis, journal_genesis
from bernstein.schemas.merkle import Frontier
from bernstein.schemas.records import MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from bernstein.consumers.core.undo import UndoLog

OUTPUT_FRAMING_ALLOWANCE: Final = 16 * 1024
"""What ``max_output_bytes`` leaves of the topics' ``max.message.bytes`` for Kafka's own framing:
the record batch header (61 bytes), the record's varints (at most 36) and the header
varints (at most 10 per header) take under 200 bytes; the rest is margin."""
DEFAULT_MAX_OUTPUT_BYTES: Final = MAX_MESSAGE_BYTES - OUTPUT_FRAMING_ALLOWANCE
"""2,080,768: the largest output (key + value + header names and values) the core writes."""
MIN_MAX_OUTPUT_BYTES: Final = 64 * 1024
"""A smaller limit could not hold a refusal or a dead letter without its raw value."""
_K = TypeVar("_K", "SealKey", "AuditKeyVersion")

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

    @property
    def public_key_raw(self) -> bytes:
        """The 32-byte public key (a checkpoint's note names its key by it)."""
        ...

    def sign(self, data: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Lifetime:
    """``[valid_from_ms, valid_until_ms)``, compared with an input record's Kafka timestamp."""

    valid_from_ms: int = 0
    valid_until_ms: int | None = None

    def contains(self, timestamp_ms: int) -> bool:
        return timestamp_ms >= self.valid_from_ms and (self.valid_until_ms is None or timestamp_ms < self.valid_until_ms)


@dataclass(frozen=True, slots=True)
class SealKey:
    """One of the scheduler's seal keys (private part held) with its lifetime."""

    signer: Signer
    lifetime: Lifetime = Lifetime()


@dataclass(frozen=True, slots=True)
class AuditKeyVersion:
    """One of the scheduler's audit keys with its lifetime."""

    secret: bytes
    key_id: str
    lifetime: Lifetime = Lifetime()


def key_for(keys: Sequence[_K], timestamp_ms: int) -> _K:
    """The key the scheduler uses for an input stamped ``timestamp_ms`` (docs/security.md, rotation).

    The newest key whose lifetime contains the timestamp; if none does, the newest key. Keys are
    oldest first. A pure function of the key ring and the input, so a replay picks the same key.
    """
    for key in reversed(keys):
        if key.lifetime.contains(timestamp_ms):
            return key
    return keys[-1]


@dataclass(frozen=True, slots=True)
class ProducerKey:
    """A producer's registered Ed25519 public key and the time it may sign in."""

    key_id: str
    public_key: bytes
    lifetime: Lifetime = Lifetime()


DEFAULT_LOG_NAME: Final = "bernstein"
MAX_LOG_EPOCH: Final = 2**31 - 1
LOG_NAME_RULE: Final = "must be 1-128 characters of A-Z a-z 0-9 _ . : @ = - /, not starting or ending with /"
_LOG_NAME_RE: Final = re.compile(r"[A-Za-z0-9_.:@=-](?:[A-Za-z0-9_.:@=/-]{0,126}[A-Za-z0-9_.:@=-])?")


def is_valid_log_name(value: object) -> bool:
    """A log name fits a C2SP origin and key name (no spaces, no ``+``) and reads as one: ``LOG_NAME_RULE``."""
    return isinstance(value, str) and _LOG_NAME_RE.fullmatch(value) is not None


DEFAULT_MAX_OPEN_RUNS: Final = 10_000
"""Open runs a producer may have at once unless its manifest entry says otherwise (``max_open_runs``): an open run
keeps its stages, evidence sets and blob digests in the scheduler's memory until it is closed."""


@dataclass(frozen=True)
class Producer:
    """A registered producer: its name (``producer.id`` of its submissions), grants and keys."""

    name: str
    roles: frozenset[str]
    """Roles it may submit under."""
    agent_kinds: frozenset[str]
    """Agent kinds it may act as: those of its roles, and any granted explicitly (computer-use actions
    carry no role: a browser worker needs ``browser``)."""
    keys: tuple[ProducerKey, ...] = ()
    run_prefixes: tuple[str, ...] = ()
    """Run ids it owns: a run whose id starts with one of these takes records only from this producer and
    its ``collaborators`` (RUN_NOT_OWNED otherwise). No two producers' prefixes overlap."""
    collaborators: frozenset[str] = frozenset()
    """Producers that may add stages, actions and closes to its runs (a multi-agent run)."""
    max_open_runs: int = DEFAULT_MAX_OPEN_RUNS
    """Runs it may have open at once (opened by its accepted records, not yet closed): a record that would open
    one more is refused (OPEN_RUNS_EXCEEDED)."""


@dataclass(frozen=True)
class ProducerRegistry:
    """Every registered producer, and which producer each key id belongs to."""

    producers: Mapping[str, Producer] = field(default_factory=dict)
    by_key: Mapping[str, tuple[Producer, ProducerKey]] = field(default_factory=dict)

    @classmethod
    def of(cls, producers: Sequence[Producer]) -> ProducerRegistry:
        by_key: dict[str, tuple[Producer, ProducerKey]] = {}
        for producer in producers:
            for key in producer.keys:
                if key.key_id in by_key:
                    raise ValueError(
                        f"key {key.key_id} is registered to both {by_key[key.key_id][0].name!r} and {producer.name!r}"
                    )
                by_key[key.key_id] = (producer, key)
        return cls({p.name: p for p in producers}, by_key)

    def lookup(self, key_id: str) -> tuple[Producer, ProducerKey] | None:
        return self.by_key.get(key_id)

    def run_owner(self, run_id: str) -> tuple[Producer, str] | None:
        """The producer that owns ``run_id`` by its run prefixes, with the prefix; None for an unowned run id."""
        for producer in self.producers.values():
            for prefix in producer.run_prefixes:
                if run_id.startswith(prefix):
                    return producer, prefix
        return None


@dataclass(frozen=True)
class SchedulerConfig:
    """Everything besides the input that the outputs depend on."""

    roles: Mapping[str, str]
    """role -> agent_kind, from the roles manifest."""
    signer: Signer
    """The current seal key (signs seals and checkpoints when ``seal_keys`` is empty)."""
    audit_key: bytes
    audit_key_id: str
    """The current audit key (MACs the audit chain when ``audit_keys`` is empty)."""
    seal_every: int = 1000
    """A non-final seal after every this many entries of a run."""
    producers: ProducerRegistry = field(default_factory=ProducerRegistry)
    """Registered producers (the manifest's ``[[producers]]``): every submission must be signed by
    one of their keys, valid at the input's timestamp, under a role the producer is granted."""
    seal_keys: tuple[SealKey, ...] = ()
    """The seal key ring, oldest first, when keys were rotated (``key_for`` picks one per input)."""
    audit_keys: tuple[AuditKeyVersion, ...] = ()
    """The audit key ring, oldest first (retired keys included: rebuild checks old records)."""
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
    submission_partitions: int | None = None
    """The submissions topic's partition count: an input record (submission, run close or computer-use
    action) must sit on ``bernstein.schemas.partitioning.partition_for(key, submission_partitions)``, else it is
    refused with WRONG_PARTITION. The shell sets it from the topic's metadata at start; None checks
    nothing (offline tools, tests of other rules)."""

    log_name: str = DEFAULT_LOG_NAME
    """The deployment's name in every partition log's checkpoint origin (``canonical.tlog_origin``): witnesses
    and proofs name the log by it, so it stays the same for the deployment's life (``is_valid_log_name``)."""
    log_epoch: int = 1
    """The logs' epoch in the origin: raised when a deployment deliberately starts its topics over, so that
    the new logs are new origins to a witness rather than a rewritten history of the old ones."""

    def __post_init__(self) -> None:
        if not is_valid_log_name(self.log_name):
            raise ValueError(f"log name {self.log_name!r}: {LOG_NAME_RULE}")
        if type(self.log_epoch) is not int or not 1 <= self.log_epoch <= MAX_LOG_EPOCH:
            raise ValueError(f"log epoch {self.log_epoch!r}: a whole number from 1 to {MAX_LOG_EPOCH}")

    def seal_key_at(self, timestamp_ms: int) -> Signer:
        """The seal key for an input stamped ``timestamp_ms``."""
        if not self.seal_keys:
            return self.signer
        return key_for(self.seal_keys, timestamp_ms).signer

    def audit_key_at(self, timestamp_ms: int) -> AuditKeyVersion:
        """The audit key for an input stamped ``timestamp_ms``."""
        if not self.audit_keys:
            return AuditKeyVersion(self.audit_key, self.audit_key_id)
        return key_for(self.audit_keys, timestamp_ms)

    def audit_secret(self, key_id: str) -> bytes | None:
        """Any audit key of the ring by id (rebuild checks records MACed before a rotation)."""
        for key in self.audit_keys or (AuditKeyVersion(self.audit_key, self.audit_key_id),):
            if key.key_id == key_id:
                return key.secret
        return None


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
    opened_by: str = ""
    """The producer whose accepted record opened the run (its first journal entry's ``producer.id``): the run counts
    toward that producer's open runs until it is closed. "" in states written before producers had limits."""

    @classmethod
    def new(cls, run_id: str) -> RunState:
        return cls(head=journal_genesis(run_id))

    def close(self) -> None:
        """The run's final seal: keep only what a later input to the closed run can still produce.

        Every later input to a closed run is refused, and only two of its checks read the run
        (``consumers/core/step.py``'s order): a submission or computer-use action whose submission_id
        the run journalled is DUPLICATE_SUBMISSION, naming the earlier stage or session (that check
        comes before RUN_CLOSED), so ``submissions`` stays; anything else is RUN_CLOSED, which names
        only the run id. ``head``, ``entry_count`` and ``sealed_count`` (what the final seal cited)
        stay for the rebuild's chain check and for anyone reading the state. Stages, evidence sets,
        sessions and blob digests are only read after the closed check, so they go: a closed run
        costs its submission map and a few fields (docs/scheduler.md, "How the scheduler's state grows").
        """
        self.closed = True
        self.stages = {}
        self.evidence = {}
        self.sessions = {}
        self.blobs = set()
        self.evidence_bytes = 0


def count_open_runs(runs: Mapping[str, RunState]) -> dict[str, int]:
    """Each producer's open runs, counted from the runs: what ``SchedulerState.open_runs`` holds."""
    counts: dict[str, int] = {}
    for run in runs.values():
        if run.opened_by and not run.closed:
            counts[run.opened_by] = counts.get(run.opened_by, 0) + 1
    return counts


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
    tree: Frontier = field(default_factory=Frontier)
    """The partition's Merkle log (every journal entry and seal written, in order) as its O(log n) frontier;
    immutable, so an undo keeps the one it saw."""
    open_runs: dict[str, int] = field(default_factory=dict)
    """producer -> its open runs (``opened_by`` of runs not closed), kept by the step; derived from ``runs``
    (``count_open_runs``) wherever a state is built from elsewhere (a snapshot, a rebuild, the native core)."""
    undo: UndoLog | None = field(default=None, compare=False, repr=False)
    """The open undo epochs (``bernstein.consumers.core.undo``), while the shell may still rewind; not part of the state."""

    def __post_init__(self) -> None:
        if not self.checkpoint_head:
            self.checkpoint_head = checkpoint_genesis(self.partition)

    def run(self, run_id: str) -> RunState | None:
        return self.runs.get(run_id)

    def run_for(self, run_id: str) -> RunState:
        """The run's state, created (at its genesis) on first use, for a change: every change the step makes to a
        run takes it from here, so the undo log sees the run before it changes."""
        if self.undo is not None:
            self.undo.save(self, run_id)
        run = self.runs.get(run_id)
        if run is None:
            run = self.runs[run_id] = RunState.new(run_id)
        return run
