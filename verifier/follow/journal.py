"""``audit follow --check-journal``: every journal record the audit chain mirrors exists in the journal.

The scheduler writes an audit record and the journal record it mirrors (an entry's
``entry_hash``, or the SHA-256 of a seal record's value) in one Kafka transaction. So
once the follower has read an audit record with read_committed, the journal record is
committed below the journal partition's last stable offset read right after; when the
journal consumer's position has passed that offset and the record was not seen, it is
missing (alert ``journal_missing``). Pure: the Kafka edge feeds the expectations (with
the journal end it read), the journal records' hashes and the journal position.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from bernstein.verifier.follow.alerts import Alert, AlertKind

MAX_SEEN: Final = 100_000
"""Journal hashes kept while no audit record mirrors them yet (the oldest are dropped beyond this)."""


@dataclass
class Expected:
    audit_offset: int
    seq: int
    run_id: str
    journal_seq: int
    journal_end: int
    """The journal partition's last stable offset read after the audit record: the journal record is below it."""


@dataclass
class JournalJoin:
    """One partition's pending mirrors (see the module doc); saved in the checkpoint."""

    audit_topic: str
    partition: int
    next_offset: int = 0
    """The journal offset to read next (resume point)."""
    expected: dict[str, Expected] = field(default_factory=dict)
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def expect(self, record_hash: str, expected: Expected) -> None:
        if record_hash in self.seen:
            del self.seen[record_hash]
        else:
            self.expected[record_hash] = expected

    def journal(self, record_hash: str) -> None:
        if self.expected.pop(record_hash, None) is None:
            self.seen[record_hash] = None
            if len(self.seen) > MAX_SEEN:
                self.seen.popitem(last=False)

    def reached(self, position: int) -> list[Alert]:
        """The journal was read up to (not including) ``position``: every expectation below it is missing."""
        self.next_offset = max(self.next_offset, position)
        missing = [(h, e) for h, e in self.expected.items() if e.journal_end <= position]
        alerts = []
        for record_hash, e in sorted(missing, key=lambda item: item[1].audit_offset):
            del self.expected[record_hash]
            alerts.append(
                Alert(
                    AlertKind.JOURNAL_MISSING,
                    self.audit_topic,
                    self.partition,
                    e.audit_offset,
                    f"audit seq {e.seq} mirrors journal record {record_hash} (run {e.run_id!r}, journal seq {e.journal_seq}), "
                    f"which the journal partition does not hold below offset {e.journal_end}",
                    {"seq": e.seq, "record_hash": record_hash, "run_id": e.run_id, "journal_seq": e.journal_seq},
                )
            )
        return alerts

    def to_json(self) -> dict[str, Any]:
        return {
            "next_offset": self.next_offset,
            "expected": {h: [e.audit_offset, e.seq, e.run_id, e.journal_seq, e.journal_end] for h, e in self.expected.items()},
            "seen": list(self.seen),
        }

    @classmethod
    def from_json(cls, audit_topic: str, partition: int, data: dict[str, Any]) -> JournalJoin:
        join = cls(audit_topic, partition, int(data["next_offset"]))
        for record_hash, (offset, seq, run_id, journal_seq, end) in dict(data["expected"]).items():
            join.expected[str(record_hash)] = Expected(int(offset), int(seq), str(run_id), int(journal_seq), int(end))
        join.seen = OrderedDict((str(h), None) for h in data["seen"])
        return join
