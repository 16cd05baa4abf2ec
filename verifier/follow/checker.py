"""The pure part of ``audit follow``: one partition's audit chain, checked one record at a time.

No I/O, no clock: the Kafka edge (``bernstein.verifier.follow.consumer``) hands each record's
facts (``bernstein.verifier.facts.audit_facts``: the same decode and MAC recomputation
``activity verify`` uses) with its offset and Kafka timestamp to
``PartitionChecker.check``, and the wall clock to ``tick``. The checker keeps what
the next record is checked against (``ChainState``: next seq, chain head, ...) and
returns the alerts.

Rules, per record: ``bernstein.verifier.audit_chain.judge``, the one judgement the verifier uses
too (``schemas/vectors/audit_walks.json`` holds both, the rebuild and the native code to
the same cases), each finding phrased as an alert:

* it decodes as an AuditRecord (else ``undecodable``);
* it names a pinned audit key (else ``unknown_key``, or ``key_misuse`` for a pinned
  key of another purpose) whose MAC recomputes (else ``mac_mismatch``), inside that
  key's pinned lifetime (else ``key_not_valid``);
* it names its own partition (else ``wrong_partition``);
* its seq is the next one (``gap`` when it jumps ahead, ``out_of_order`` when it comes
  again or goes back) and its ``prev_mac`` is the previous record's MAC, the
  partition's genesis for seq 0 (else ``chain_break``).

Only an authentic record moves the chain on: a record whose MAC cannot be verified,
one copied from another partition and one whose seq was already seen are reported
and then ignored, each standing in for at most one seq, so a single forged record
(inserted, or edited in place) raises one alert, not one for every record after it
and not a gap after it. A record that verifies but skips seqs (records deleted) or
does not link is reported and the chain continues from it.

Operational alerts come from the events of authentic records: every dead letter
(``deadletter``), ``refusal_burst`` (N refusals within a window of record
timestamps, once per burst), and, from ``tick``, ``run_unsealed`` (a run's first
unsealed entry is older than the threshold, once per run until it is sealed) and
``scheduler_silent`` (submissions wait past the last input the audit chain accounts
for, and no audit record came for the threshold; once until the chain moves).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bernstein.schemas.fact_shapes import AUDIT_RECORD_AT as _AT
from bernstein.schemas.fact_shapes import AuditRecordFact
from bernstein.schemas.records import AuditEvent
from bernstein.substrate.keys import TrustedKeys, Validity
from bernstein.verifier import audit_chain as chain
from bernstein.verifier.audit_chain import ChainPosition, Finding, advance, judge
from bernstein.verifier.facts import A_RECORD, RAISE
from bernstein.verifier.follow.alerts import Alert, AlertKind

Mirror = Callable[[int, int, str, str, int], None]
_RESULT_EVENTS = frozenset({AuditEvent.ACTIVITY_RESULT.value, AuditEvent.COMPUTER_USE_ACTION.value})
_REFUSED = AuditEvent.ACTIVITY_REFUSED.value
_DEADLETTER = AuditEvent.INPUT_DEADLETTER.value
_SEALED = AuditEvent.RUN_SEALED.value


@dataclass(frozen=True)
class Policy:
    """Thresholds of the operational alerts; None switches one off."""

    refusal_burst: int | None = 20
    """This many refusals within ``refusal_window_ms`` raise ``refusal_burst``."""
    refusal_window_ms: int = 60_000
    unsealed_after_ms: int | None = 3_600_000
    """A run whose first unsealed entry is older than this raises ``run_unsealed``."""
    silent_after_ms: int | None = 60_000
    """Submissions waiting and no audit record for this long raise ``scheduler_silent``."""


@dataclass
class ChainState:
    """What the next record of one partition is checked against; saved in the checkpoint."""

    next_seq: int = 0
    head: str | None = None
    """MAC of the last authentic record; None before the first one (the chain starts at its genesis)."""
    stand_ins: int = 0
    """Records reported since the last authentic one, each standing in for at most one seq (``bernstein.verifier.audit_chain``)."""
    last_input: int = -1
    """Input (submissions) offset the last authentic record accounts for."""
    open_runs: dict[str, int] = field(default_factory=dict)
    """run id -> Kafka timestamp of its first entry not covered by a seal yet."""
    unsealed_alerted: set[str] = field(default_factory=set)
    refusals: deque[int] = field(default_factory=deque)
    """Timestamps of the refusals inside the current window."""
    in_burst: bool = False
    progress_ms: int | None = None
    """Wall clock of the last authentic record the follower saw (None: none yet)."""
    silent_alerted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "next_seq": self.next_seq,
            "head": self.head,
            "stand_ins": self.stand_ins,
            "last_input": self.last_input,
            "open_runs": dict(sorted(self.open_runs.items())),
            "unsealed_alerted": sorted(self.unsealed_alerted),
            "refusals": list(self.refusals),
            "in_burst": self.in_burst,
            "progress_ms": self.progress_ms,
            "silent_alerted": self.silent_alerted,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChainState:
        head = data["head"]
        progress = data["progress_ms"]
        state = cls(
            next_seq=_int(data["next_seq"]),
            head=None if head is None else str(head),
            stand_ins=_int(data.get("stand_ins", 0)),
            last_input=_int(data["last_input"]),
            open_runs={str(k): _int(v) for k, v in dict(data["open_runs"]).items()},
            unsealed_alerted={str(r) for r in data["unsealed_alerted"]},
            refusals=deque(_int(t) for t in data["refusals"]),
            in_burst=bool(data["in_burst"]),
            progress_ms=None if progress is None else _int(progress),
            silent_alerted=bool(data["silent_alerted"]),
        )
        return state


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return value


class PartitionChecker:
    """One partition of the audit topic, checked record by record (see the module doc)."""

    def __init__(self, topic: str, partition: int, trusted: TrustedKeys, policy: Policy, state: ChainState | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self._trusted = trusted
        self._validity: dict[str, Validity] = {}
        """key id -> pinned lifetime of the audit keys seen so far (the fast path's cache)."""
        self.policy = policy
        self.state = state if state is not None else ChainState()
        self.checked = 0
        """Records checked by this checker (authentic or not)."""
        self.mirror: Mirror | None = None
        """Called with (offset, seq, run id, record hash, journal seq) for every authentic record that mirrors a
        journal record (an entry or a seal): ``--check-journal``'s expectations."""

    @property
    def trusted(self) -> TrustedKeys:
        return self._trusted

    @trusted.setter
    def trusted(self, keys: TrustedKeys) -> None:
        if keys is not self._trusted:
            self._trusted = keys
            self._validity = {}

    def _alert(self, kind: AlertKind, offset: int | None, detail: str, **extra: Any) -> Alert:
        return Alert(kind, self.topic, self.partition, offset, detail, extra)

    def check(self, offset: int, fact: tuple[Any, ...], timestamp_ms: int, now_ms: int) -> list[Alert]:
        """Check one record (its ``audit_fact``); return its alerts. ``now_ms`` is the wall clock (progress only)."""
        self.checked += 1
        if fact[0] == A_RECORD:  # the fast path: an authentic record that links, in force, with nothing to report
            state = self.state
            key_id, mac, recomputed, partition, seq, prev_mac = fact[_AT.key_id : _AT.prev_mac + 1]
            if (
                recomputed == mac
                and seq == state.next_seq
                and prev_mac == state.head
                and partition == self.partition == fact[_AT.input_partition]
            ):
                validity = self._validity.get(key_id)
                if validity is None:
                    entry = self._trusted.entry(key_id)
                    if entry is not None and entry.is_hmac:
                        validity = self._validity[key_id] = entry.validity
                if validity is not None and validity.contains(timestamp_ms):
                    state.next_seq = seq + 1
                    state.head = mac
                    state.stand_ins = 0
                    event, run_id, record_hash, journal_seq, _, input_offset = fact[_AT.event :]
                    state.last_input = input_offset
                    state.progress_ms = now_ms
                    state.silent_alerted = False
                    mirror = self.mirror
                    if event in _RESULT_EVENTS:
                        state.open_runs.setdefault(run_id, timestamp_ms)
                        if mirror is not None:
                            mirror(offset, seq, run_id, record_hash, journal_seq)
                        return []
                    if mirror is not None and event == _SEALED:
                        mirror(offset, seq, run_id, record_hash, journal_seq)
                    return self._event(offset, seq, event, run_id, input_offset, timestamp_ms)
        return self._check(offset, fact, timestamp_ms, now_ms)

    def _check(self, offset: int, fact: tuple[Any, ...], timestamp_ms: int, now_ms: int) -> list[Alert]:
        """Every rule (``bernstein.verifier.audit_chain.judge``, the verifier's own), each finding as its alert."""
        state = self.state
        position = ChainPosition(state.next_seq, state.head, state.stand_ins)
        seq_of = fact[_AT.seq] if fact[0] == A_RECORD else None
        judgement = judge(
            position, fact, partition=self.partition, timestamp_ms=timestamp_ms, trusted=self.trusted, where=f"audit seq {seq_of}"
        )
        alerts = [self._finding(offset, fact, finding, position) for finding in judgement.findings]
        mac, seq = (fact[_AT.mac], fact[_AT.seq]) if fact[0] == A_RECORD else ("", 0)
        advance(position, judgement, seq, mac)
        state.next_seq, state.head, state.stand_ins = position.next_seq, position.head, position.stand_ins
        if not judgement.moves:
            return alerts
        record = AuditRecordFact._make(fact)
        event, run_id, record_hash, journal_seq, input_offset = (
            record.event,
            record.run_id,
            record.record_hash,
            record.journal_seq,
            record.input_offset,
        )
        state.last_input = input_offset
        state.progress_ms = now_ms
        state.silent_alerted = False
        if self.mirror is not None and (event in _RESULT_EVENTS or event == _SEALED):
            self.mirror(offset, seq, run_id, record_hash, journal_seq)
        alerts.extend(self._event(offset, seq, event, run_id, input_offset, timestamp_ms))
        return alerts

    def _finding(self, offset: int, fact: tuple[Any, ...], finding: Finding, position: ChainPosition) -> Alert:
        """The alert of one finding of the judge, phrased for an operator."""
        code = finding.code
        if code == chain.UNDECODABLE:
            reason = str(fact[1]) if fact[0] != RAISE else f"{type(fact[1]).__name__}: {fact[1]}"
            return self._alert(AlertKind.UNDECODABLE, offset, f"audit record does not decode: {reason}")
        key_id, seq = fact[_AT.key_id], fact[_AT.seq]
        where = f"seq {seq}"
        if code == chain.KEY_PURPOSE_MISMATCH:
            return self._alert(
                AlertKind.KEY_MISUSE,
                offset,
                f"{where} names key {key_id}, pinned as a {finding.found} key, not an audit key",
                seq=seq,
                key_id=key_id,
            )
        if code == chain.KEY_NOT_PINNED:
            return self._alert(
                AlertKind.UNKNOWN_KEY,
                offset,
                f"{where} names audit key {key_id}, which the trusted keys do not pin: its MAC cannot be checked",
                seq=seq,
                key_id=key_id,
            )
        if code == chain.MAC_MISMATCH:
            return self._alert(
                AlertKind.MAC_MISMATCH,
                offset,
                f"{where}: the MAC does not recompute with key {key_id} (forged, edited or MACed with another key)",
                seq=seq,
                key_id=key_id,
                stored=finding.expected,
                recomputed=finding.found,
            )
        if code == chain.WRONG_PARTITION:
            return self._alert(
                AlertKind.WRONG_PARTITION,
                offset,
                f"{where} names partition {fact[_AT.partition]} (input partition {fact[_AT.input_partition]}), stored in {self.partition}: "
                "a record copied from another chain",
                seq=seq,
            )
        if code == chain.OUT_OF_ORDER:
            return self._alert(
                AlertKind.OUT_OF_ORDER,
                offset,
                f"{where} comes after seq {position.next_seq - 1}: a replayed or duplicated record",
                seq=seq,
                expected_seq=position.next_seq,
            )
        if code == chain.GAP:
            first = position.next_seq + position.stand_ins
            missing = f"seqs {first}..{seq - 1}" if seq - 1 > first else f"seq {first}"
            return self._alert(
                AlertKind.GAP,
                offset,
                f"{where} follows seq {position.next_seq - 1}: {missing} missing (records deleted)"
                if position.next_seq
                else f"the chain starts at {where}: {missing} missing (records deleted)",
                seq=seq,
                expected_seq=position.next_seq,
            )
        if code == chain.LINK_BROKEN:
            return self._alert(
                AlertKind.CHAIN_BREAK,
                offset,
                f"{where} does not link to its predecessor (prev_mac {finding.found}, expected {finding.expected})",
                seq=seq,
                prev_mac=finding.found,
                expected=finding.expected,
            )
        assert finding.key is not None, f"a judge code the follower does not phrase: {code}"
        return self._alert(AlertKind.KEY_NOT_VALID, offset, finding.key.message, seq=seq, key_id=key_id)

    def _event(self, offset: int, seq: int, event: str, run_id: str, input_offset: int, timestamp_ms: int) -> list[Alert]:
        state = self.state
        if event in _RESULT_EVENTS:
            state.open_runs.setdefault(run_id, timestamp_ms)
        elif event == _SEALED:
            state.open_runs.pop(run_id, None)
            state.unsealed_alerted.discard(run_id)
        elif event == _DEADLETTER:
            return [
                self._alert(
                    AlertKind.DEADLETTER,
                    offset,
                    f"seq {seq}: the scheduler dead-lettered input offset {input_offset} (see the dead-letter topic)",
                    seq=seq,
                    input_offset=input_offset,
                )
            ]
        elif event == _REFUSED and self.policy.refusal_burst is not None:
            window = state.refusals
            window.append(timestamp_ms)
            while window and window[0] <= timestamp_ms - self.policy.refusal_window_ms:
                window.popleft()
            if len(window) >= self.policy.refusal_burst:
                if not state.in_burst:
                    state.in_burst = True
                    return [
                        self._alert(
                            AlertKind.REFUSAL_BURST,
                            offset,
                            f"{len(window)} refusals within {self.policy.refusal_window_ms} ms (threshold "
                            f"{self.policy.refusal_burst}), the last at seq {seq}",
                            seq=seq,
                            refusals=len(window),
                            window_ms=self.policy.refusal_window_ms,
                        )
                    ]
            else:
                state.in_burst = False
        return []

    def tick(self, now_ms: int, submissions_end: int | None = None, *, waited_since_ms: int | None = None) -> list[Alert]:
        """Time-based alerts at wall clock ``now_ms``; ``submissions_end``: the input partition's end offset, if known;
        ``waited_since_ms``: for a chain never seen moving, since when submissions are known to wait (the silence clock
        starts there, not now: a scheduler that never started is caught on the first look)."""
        alerts: list[Alert] = []
        state = self.state
        after = self.policy.unsealed_after_ms
        if after is not None:
            for run_id, since in sorted(state.open_runs.items()):
                if run_id not in state.unsealed_alerted and now_ms - since >= after:
                    state.unsealed_alerted.add(run_id)
                    alerts.append(
                        self._alert(
                            AlertKind.RUN_UNSEALED,
                            None,
                            f"run {run_id!r} has entries unsealed since {since} (more than {after} ms): close it, "
                            "or check the producer that stopped",
                            run_id=run_id,
                            since_ms=since,
                        )
                    )
        silent = self.policy.silent_after_ms
        if silent is not None and submissions_end is not None and not state.silent_alerted:
            waiting = submissions_end - (state.last_input + 1)
            if state.progress_ms is None:  # the clock starts when the follower first looks, or when input began to wait
                state.progress_ms = now_ms if waited_since_ms is None else min(now_ms, waited_since_ms)
            if waiting > 0 and now_ms - state.progress_ms >= silent:
                state.silent_alerted = True
                alerts.append(
                    self._alert(
                        AlertKind.SCHEDULER_SILENT,
                        None,
                        f"{waiting} submissions after input offset {state.last_input} wait, and no audit record came for "
                        f"{now_ms - state.progress_ms} ms: is the scheduler of partition {self.partition} running?",
                        waiting=waiting,
                        last_input=state.last_input,
                    )
                )
        return alerts
