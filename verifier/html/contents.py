"""What the HTML report shows beside the verdict: the run's journal as stored, and its evidence from the store.

Nothing here judges. The verdict is the verifier's (``bernstein.verifier.verify``), computed once before
this module is asked anything; these are the records' own contents, decoded as they are stored (a record
that does not decode is counted, not guessed at), and the bytes of the evidence they pin, read back from
the content store and re-hashed so that only the bytes the journal names are ever shown.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bernstein.schemas import codec
from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, CasError, CasUnavailable
from bernstein.verifier.sources import RecordSource, StoredRecord

MAX_CACHED_BYTES: Final = 64 << 20
"""Blob bytes kept for reuse (a page cited by many claims is read once); larger sets are read again."""


@dataclass(frozen=True)
class Observation:
    kind: str
    ref: str
    content_hash: str
    size: int | None


@dataclass(frozen=True)
class StageEntry:
    """One ``activity.result`` journal entry, as the journal holds it."""

    offset: int
    seq: int
    stage_id: str
    role: str
    kind: str
    producer: str
    terminal_state: str
    reason_code: str
    artifact_hash: str
    observations: tuple[Observation, ...]
    input_offset: int


@dataclass(frozen=True)
class ActionEntry:
    """One journalled computer-use action (``ComputerUseEntry``): what the browser agent did, and what it saw before."""

    offset: int
    seq: int
    session_id: str
    index: int
    producer: str
    kind: str
    target: str
    value_digest: str
    """The typed value's keyed digest (``hmac-sha256:...``), "" when nothing was typed: the journal holds no value."""
    prev_anchor: str
    anchor: str
    screenshot_hash: str
    dom_digest: str
    input_offset: int


@dataclass(frozen=True)
class RefusalEntry:
    """One refusal record of the run (the scheduler's decision, with its code and message)."""

    partition: int
    offset: int
    code: str
    message: str
    stage_id: str
    role: str
    kind: str
    producer: str
    input_offset: int


@dataclass(frozen=True)
class SealEntry:
    offset: int
    final: bool
    entry_count: int
    closed_by: str
    input_offset: int


@dataclass
class RunContents:
    """The run's records in journal order (entries, actions, seals) and its refusals in partition and offset order."""

    stages: list[StageEntry] = field(default_factory=list)
    actions: dict[str, list[ActionEntry]] = field(default_factory=dict)
    """Journalled actions per session id, in journal order."""
    seals: list[SealEntry] = field(default_factory=list)
    refusals: list[RefusalEntry] = field(default_factory=list)
    undecodable: int = 0
    """Records of the run that do not decode (the verdict names them); not shown."""

    def action_at(self, offset: int) -> ActionEntry | None:
        for actions in self.actions.values():
            for action in actions:
                if action.offset == offset:
                    return action
        return None


def read_contents(source: RecordSource, run_id: str, partition: int | None) -> RunContents:
    """The run's journal records on ``partition`` and its refusal records on every refusals partition."""
    contents = RunContents()
    key = run_id.encode()
    if partition is not None:
        for record in _records(source, "journal", partition):
            if record.key == key:
                _add_journal_record(contents, record)
    for refusals_partition in source.partitions("refusals"):
        for record in _records(source, "refusals", refusals_partition):
            if record.key == key:
                refusal = _refusal(record)
                if refusal is None:
                    contents.undecodable += 1
                else:
                    contents.refusals.append(refusal)
    return contents


def _records(source: RecordSource, stream: str, partition: int) -> Iterator[StoredRecord]:
    return source.records(stream, partition, headers=False)


def _add_journal_record(contents: RunContents, record: StoredRecord) -> None:
    try:
        name, fields = codec.split_envelope(record.value or b"")
        if name == codec.JOURNAL_RECORD:
            decoded = codec.decode(fields[0])
            if decoded.schema.name in codec.JOURNAL_ENTRIES:
                stage = _stage(record.offset, decoded.record)
                if stage is not None:
                    contents.stages.append(stage)
                return
            if decoded.schema.name in codec.COMPUTER_USE_ENTRIES:
                action = _action(record.offset, decoded.record)
                contents.actions.setdefault(action.session_id, []).append(action)
                return
        elif name == codec.SEAL_RECORD:
            seal = codec.decode(fields[0]).record
            closed = seal.get("closed_by")
            contents.seals.append(
                SealEntry(
                    record.offset,
                    bool(seal["final"]),
                    int(seal["entry_count"]),
                    str(closed.get("producer_id", "")) if isinstance(closed, Mapping) else "",
                    int(seal["last_input_offset"]),
                )
            )
            return
    except (codec.DecodeError, KeyError, TypeError, ValueError, IndexError):
        pass
    contents.undecodable += 1


def _stage(offset: int, entry: Mapping[str, Any]) -> StageEntry | None:
    if entry.get("entry_type") != "activity.result":
        return None
    return StageEntry(
        offset=offset,
        seq=int(entry["seq"]),
        stage_id=str(entry["stage_id"]),
        role=str(entry["role"]),
        kind=str(entry["kind"]),
        producer=str(entry.get("producer_id", "")),
        terminal_state=str(entry["terminal_state"]),
        reason_code=str(entry["reason_code"]),
        artifact_hash=str(entry["artifact_hash"]),
        observations=tuple(
            Observation(str(o["kind"]), str(o["ref"]), str(o["content_hash"]), o.get("size")) for o in entry["observations"]
        ),
        input_offset=int(entry["input"]["offset"]),
    )


def _action(offset: int, entry: Mapping[str, Any]) -> ActionEntry:
    action = entry["action"]
    return ActionEntry(
        offset=offset,
        seq=int(entry["seq"]),
        session_id=str(entry["session_id"]),
        index=int(entry["action_index"]),
        producer=str(entry.get("producer_id", "")),
        kind=str(action["kind"]),
        target=str(action["target"]),
        value_digest=str(action["value_digest"]),
        prev_anchor=str(entry["prev_anchor"]),
        anchor=str(entry["anchor"]),
        screenshot_hash=str(entry["screenshot_hash"]),
        dom_digest=str(entry["dom_digest"]),
        input_offset=int(entry["input"]["offset"]),
    )


def _refusal(record: StoredRecord) -> RefusalEntry | None:
    try:
        decoded = codec.decode(record.value or b"")
        if decoded.schema.name not in codec.REFUSALS:
            return None
        r = decoded.record
        return RefusalEntry(
            partition=record.partition,
            offset=record.offset,
            code=str(r["code"]),
            message=str(r["message"]),
            stage_id=str(r["stage_id"]),
            role=str(r["role"]),
            kind=str(r["kind"]),
            producer=str(r.get("producer", "")),
            input_offset=int(r["input"]["offset"]),
        )
    except (codec.DecodeError, KeyError, TypeError, ValueError):
        return None


class Evidence:
    """Blob bytes by digest from the run's content store, re-hashed here: a blob is shown only when its bytes hash
    to the digest the journal pins; otherwise the view says why (no store, missing, changed, unreadable)."""

    def __init__(self, cas: BlobStore | None, why_none: str = "no content store") -> None:
        self.cas = cas
        self.why_none = why_none
        self._cache: dict[str, tuple[bytes | None, str]] = {}
        self._cached_bytes = 0
        self.outage = ""
        """The store's first outage: nothing more is asked of it (as the verifier's own reads fail fast)."""

    def get(self, digest: str) -> tuple[bytes | None, str]:
        """(the verified bytes, "") or (None, why they are not shown)."""
        found = self._cache.get(digest)
        if found is not None:
            return found
        found = self._read(digest)
        size = len(found[0]) if found[0] is not None else 0
        if self._cached_bytes + size <= MAX_CACHED_BYTES:
            self._cache[digest] = found
            self._cached_bytes += size
        return found

    def _read(self, digest: str) -> tuple[bytes | None, str]:
        if self.cas is None:
            return None, f"not shown: {self.why_none}"
        if self.outage:
            return None, f"not read: the content store stopped answering ({self.outage})"
        try:
            data = self.cas.get(digest)
        except CasUnavailable as exc:
            self.outage = exc.message
            return None, f"not read: the content store did not answer ({exc.message})"
        except BlobNotFound:
            return None, "missing from the content store"
        except BlobIntegrityError as exc:
            return None, f"changed in the content store (its bytes hash to {exc.actual}): not shown"
        except CasError as exc:
            return None, f"unreadable: {exc.message}"
        except OSError as exc:
            return None, f"unreadable: {exc}"
        actual = sha256_digest(data)
        if actual != digest:
            return None, f"changed in the content store (its bytes hash to {actual}): not shown"
        return data, ""
