"""What ``bernstein audit follow`` reports: one alert kind per condition, with stable names.

``AlertKind`` is the one list of alert names; ``docs/operations.md`` documents every
kind (what it means, what to do) and a unit test keeps the two equal. An ``Alert``
is printed as one JSON object per line (``to_json``), or as one line of text for a
human (``to_text``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class AlertKind(StrEnum):
    """Every alert ``audit follow`` raises. The values are stable: dashboards and runbooks key on them."""

    UNDECODABLE = "undecodable"
    """A record of the audit topic is not an AuditRecord (does not decode)."""
    UNKNOWN_KEY = "unknown_key"
    """A record names an audit key id the trusted-keys file does not pin: its MAC cannot be checked."""
    KEY_MISUSE = "key_misuse"
    """A record names a pinned key that is not an audit key (a seal or producer key id)."""
    MAC_MISMATCH = "mac_mismatch"
    """A record's MAC does not recompute with the pinned key it names (forged, edited, or a wrong key)."""
    KEY_NOT_VALID = "key_not_valid"
    """A record's MAC verifies, but its timestamp is outside the key's pinned lifetime."""
    CHAIN_BREAK = "chain_break"
    """A record's ``prev_mac`` is not the MAC of the partition's previous record."""
    GAP = "gap"
    """The sequence jumps forward: records of the chain are missing."""
    OUT_OF_ORDER = "out_of_order"
    """A sequence number comes again or goes back: a replayed or duplicated record."""
    WRONG_PARTITION = "wrong_partition"
    """A record names another partition than the one it is stored in (copied from another chain)."""
    HISTORY_REWRITTEN = "history_rewritten"
    """On resume, the record the checkpoint names has changed or vanished: the topic was rewritten."""
    JOURNAL_MISSING = "journal_missing"
    """(``--check-journal``) A journal record the audit chain mirrors is not in the journal."""
    LOG_HEAD_MISMATCH = "log_head_mismatch"
    """(``--witness``) A signed tree head is not the journal partition's Merkle log at its size (or the journal no
    longer gives a tree the witness cosigned)."""
    LOG_NOTE_INVALID = "log_note_invalid"
    """(``--witness``) A checkpoint's note is not its partition log's, signed by a pinned seal key: not cosigned."""
    DEADLETTER = "deadletter"
    """The scheduler dead-lettered an input (the audit chain mirrors every dead letter)."""
    REFUSAL_BURST = "refusal_burst"
    """At least N refusals within a window of the records' timestamps."""
    RUN_UNSEALED = "run_unsealed"
    """A run's journal entries have stayed unsealed for longer than the threshold."""
    SCHEDULER_SILENT = "scheduler_silent"
    """Submissions wait that no audit record accounts for, and no audit record came for the threshold."""


INTEGRITY: frozenset[AlertKind] = frozenset(
    {
        AlertKind.UNDECODABLE,
        AlertKind.UNKNOWN_KEY,
        AlertKind.KEY_MISUSE,
        AlertKind.MAC_MISMATCH,
        AlertKind.KEY_NOT_VALID,
        AlertKind.CHAIN_BREAK,
        AlertKind.GAP,
        AlertKind.OUT_OF_ORDER,
        AlertKind.WRONG_PARTITION,
        AlertKind.HISTORY_REWRITTEN,
        AlertKind.JOURNAL_MISSING,
        AlertKind.LOG_HEAD_MISMATCH,
        AlertKind.LOG_NOTE_INVALID,
    }
)
"""Kinds that say the chain itself is not what the scheduler wrote (the rest are operational)."""


@dataclass(frozen=True)
class Alert:
    """One alert, located at a record of the audit topic (``offset`` None: not at one record)."""

    kind: AlertKind
    topic: str
    partition: int
    offset: int | None
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)
    """Machine-readable evidence (``seq``, ``expected_seq``, ``key_id``, ``run_id``, ...), per kind."""

    def to_json(self) -> dict[str, Any]:
        return {
            "alert": self.kind.value,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "detail": self.detail,
            **self.extra,
        }

    def line(self) -> str:
        return json.dumps(self.to_json(), sort_keys=False, separators=(",", ":"))

    def to_text(self) -> str:
        where = f"{self.topic}[{self.partition}]" + (f"@{self.offset}" if self.offset is not None else "")
        return f"ALERT {self.kind.value:<17} {where}: {self.detail}"
