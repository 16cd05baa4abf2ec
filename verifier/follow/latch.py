"""Tamper findings that stay until an operator acknowledges them (alerts that stay until someone acts).

A tamper-class alert (``TAMPER``: the integrity kinds, ``alerts.INTEGRITY``) *latches*: per partition and
kind the follower holds one ``Latch`` (when it latched, how many findings, the first and the last finding's
alert line) and serves it as the gauge ``bernstein_audit_tamper_latched{prefix,partition,kind}`` = 1, so the
alert rules fire on the latch and keep firing until someone acts. It stays across restarts: the follower
keeps its latches in its state directory, one file per partition
(``<topic>.<partition>.latches.json``, written atomically like the checkpoints; a state directory from
before latches simply has none, and the checkpoint files are unchanged).

An operator acknowledges a latch by naming it as the alert and the follower's output name it, partition and
kind: ``bernstein audit ack --partition N --kind KIND --reason TEXT [--by NAME]``. That appends one ``Ack``
(when, who, why, which latch, its findings and their evidence) to the ack log ``<state>/acks.jsonl`` and
prints it; the follower reads the log at start and at every tick and clears each latch an ack covers (the
gauge goes to 0). A new finding of the same kind latches again, with a new id.

Two writers never share a file: only the follower writes latch files (only the partition's owner, in a
group), only ``audit ack`` appends to the ack log. An ack covers the findings its latch held when it was
written (``findings``); findings the follower added in the meantime stay latched, as a new latch.

A finding counts once. Records are checked again after a kill -9 (those after the last checkpoint on disk)
and from the start after a rewritten history; the alerts they raise again are the same lines, which the
partition remembers (``seen``: fingerprints of the latest ``MAX_SEEN`` findings, kept in the latch file and
across acks), so they neither add to a latch nor latch again what an ack cleared.

Pure but for ``LatchStore`` and ``AckLog`` (the files); no clock: times are given.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.files import write_atomically
from bernstein.verifier.follow.alerts import INTEGRITY, Alert, AlertKind

FORMAT: Final = "bernstein.audit-follow-latches/v1"
ACK_FORMAT: Final = "bernstein.audit-ack/v1"
ACK_LOG: Final = "acks.jsonl"

TAMPER: Final[frozenset[AlertKind]] = INTEGRITY
"""The kinds that latch: every kind that says the chain (or the journal it mirrors) is not what the scheduler
wrote. The operational kinds (dead letters, refusal bursts, unsealed runs, a silent scheduler) do not."""

MAX_SEEN: Final = 4096
"""Findings a partition remembers to count each once (more than a crash's re-checked records hold but in a flood)."""


class LatchError(BernsteinError):
    """A latch file or the ack log cannot be read or written (the message names it)."""

    code = "E_FOLLOW_LATCH"


class NotLatched(BernsteinError):
    """``audit ack`` names a finding that is not latched (or whose latch is acknowledged already)."""

    code = "E_NOT_LATCHED"


def iso_ms(ms: int) -> str:
    """``ms`` (Unix milliseconds) as UTC ISO 8601 with milliseconds: 2026-12-06T10:00:00.000Z."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_latch_id() -> str:
    """A latch's id: random, so distinct for every latch ever held (an old ack never covers a new latch)."""
    return secrets.token_hex(8)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, not {value!r}")
    return value


def _kind(value: Any) -> AlertKind:
    try:
        kind = AlertKind(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an alert kind") from None
    if kind not in TAMPER:
        raise ValueError(f"{kind.value} does not latch")
    return kind


def fingerprint(line: dict[str, Any]) -> str:
    """What identifies a finding: its alert line (kind, partition, offset, detail, evidence), hashed."""
    return hashlib.sha256(json.dumps(line, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()[:32]


def _alert_line(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an alert line (an object)")
    return value


@dataclass
class Latch:
    """One partition's latched finding of one kind."""

    kind: AlertKind
    id: str
    since_ms: int
    """When it latched (the follower's wall clock)."""
    findings: int
    """Findings of this kind since it latched (an alert raised again for the same record is not counted twice)."""
    first: dict[str, Any]
    """The alert line of the first finding (``Alert.to_json``): the evidence."""
    last: dict[str, Any]
    """The alert line of the latest finding."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "id": self.id,
            "since": iso_ms(self.since_ms),
            "since_ms": self.since_ms,
            "findings": self.findings,
            "first": self.first,
            "last": self.last,
        }

    @classmethod
    def from_json(cls, data: Any) -> Latch:
        if not isinstance(data, dict):
            raise ValueError("a latch must be an object")
        return cls(
            kind=_kind(data["kind"]),
            id=str(data["id"]),
            since_ms=_int(data["since_ms"], "since_ms"),
            findings=_int(data["findings"], "findings"),
            first=_alert_line(data["first"], "first"),
            last=_alert_line(data["last"], "last"),
        )


@dataclass(frozen=True)
class Ack:
    """One acknowledgement, as ``audit ack`` appends it to the ack log."""

    at_ms: int
    by: str
    reason: str
    topic: str
    partition: int
    kind: AlertKind
    latch: str
    """The id of the latch acknowledged."""
    findings: int
    """The findings it held then: the ones acknowledged."""
    since_ms: int
    first: dict[str, Any]
    last: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": ACK_FORMAT,
            "at": iso_ms(self.at_ms),
            "at_ms": self.at_ms,
            "by": self.by,
            "reason": self.reason,
            "topic": self.topic,
            "partition": self.partition,
            "kind": self.kind.value,
            "latch": self.latch,
            "findings": self.findings,
            "since": iso_ms(self.since_ms),
            "since_ms": self.since_ms,
            "evidence": {"first": self.first, "last": self.last},
        }

    def line(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Any) -> Ack:
        if not isinstance(data, dict) or data.get("format") != ACK_FORMAT:
            raise ValueError(f"not a {ACK_FORMAT} line")
        evidence = data["evidence"]
        if not isinstance(evidence, dict):
            raise ValueError("evidence must be an object")
        return cls(
            at_ms=_int(data["at_ms"], "at_ms"),
            by=str(data["by"]),
            reason=str(data["reason"]),
            topic=str(data["topic"]),
            partition=_int(data["partition"], "partition"),
            kind=_kind(data["kind"]),
            latch=str(data["latch"]),
            findings=_int(data["findings"], "findings"),
            since_ms=_int(data["since_ms"], "since_ms"),
            first=_alert_line(evidence["first"], "evidence.first"),
            last=_alert_line(evidence["last"], "evidence.last"),
        )


@dataclass
class PartitionLatches:
    """The latches of one partition of the audit topic (one file: ``LatchStore``)."""

    topic: str
    partition: int
    held: dict[AlertKind, Latch] = field(default_factory=dict)
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """``fingerprint``s of the latest ``MAX_SEEN`` findings counted, latched or acknowledged since (see the module doc)."""

    def latch(self, alert: Alert, now_ms: int) -> Latch | None:
        """Hold ``alert`` if its kind latches; the new latch, or None (not a tamper kind, counted in one held, or
        a finding counted before: records checked again raise the same alert)."""
        if alert.kind not in TAMPER or alert.partition != self.partition:
            return None
        line = alert.to_json()
        mark = fingerprint(line)
        if mark in self.seen:
            return None
        self.seen[mark] = None
        if len(self.seen) > MAX_SEEN:
            self.seen.popitem(last=False)
        held = self.held.get(alert.kind)
        if held is not None:
            held.findings += 1
            held.last = line
            return None
        latch = Latch(alert.kind, new_latch_id(), now_ms, 1, line, line)
        self.held[alert.kind] = latch
        return latch

    def acknowledge(self, ack: Ack, now_ms: int) -> Latch | None:
        """Apply ``ack``; the latch it cleared, or None when it covers no latch held here (an old ack).

        Findings that came after the ack was written (more than it names) stay latched as a new latch (a new
        id): the operator acknowledged what they saw, not what they had not seen yet.
        """
        held = self.held.get(ack.kind)
        if held is None or held.id != ack.latch or ack.topic != self.topic or ack.partition != self.partition:
            return None
        del self.held[ack.kind]
        if held.findings > ack.findings:
            line = held.last
            self.held[ack.kind] = Latch(
                ack.kind,
                new_latch_id(),
                now_ms,
                held.findings - ack.findings,
                line,
                line,
            )
        return held

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "topic": self.topic,
            "partition": self.partition,
            "latches": [self.held[kind].to_json() for kind in sorted(self.held)],
            "seen": list(self.seen),
        }

    @classmethod
    def from_json(cls, data: Any) -> PartitionLatches:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} document")
        latches = cls(str(data["topic"]), _int(data["partition"], "partition"))
        for item in data["latches"]:
            latch = Latch.from_json(item)
            latches.held[latch.kind] = latch
        if "seen" in data:
            latches.seen = OrderedDict.fromkeys(str(mark) for mark in data["seen"])
        else:  # a file from before: the findings it names are the ones known
            lines = [line for latch in latches.held.values() for line in (latch.first, latch.last)]
            latches.seen = OrderedDict.fromkeys(fingerprint(line) for line in lines)
        return latches


def acknowledge(latches: PartitionLatches, kind: AlertKind, *, by: str, reason: str, now_ms: int, log: list[Ack]) -> Ack:
    """The ack of ``latches``' latch of ``kind`` (``log``: the acks written so far); ``NotLatched`` if there is none.

    A latch that an ack in ``log`` covers already is not latched any more (the follower clears it at its next
    tick): acknowledging it again is refused too.
    """
    where = f"{latches.topic}[{latches.partition}]"
    if not by.strip():
        raise NotLatched("--by is empty: name who acknowledges")
    if not reason.strip():
        raise NotLatched("--reason is empty: say why the finding is acknowledged (it is kept in the ack log)")
    held = latches.held.get(kind)
    if held is None:
        raise NotLatched(f"no {kind.value} finding is latched on {where}")
    for ack in log:
        if ack.latch == held.id and ack.findings >= held.findings:
            raise NotLatched(
                f"the {kind.value} latch on {where} is acknowledged already (by {ack.by} at {iso_ms(ack.at_ms)}); "
                "the follower clears it at its next tick or start"
            )
    return Ack(
        now_ms,
        by.strip(),
        reason.strip(),
        latches.topic,
        latches.partition,
        kind,
        held.id,
        held.findings,
        held.since_ms,
        held.first,
        held.last,
    )


def pending(latches: PartitionLatches, log: list[Ack]) -> list[Latch]:
    """The latches no ack of ``log`` covers yet, in kind order."""
    covered = {ack.latch: ack.findings for ack in log}
    return [latch for _, latch in sorted(latches.held.items()) if covered.get(latch.id, 0) < latch.findings]


class LatchStore:
    """The latch files of one follower state directory (see the module doc)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, topic: str, partition: int) -> Path:
        return self.directory / f"{topic}.{partition}.latches.json"

    def load(self, topic: str, partition: int) -> PartitionLatches:
        """The partition's latches (none when it has no file: nothing latched, or a state from before latches)."""
        path = self.path(topic, partition)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return PartitionLatches(topic, partition)
        except (OSError, UnicodeDecodeError) as exc:
            raise LatchError(f"cannot read the latch file {path}: {exc}") from None
        try:
            latches = PartitionLatches.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise LatchError(f"{path} is not a latch file ({exc})") from None
        if latches.topic != topic or latches.partition != partition:
            raise LatchError(f"{path} holds the latches of {latches.topic}[{latches.partition}], not {topic}[{partition}]")
        return latches

    def save(self, latches: PartitionLatches) -> None:
        path = self.path(latches.topic, latches.partition)
        try:
            write_atomically(path, json.dumps(latches.to_json(), separators=(",", ":")).encode("utf-8"))
        except OSError as exc:
            raise LatchError(f"cannot write the latch file {path}: {exc}") from None

    def partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` that have a latch file here."""
        pattern = re.compile(re.escape(topic) + r"\.(\d+)\.latches\.json")
        try:
            names = [p.name for p in self.directory.iterdir()]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise LatchError(f"cannot list the follower state directory {self.directory}: {exc}") from None
        return sorted(int(m[1]) for name in names if (m := pattern.fullmatch(name)))


class AckLog:
    """The ack log of one follower state directory: one ``Ack`` per line, appended, never rewritten."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / ACK_LOG

    def stamp(self) -> tuple[int, int] | None:
        """What changes when a line is appended (None: no log yet)."""
        try:
            status = self.path.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LatchError(f"cannot read the ack log {self.path}: {exc}") from None
        return (status.st_mtime_ns, status.st_size)

    def read(self) -> list[Ack]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise LatchError(f"cannot read the ack log {self.path}: {exc}") from None
        acks = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                acks.append(Ack.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError) as exc:
                raise LatchError(f"{self.path} line {number} is not an ack ({exc})") from None
        return acks

    def append(self, ack: Ack) -> None:
        """One line, appended (O_APPEND) and flushed to disk before this returns."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (ack.line() + "\n").encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise LatchError(f"cannot append to the ack log {self.path}: {exc}") from None
