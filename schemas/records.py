"""Typed views of the wire contract: enums, limits and the small value types.

The Avro schemas in ``schemas/avro/`` are the authority; these types only give
Python callers names for the closed sets and bounds those schemas leave as
strings (so that an unknown value reaches the scheduler and is refused with a
typed reason rather than failing to decode).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final


class ActivityKind(StrEnum):
    """The modality of an activity; the value is what gets journalled."""

    CODING = "coding"
    RESEARCH = "research"
    BROWSER = "browser"
    DATA = "data"
    OPS = "ops"


class TerminalState(StrEnum):
    """How an activity ended. A closed set: anything else is refused."""

    COMPLETED = "completed"
    REFUSED = "refused"
    FAILED = "failed"
    TIMED_OUT = "timed_out"


KINDS: Final = frozenset(k.value for k in ActivityKind)
TERMINAL_STATES: Final = frozenset(s.value for s in TerminalState)

MAX_INLINE_ARTIFACT_BYTES: Final = 512 * 1024
"""Artifacts travel inline so the scheduler can recompute their hash without I/O."""
MAX_OBSERVATIONS: Final = 4096
MAX_ID_LENGTH: Final = 128
MAX_REF_LENGTH: Final = 4096
MAX_REASON_CODE_LENGTH: Final = 128
MAX_KIND_LENGTH: Final = 64
MAX_LABEL_LENGTH: Final = 256
"""submission_id, producer.id and producer.sdk: 1-256 characters without control characters."""
MAX_LINEAGE_ENTRY_BYTES: Final = 32 * 1024
"""A computer-use action's signed lineage entry (a flat canonical JSON object; the action
target alone may take 4096 characters, so 16 KiB of UTF-8)."""
MAX_OCCURRED_AT_MS: Final = 253_402_300_799_999
"""occurred_at_ms is 0 (1970-01-01) to this (9999-12-31T23:59:59.999Z): every date library can print it."""
MAX_KEPT_KEY_BYTES: Final = 1024
"""A dead letter keeps at most this many bytes of the input key (and always its digest and size)."""
MAX_MESSAGE_BYTES: Final = 2 * 1024 * 1024
"""The topics' ``max.message.bytes`` and the clients' ``message.max.bytes`` (substrate/kafka.py)."""
MAX_RUN_EVIDENCE_BYTES: Final = 64 * 1024 * 1024
"""The per-run evidence cap (seed 002, "CAS-growth guard"): the declared sizes of a run's distinct evidence
blobs (observations of ActivitySubmission.v2, screenshots and DOM snapshots of ComputerUseAction.v2; a
digest counts once per run) may add up to at most this many bytes. The scheduler refuses the input that
would cross it (EVIDENCE_CAP_EXCEEDED) and a v1 input that carries evidence without sizes
(EVIDENCE_SIZES_UNDECLARED, unless the scheduler accepts undeclared sizes for a migration); the verifier
checks every declared size against the stored blob and the real total of every run."""

_ID_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,127}")
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f]")


ID_RULE: Final = "must be 1-128 characters of A-Z a-z 0-9 _ . : @ + = -"
"""How every refusal of a run, stage, role or worker id words the rule ``is_valid_id`` checks."""
LABEL_RULE: Final = "must be 1-256 characters without control characters"
"""How a refusal of submission_id, producer.id or producer.sdk words the rule ``is_valid_label`` checks."""


def is_valid_id(value: object) -> bool:
    """Run, stage and role ids: 1-128 of ``A-Z a-z 0-9 _ . : @ + = -``, not starting with a dot or dash."""
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def is_valid_reason_code(value: object) -> bool:
    """Non-empty after trimming, at most 128 characters, no control characters."""
    return (
        isinstance(value, str)
        and value.strip() != ""
        and len(value) <= MAX_REASON_CODE_LENGTH
        and _CONTROL_RE.search(value) is None
    )


def has_control(value: str) -> bool:
    """True when ``value`` has a control character (U+0000-U+001F or U+007F)."""
    return _CONTROL_RE.search(value) is not None


def is_valid_label(value: object) -> bool:
    """submission_id, producer.id, producer.sdk: 1-256 characters, none of them U+0000-U+001F or U+007F."""
    return isinstance(value, str) and 0 < len(value) <= MAX_LABEL_LENGTH and _CONTROL_RE.search(value) is None


@dataclass(frozen=True, slots=True)
class Observation:
    """Bytes an agent saw behind a decision, by content hash; ``ref`` is provenance only."""

    kind: str
    ref: str
    content_hash: str
    size: int | None = None
    """The blob's byte length, declared on the wire (ActivitySubmission.v2) for the per-run evidence cap;
    None when unknown (then the submission is written as v1, which declares no sizes)."""

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"kind": self.kind, "ref": self.ref, "content_hash": self.content_hash}
        if self.size is not None:
            record["size"] = self.size
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Observation:
        return cls(kind=record["kind"], ref=record["ref"], content_hash=record["content_hash"], size=record.get("size"))


@dataclass(frozen=True, slots=True)
class Position:
    """A record's place in Kafka."""

    topic: str
    partition: int
    offset: int

    def to_record(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Position:
        return cls(topic=record["topic"], partition=record["partition"], offset=record["offset"])

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


class RefusalCode(StrEnum):
    """Stable codes of the scheduler's boundary refusals (the ``code`` of a Refusal record).

    Codes are part of the wire contract: they are appended to, never renamed.
    """

    INVALID_RUN_ID = "INVALID_RUN_ID"
    INVALID_STAGE_ID = "INVALID_STAGE_ID"
    INVALID_ROLE = "INVALID_ROLE"
    UNKNOWN_KIND = "UNKNOWN_KIND"
    UNKNOWN_ROLE = "UNKNOWN_ROLE"
    KIND_NOT_ALLOWED_FOR_ROLE = "KIND_NOT_ALLOWED_FOR_ROLE"
    UNKNOWN_TERMINAL_STATE = "UNKNOWN_TERMINAL_STATE"
    EMPTY_REASON_CODE = "EMPTY_REASON_CODE"
    INVALID_REASON_CODE = "INVALID_REASON_CODE"
    ARTIFACT_TOO_LARGE = "ARTIFACT_TOO_LARGE"
    MALFORMED_DIGEST = "MALFORMED_DIGEST"
    ARTIFACT_HASH_MISMATCH = "ARTIFACT_HASH_MISMATCH"
    TOO_MANY_OBSERVATIONS = "TOO_MANY_OBSERVATIONS"
    INVALID_OBSERVATION = "INVALID_OBSERVATION"
    EVIDENCE_SET_HASH_MISMATCH = "EVIDENCE_SET_HASH_MISMATCH"
    RUN_CLOSED = "RUN_CLOSED"
    DUPLICATE_STAGE = "DUPLICATE_STAGE"
    REDUNDANT_STAGE = "REDUNDANT_STAGE"
    INVALID_SESSION_ID = "INVALID_SESSION_ID"
    UNKNOWN_ACTION_KIND = "UNKNOWN_ACTION_KIND"
    INVALID_ACTION = "INVALID_ACTION"
    ANCHOR_MISMATCH = "ANCHOR_MISMATCH"
    ACTION_OUT_OF_ORDER = "ACTION_OUT_OF_ORDER"
    ANCHOR_DOES_NOT_FOLLOW = "ANCHOR_DOES_NOT_FOLLOW"
    SESSION_CLOSED = "SESSION_CLOSED"
    LINEAGE_MALFORMED = "LINEAGE_MALFORMED"
    LINEAGE_MISMATCH = "LINEAGE_MISMATCH"
    LINEAGE_HMAC_INVALID = "LINEAGE_HMAC_INVALID"
    LINEAGE_KEY_NOT_PINNED = "LINEAGE_KEY_NOT_PINNED"
    LINEAGE_SIGNATURE_INVALID = "LINEAGE_SIGNATURE_INVALID"
    BROWSER_SESSION_MISMATCH = "BROWSER_SESSION_MISMATCH"
    # Modality document rules (schemas/documents/, docs/modality_rules.md).
    RESEARCH_ARTIFACT_MALFORMED = "RESEARCH_ARTIFACT_MALFORMED"
    RESEARCH_OUTCOME_MISMATCH = "RESEARCH_OUTCOME_MISMATCH"
    RESEARCH_NO_CLAIMS = "RESEARCH_NO_CLAIMS"
    RESEARCH_INVALID_CLAIM_ID = "RESEARCH_INVALID_CLAIM_ID"
    RESEARCH_DUPLICATE_CLAIM_ID = "RESEARCH_DUPLICATE_CLAIM_ID"
    RESEARCH_EMPTY_STATEMENT = "RESEARCH_EMPTY_STATEMENT"
    RESEARCH_UNCITED_CLAIM = "RESEARCH_UNCITED_CLAIM"
    RESEARCH_CITATION_CLAIM_MISMATCH = "RESEARCH_CITATION_CLAIM_MISMATCH"
    RESEARCH_EMPTY_QUOTE = "RESEARCH_EMPTY_QUOTE"
    RESEARCH_MALFORMED_PAGE_HASH = "RESEARCH_MALFORMED_PAGE_HASH"
    RESEARCH_SOURCE_NOT_FETCHED = "RESEARCH_SOURCE_NOT_FETCHED"
    RESEARCH_CITATION_SOURCE_MISMATCH = "RESEARCH_CITATION_SOURCE_MISMATCH"
    RESEARCH_CITATION_NOT_OBSERVED = "RESEARCH_CITATION_NOT_OBSERVED"
    RESEARCH_PAGE_NOT_OBSERVED = "RESEARCH_PAGE_NOT_OBSERVED"
    DATAOPS_RECEIPT_MALFORMED = "DATAOPS_RECEIPT_MALFORMED"
    DATAOPS_REFUSAL_MALFORMED = "DATAOPS_REFUSAL_MALFORMED"
    DATAOPS_CONTEXT_MISMATCH = "DATAOPS_CONTEXT_MISMATCH"
    DATAOPS_OUTCOME_MISMATCH = "DATAOPS_OUTCOME_MISMATCH"
    DATAOPS_PLAN_INPUTS_MISMATCH = "DATAOPS_PLAN_INPUTS_MISMATCH"
    DATAOPS_PLAN_HASH_MISMATCH = "DATAOPS_PLAN_HASH_MISMATCH"
    DATAOPS_EFFECT_BEFORE_PLAN = "DATAOPS_EFFECT_BEFORE_PLAN"
    DATAOPS_OBSERVATIONS_MISMATCH = "DATAOPS_OBSERVATIONS_MISMATCH"
    INVALID_SUBMISSION_ID = "INVALID_SUBMISSION_ID"
    INVALID_PRODUCER = "INVALID_PRODUCER"
    INVALID_OCCURRED_AT = "INVALID_OCCURRED_AT"
    RUN_KEY_MISMATCH = "RUN_KEY_MISMATCH"
    DUPLICATE_SUBMISSION = "DUPLICATE_SUBMISSION"
    LINEAGE_TOO_LARGE = "LINEAGE_TOO_LARGE"
    JSON_TOO_DEEP = "JSON_TOO_DEEP"
    INVALID_EVIDENCE_SIZE = "INVALID_EVIDENCE_SIZE"
    EVIDENCE_CAP_EXCEEDED = "EVIDENCE_CAP_EXCEEDED"
    EVIDENCE_SIZES_UNDECLARED = "EVIDENCE_SIZES_UNDECLARED"
    # Producer identity (docs/security.md): every submission is signed by a producer key
    # registered in the manifest, in this order of checks.
    SUBMISSION_UNSIGNED = "SUBMISSION_UNSIGNED"
    """An ActivitySubmission.v1/v2 or RunClose.v1: no producer signature."""
    PRODUCER_KEY_UNKNOWN = "PRODUCER_KEY_UNKNOWN"
    """The signing key id is not registered to any producer in the manifest."""
    PRODUCER_MISMATCH = "PRODUCER_MISMATCH"
    """producer.id differs from the producer the signing key is registered to."""
    PRODUCER_KEY_NOT_VALID = "PRODUCER_KEY_NOT_VALID"
    """The input's timestamp is outside the key's validity range (revoked, retired or not yet valid)."""
    SUBMISSION_SIGNATURE_INVALID = "SUBMISSION_SIGNATURE_INVALID"
    """The Ed25519 signature does not verify over the submission statement."""
    PRODUCER_ROLE_NOT_ALLOWED = "PRODUCER_ROLE_NOT_ALLOWED"
    """The producer may not take this role (or act as this agent kind)."""
    WRONG_PARTITION = "WRONG_PARTITION"
    """The record is not on the submissions partition Kafka's murmur2 partitioner gives its key (``bernstein.schemas.partitioning``): checked right after the record key, for submissions, run closes and actions."""
    RUN_EMPTY = "RUN_EMPTY"
    """A close of a run that has no journal entry (unknown, or only refused stages): nothing to seal, and no state
    or seal is made for it (a flood of closes of fresh run ids would otherwise keep a seal, an audit record, a
    checkpoint and a state entry each, for good)."""
    RUN_NOT_OWNED = "RUN_NOT_OWNED"
    """The run id starts with another producer's run prefix (the roles manifest's ``run_prefixes``) and this
    producer is not one of that owner's ``collaborators``: checked right after the producer is authenticated,
    before anything reads or changes the run."""
    OPEN_RUNS_EXCEEDED = "OPEN_RUNS_EXCEEDED"
    """The record would open a new run, but its producer already has as many open runs as its limit
    (``max_open_runs`` in the roles manifest, default ``DEFAULT_MAX_OPEN_RUNS``): what the scheduler keeps for any
    one producer is bounded. The last check of a stage or action; a close of one of its runs frees a place."""


class DeadLetterCode(StrEnum):
    """Stable codes for input records the scheduler dead-letters (appended to, never renamed)."""

    NOT_AVRO_SINGLE_OBJECT = "NOT_AVRO_SINGLE_OBJECT"
    UNKNOWN_SCHEMA_FINGERPRINT = "UNKNOWN_SCHEMA_FINGERPRINT"
    TRUNCATED_OR_MALFORMED_BODY = "TRUNCATED_OR_MALFORMED_BODY"
    EMPTY_VALUE = "EMPTY_VALUE"
    SCHEDULER_ERROR = "SCHEDULER_ERROR"
    OUTPUT_TOO_LARGE = "OUTPUT_TOO_LARGE"
    """An output of the record (key + value + headers) would exceed ``max_output_bytes``."""
    PRODUCE_REJECTED = "PRODUCE_REJECTED"
    """Kafka refused to take one of the record's outputs (a per-record produce error); the shell
    dead-letters the input instead (``SchedulerCore.reject``)."""
    INPUT_UNREADABLE = "INPUT_UNREADABLE"
    """Kafka delivered an error instead of the record at this input offset (it could not be fetched or
    decompressed, e.g. a compressed record far larger than any submission); the shell dead-letters the offset
    with the client's error, never its bytes, and goes on."""
    INPUT_QUARANTINED = "INPUT_QUARANTINED"
    """An operator named this input offset with ``scheduler run --quarantine submissions:OFFSET``: it is
    dead-lettered without being stepped."""


class AuditEvent(StrEnum):
    """What an audit record mirrors."""

    ACTIVITY_RESULT = "activity.result"
    ACTIVITY_REFUSED = "activity.refused"
    INPUT_DEADLETTER = "input.deadletter"
    RUN_SEALED = "run.sealed"
    COMPUTER_USE_ACTION = "computer_use.action"


ENTRY_ACTIVITY_RESULT: Final = "activity.result"
ENTRY_COMPUTER_USE_ACTION: Final = "computer_use.action"

ACTION_KINDS: Final = frozenset(
    {
        "navigate",
        "click",
        "double_click",
        "right_click",
        "hover",
        "drag",
        "type",
        "select",
        "press",
        "check",
        "scroll",
        "wait",
        "submit",
    }
)
"""What a computer-use action may be; anything else is refused (UNKNOWN_ACTION_KIND). The pointer kinds
(double_click, right_click, hover, drag) came with the model computer-use formats; their targets may be
pointer targets (``bernstein.schemas.documents.pointer``)."""

BROWSER_SESSION_FORMAT: Final = "bernstein.browser.session/v1"
"""The artifact of a browser activity result: names its session's head anchor and action count."""
