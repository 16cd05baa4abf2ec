"""Deterministic replay of recorded browser sessions: re-hash, recompute, verify, compare with the signed head.

The verification side of the browser modality; the formats it reads (action
record, action log, session document, lineage entry) are
``bernstein.schemas.documents.browser``'s. The producer records, this module checks:
the offline verifier's browser check (``bernstein.verifier.checks.browser``), its
incomplete-session replay (``bernstein.verifier.verify``) and ``bernstein browser
replay`` all walk a session here.

``replay_run(run_id, source=..., cas=..., trusted=...)`` walks the run's
``ComputerUseEntry`` records from the journal (a ``RecordSource``: live
Kafka, a dump, a kcat file) and the CAS. It never re-runs the agent. For
every action, in journal order, it checks (the first failure names the step):

1. order: the action index is the next one (a gap is a deleted action, a
   repeat a duplicated or reordered one);
2. link: ``prev_anchor`` names the previous action's anchor (the session's
   genesis for action 0);
3. bytes: the pre-action screenshot and the snapshot are reattached from the
   CAS by hash (missing and changed are different reasons); the observation
   hash and the anchor are recomputed from the stored bytes and the recorded
   action;
4. lineage: the signed entry binds this action (anchor as content hash,
   prior anchor as parent, hashes, action), its key is pinned, its Ed25519
   signature verifies, and its HMAC envelope verifies when the audit key is
   pinned;
5. journal: the journal record's stored entry hash recomputes over its payload.

Then the walk is compared with the signed head: the session's browser
activity result (its artifact, reattached from the CAS by its journalled
hash) names the head anchor, the action count and every anchor. A journal
that lost its tail, gained actions, or never got a result fails here; this
is what a deleted trailing action cannot get past.

``replay_action_log`` runs the same walk over a session's action log (from
the artifact and the CAS alone); the verifier's browser check uses it.
Divergences name the first differing action index, the expected (signed)
and recomputed anchors and a stable reason.

A remote store that does not answer is an outage, never a divergence:
every replay reads through ``bernstein.verifier.blobs.FailFast``, so the first read that
gets no answer raises ``StoreUnavailable`` (``browser replay`` prints it as one
line, exit 3) and nothing more is asked. Only once a divergence was found from
bytes that were read does a later outage just mark the steps it stops (the
replay already fails on what it read).

The replay is split along its seams: ``check_lineage`` (step 4 on its own) is
``bernstein.verifier.browser_lineage``, what a replay reads and reports is
``bernstein.verifier.browser_verdicts``, and the walk of steps 1-5 and the head
comparison are ``bernstein.verifier.browser_walk``. This module finds a run's sessions
in the journal and re-exports the others' names, so callers import from here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final

from bernstein.schemas import codec
from bernstein.schemas.canonical import is_digest, journal_entry_hash
from bernstein.schemas.documents.browser import (
    Action,
    ActionLog,
    ActionRecord,
    LineageEnvelope,
    MalformedSessionDocument,
    SessionDocument,
    parse_session_document,
)
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.records import ENTRY_COMPUTER_USE_ACTION
from bernstein.substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, CasError
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.blobs import StoreUnavailable
from bernstein.verifier.browser_lineage import LineageCode, LineageProblem, LineageVerdict, check_lineage
from bernstein.verifier.browser_verdicts import (
    DivergenceReason,
    HeadProblem,
    ReplayDivergence,
    ReplayResult,
    SignedHead,
    StepInput,
    StepVerdict,
)
from bernstein.verifier.browser_walk import _guarded, replay_steps

if TYPE_CHECKING:
    from bernstein.verifier.sources import RecordSource

__all__ = [
    "DivergenceReason",
    "HeadProblem",
    "LineageCode",
    "LineageProblem",
    "LineageVerdict",
    "ReplayDivergence",
    "ReplayNotFound",
    "ReplayResult",
    "SignedHead",
    "StepInput",
    "StepVerdict",
    "check_lineage",
    "render_lines",
    "replay_action_log",
    "replay_run",
    "replay_sessions",
    "replay_steps",
    "step_input_from_entry",
]


_JOURNAL: Final = frozenset({codec.JOURNAL_RECORD, codec.SEAL_RECORD})
_ENTRIES: Final = codec.JOURNAL_ENTRIES | codec.COMPUTER_USE_ENTRIES


class ReplayNotFound(BernsteinError):
    """The run holds no computer-use session to replay (exit 1, not a tamper verdict)."""

    code: ClassVar[str] = "NO_BROWSER_SESSION"


# ---------------------------------------------------------------------------
# from an action log (verifier check) and from the journal (replay_run)
# ---------------------------------------------------------------------------


def replay_action_log(document: SessionDocument, log: ActionLog, *, cas: BlobStore, trusted: TrustedKeys) -> ReplayResult:
    """Replay a session from its session document and action log (the artifact and the CAS alone)."""
    inputs = [
        StepInput(logged.record, logged.recorded_entry_hash, document.worker_id, f"action log #{position}")
        for position, logged in enumerate(log.actions)
    ]
    head: SignedHead | None = SignedHead(
        document.head_anchor, document.action_count, document.anchors, "session document", document.final_observation
    )
    problem = None
    if (log.run_id, log.session_id) != (document.run_id, document.session_id):
        problem = HeadProblem(
            DivergenceReason.HEAD_MISMATCH,
            f"the action log belongs to run {log.run_id!r} session {log.session_id!r}, not to this session",
        )
        head = None
    return replay_steps(
        inputs, run_id=document.run_id, session_id=document.session_id, cas=cas, trusted=trusted, head=head, head_problem=problem
    )


@dataclass
class _SessionRecords:
    inputs: list[StepInput] = field(default_factory=list)
    result_artifact: str | None = None
    result_where: str = ""


def step_input_from_entry(entry: dict[str, Any], *, where: str, journal_problem: str = "") -> StepInput:
    """A ``StepInput`` from a decoded ComputerUseEntry (journal) record."""
    lineage = LineageEnvelope(
        entry=entry["lineage_entry"],
        hmac=entry["lineage_hmac"],
        key_id=entry["lineage_key_id"],
        signature=entry["lineage_signature"],
    )
    record = ActionRecord(
        index=entry["action_index"],
        prev_anchor=entry["prev_anchor"],
        anchor=entry["anchor"],
        screenshot_hash=entry["screenshot_hash"],
        dom_digest=entry["dom_digest"],
        observation_hash=entry["observation_hash"],
        action=Action.from_record(entry["action"]),
        lineage=lineage,
    )
    return StepInput(record, entry["lineage_entry_hash"], entry["producer_id"], where, journal_problem)


def _collect(run_id: str, source: RecordSource) -> tuple[dict[str, _SessionRecords], list[str]]:
    c = codec.default_codec()
    key = run_id.encode()
    sessions: dict[str, _SessionRecords] = {}
    notes: list[str] = []
    for partition in source.partitions("journal"):
        for stored in source.records("journal", partition, headers=False):
            if stored.key != key:
                continue
            where = f"journal {stored.topic}[{stored.partition}]@{stored.offset}"
            try:
                envelope = c.decode(stored.value or b"", expect=_JOURNAL)
                if envelope.schema.name != codec.JOURNAL_RECORD:
                    continue
                payload: bytes = envelope.record["payload"]
                decoded = c.decode(payload, expect=_ENTRIES)
            except codec.DecodeError as exc:
                notes.append(f"{where} does not decode ({exc}); any action it held shows as missing")
                continue
            entry = decoded.record
            if entry["run_id"] != run_id:
                notes.append(f"{where} is keyed {run_id!r} but belongs to run {entry['run_id']!r}; ignored")
                continue
            if decoded.schema.name in codec.COMPUTER_USE_ENTRIES and entry["entry_type"] == ENTRY_COMPUTER_USE_ACTION:
                recomputed = journal_entry_hash(payload)
                problem = ""
                if recomputed != envelope.record["entry_hash"]:
                    problem = (
                        f"the journal record ({where}) was edited: its entry hash does not recompute "
                        f"(stored '{envelope.record['entry_hash']}', recomputed '{recomputed}')"
                    )
                item = step_input_from_entry(entry, where=where, journal_problem=problem)
                sessions.setdefault(entry["session_id"], _SessionRecords()).inputs.append(item)
            elif decoded.schema.name in codec.JOURNAL_ENTRIES and entry["kind"] == "browser":
                records = sessions.setdefault(entry["stage_id"], _SessionRecords())
                if records.result_artifact is None:
                    records.result_artifact = entry["artifact_hash"]
                    records.result_where = where
    return sessions, notes


def _signed_head(
    run_id: str, session_id: str, records: _SessionRecords, cas: BlobStore
) -> tuple[SignedHead | None, HeadProblem | None]:
    if records.result_artifact is None:
        return None, None
    artifact_hash = records.result_artifact
    where = records.result_where
    if not is_digest(artifact_hash):
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE, f"the session result ({where}) names a malformed artifact hash"
        )
    try:
        data = cas.get(artifact_hash)
    except BlobNotFound:
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE, f"the session result's artifact {artifact_hash} is missing from the store"
        )
    except BlobIntegrityError as exc:
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE,
            f"the session result's artifact changed in the store (pinned '{exc.expected}', recomputed '{exc.actual}')",
        )
    except CasError as exc:
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE, f"the session result's artifact is unreadable: {exc.message}"
        )
    try:
        document = parse_session_document(data)
    except MalformedSessionDocument as exc:
        return None, HeadProblem(
            DivergenceReason.SESSION_RESULT_UNREADABLE, f"the session result's artifact is malformed: {exc.message}"
        )
    if (document.run_id, document.session_id) != (run_id, session_id):
        return None, HeadProblem(
            DivergenceReason.HEAD_MISMATCH,
            f"the session result's document names run {document.run_id!r} session {document.session_id!r}",
        )
    return SignedHead(document.head_anchor, document.action_count, document.anchors, where, document.final_observation), None


def replay_sessions(run_id: str, *, source: RecordSource, cas: BlobStore, trusted: TrustedKeys) -> tuple[ReplayResult, ...]:
    """Replay every browser session of ``run_id`` (first-seen order); raises ``ReplayNotFound`` when there is none."""
    sessions, notes = _collect(run_id, source)
    if not sessions:
        raise ReplayNotFound(f"run {run_id!r} has no browser session in {source.describe()}")
    cas = _guarded(cas)  # one guard for every session: after an outage nothing more is asked
    results: list[ReplayResult] = []
    for session_id, records in sessions.items():
        try:
            results.append(_replay_one(run_id, session_id, records, cas, trusted, notes))
        except StoreUnavailable as exc:
            if all(result.ok for result in results):
                raise  # nothing judged wrong yet: the outage is the answer
            results.append(_not_replayed(run_id, session_id, exc))  # an earlier session's divergence still stands
    return tuple(results)


def _not_replayed(run_id: str, session_id: str, exc: StoreUnavailable) -> ReplayResult:
    """A session the store stopped answering for, after another session diverged on bytes that were read."""
    divergence = ReplayDivergence(0, "", "", DivergenceReason.STORE_UNAVAILABLE, f"not replayed: {exc.message}")
    return ReplayResult(False, 0, "", divergence, (), run_id=run_id, session_id=session_id, head_line="")


def replay_run(
    run_id: str,
    *,
    source: RecordSource,
    cas: BlobStore,
    trusted: TrustedKeys,
    session_id: str | None = None,
) -> ReplayResult:
    """Replay one browser session of ``run_id`` from the journal (``source``) and the CAS.

    ``source`` is a ``bernstein.verifier.sources.RecordSource``. With ``session_id``
    None the run must hold exactly one session. Raises ``ReplayNotFound``
    when the run (or the session) has no browser record at all.
    """
    sessions, notes = _collect(run_id, source)
    if session_id is None:
        if len(sessions) != 1:
            if not sessions:
                raise ReplayNotFound(f"run {run_id!r} has no browser session in {source.describe()}")
            raise ReplayNotFound(f"run {run_id!r} has {len(sessions)} browser sessions ({', '.join(sessions)}); name one")
        session_id = next(iter(sessions))
    records = sessions.get(session_id)
    if records is None:
        raise ReplayNotFound(f"run {run_id!r} has no browser session {session_id!r} in {source.describe()}")
    return _replay_one(run_id, session_id, records, _guarded(cas), trusted, notes)


def _replay_one(
    run_id: str, session_id: str, records: _SessionRecords, cas: BlobStore, trusted: TrustedKeys, notes: Sequence[str]
) -> ReplayResult:
    head, problem = _signed_head(run_id, session_id, records, cas)
    return replay_steps(
        records.inputs,
        run_id=run_id,
        session_id=session_id,
        cas=cas,
        trusted=trusted,
        head=head,
        head_problem=problem,
        notes=notes,
    )


def render_lines(result: ReplayResult) -> Iterator[str]:
    """The per-step lines and the head line of a replay, for a terminal."""
    for step in result.steps:
        yield step.line()
    if result.head_line:
        yield result.head_line
    for note in result.notes:
        yield f"note: {note}"
