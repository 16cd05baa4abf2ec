"""Step 4: each ``activity.result`` entry rebuilt into its stage verdict.

The evidence-set hash recomputed, every blob reattached and re-hashed where a store is given, the run's
evidence counted against its cap and the modality check run; incomplete browser sessions replayed. Apart
from the record walks (``bernstein.verifier.walks``), which need none of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from bernstein.schemas import codec
from bernstein.schemas.canonical import evidence_set_hash, is_digest
from bernstein.schemas.errors import MalformedDigest
from bernstein.schemas.records import MAX_RUN_EVIDENCE_BYTES
from bernstein.substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, CasError, check_blob_size
from bernstein.substrate.keys import TrustedKeys
from bernstein.substrate.text import plural
from bernstein.verifier import facts as _facts
from bernstein.verifier.blobs import HashedAhead, StoreUnavailable
from bernstein.verifier.checks import CheckContext, DetailLine, ModalityCheck, check_for
from bernstein.verifier.facts import RAISE, S_RESULT, S_SKIP, Facts, Row
from bernstein.verifier.keyuse import KeyUse, key_problem
from bernstein.verifier.report import Problem, StageVerdict

_ENTRY = codec.JOURNAL_ENTRIES

_UNKNOWN: Any = object()


class _StageBuilder:
    """One run's stage verdicts, from its journal records fed in offset order."""

    def __init__(
        self, c: codec.Codec, facts: Facts, run_id: str, cas: BlobStore | None, trusted: TrustedKeys, why_unchecked: str
    ) -> None:
        self.c = c
        self.facts = facts
        self.run_id = run_id
        self.cas = cas
        self.trusted = trusted
        self.why_unchecked = why_unchecked
        self.previous: str | None = None
        self.tally = _EvidenceTally(run_id)
        self.checks: dict[str, ModalityCheck | None] = {}
        self.sessions: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        """Journalled computer-use actions per session, handed to the session's browser stage."""

    def feed(self, mine: list[Row]) -> Iterator[StageVerdict]:
        c, run_id, checks, sessions = self.c, self.run_id, self.checks, self.sessions
        stage_facts = self.facts.stage_facts([row[3] for row in mine])
        if isinstance(self.cas, HashedAhead):  # the batch's evidence and artifacts, re-hashed on every core
            results = [fact for fact in stage_facts if fact[0] == S_RESULT]
            self.cas.ahead((o[2] for fact in results for o in fact[10]), (fact[8] for fact in results))
        for row, fact in zip(mine, stage_facts, strict=True):
            kind = fact[0]
            if kind == S_SKIP:
                continue  # not a journal entry record: reported by the chain walk
            if kind == RAISE:
                raise fact[1]
            stored = fact[1]
            if stored == self.previous:
                continue  # an exact duplicate; the chain verdict names it once
            self.previous = stored
            if kind != S_RESULT:
                # not decodable (reported by the chain walk), or not an activity.result:
                # computer-use actions are replayed by the browser check of their session
                action = _computer_use_entry(c, row[3])
                if action is not None:
                    sessions.setdefault(action["session_id"], []).append((row[0], action))
                continue
            offset = row[0]
            _, _, recomputed, entry_run, seq = fact[:5]
            # The chain verdict names the break once; the stage built from an entry
            # whose bytes are not the journalled ones must not be reported OK.
            untrusted = ""
            if entry_run != run_id:
                untrusted = f"journal entry seq {seq} at offset {offset} belongs to run {entry_run!r} (see chain)"
            elif recomputed != stored:
                untrusted = (
                    f"journal entry seq {seq} at offset {offset} does not recompute to its stored entry hash "
                    "(see chain): its fields are not the journalled ones"
                )
            entry_kind = fact[6]
            check = checks.get(entry_kind, _UNKNOWN)
            if check is _UNKNOWN:
                check = checks[entry_kind] = check_for(entry_kind)
            entry = c.decode(fact[12], expect=_ENTRY).record if check is not None else None
            related = tuple(sessions.pop(fact[5], ())) if entry_kind == "browser" else ()
            try:
                verdict = _stage_verdict(
                    fact, entry, check, offset, self.cas, self.trusted, untrusted, related, self.why_unchecked, self.tally, row[1]
                )
            except StoreUnavailable as exc:
                verdict = _store_unavailable(fact[5], fact[6], fact[4], offset, exc)
            verdict = verdict.made_by(fact[14], fact[15])
            other = getattr(self.cas, "other_versions", None)
            if other:  # an S3 store that read some blob's true bytes from an older version
                verdict = _naming_other_versions(verdict, [o[2] for o in fact[10]] + [fact[8]], other)
            yield verdict

    def finish(self) -> Iterator[StageVerdict]:
        # Sessions whose actions were journalled but that never produced an accepted
        # browser result (a killed worker, a refused result): replayed like any others.
        for session_id, actions in self.sessions.items():
            try:
                verdict = _incomplete_session(
                    self.run_id, session_id, actions, self.cas, self.trusted, self.why_unchecked, self.tally
                )
            except StoreUnavailable as exc:
                verdict = _store_unavailable(session_id, "browser", actions[0][1].get("seq", 0), actions[0][0], exc)
            first = actions[0][1] if actions else {}
            yield verdict.made_by(first.get("producer_id", ""), first.get("lineage_key_id", ""))
        self.sessions = {}


def _store_unavailable(stage_id: str, kind: str, seq: int, offset: int, exc: StoreUnavailable) -> StageVerdict:
    """A stage whose blobs could not be read because the store did not answer: not checked (exit 6), never failed.
    Its journal record was still walked (chain, seal, audit); only its evidence is unjudged."""
    return StageVerdict(
        stage_id,
        kind,
        seq,
        offset,
        False,
        unchecked=exc.reason(),
        data=exc.data(),  # code, failure, store, endpoint, error, hint (docs/verifier.md, "not checked")
    )


def _naming_other_versions(verdict: StageVerdict, digests: list[str], other: dict[str, list[Any]]) -> StageVerdict:
    """The verdict with a ``store`` line per other version at the address of one of its blobs (``CAS_VERSION_POISONED``):
    bytes someone put where this stage's evidence lives. The true bytes were read from another version, so the stage's
    own verdict stands; the line names the version, when it was written and what its bytes hash to."""
    lines = []
    for digest in dict.fromkeys(digests):
        for version in other.get(digest, ()):
            what = f"bytes hashing to {version.recomputed}" if version.recomputed else "no readable bytes (a delete marker)"
            by = f" by {version.owner}" if version.owner else ""
            lines.append(
                DetailLine(
                    f"store CAS_VERSION_POISONED {digest}: version {version.version_id} (written {version.written or '?'}"
                    f"{by}) holds {what}; the true bytes were read from another version",
                    False,
                    {
                        "code": "CAS_VERSION_POISONED",
                        "digest": digest,
                        "version_id": version.version_id,
                        "recomputed": version.recomputed,
                        "written": version.written,
                        "owner": version.owner,
                    },
                )
            )
    return replace(verdict, details=(*verdict.details, *lines)) if lines else verdict


def _incomplete_session(
    run_id: str,
    session_id: str,
    actions: list[tuple[int, dict[str, Any]]],
    cas: BlobStore | None,
    trusted: TrustedKeys,
    why_unchecked: str,
    tally: _EvidenceTally | None = None,
) -> StageVerdict:
    """Replay a session without an accepted result: bytes re-hashed, anchors recomputed, lineage checked."""
    from bernstein.verifier.browser_replay import DivergenceReason, replay_steps, step_input_from_entry

    first_offset, first = actions[0]
    count = plural(len(actions), "journalled action")

    def verdict(ok: bool, reason: str = "", **more: Any) -> StageVerdict:
        return StageVerdict(session_id, "browser", first["seq"], first_offset, ok, reason, incomplete=True, **more)

    if cas is None:
        return verdict(False, unchecked=f"{count} of an incomplete session not replayed ({why_unchecked})")
    try:
        inputs = [step_input_from_entry(entry, where=f"journal offset {offset}") for offset, entry in actions]
    except Exception as exc:  # noqa: BLE001 (a malformed action is a verdict, not a crash)
        return verdict(False, f"journalled action does not parse: {exc}")
    result = replay_steps(inputs, run_id=run_id, session_id=session_id, cas=cas, trusted=trusted, head=None)
    details = [DetailLine(step.line(), step.ok, step.to_json()) for step in result.steps]
    divergence = result.divergence
    data = {"session": result.to_json()}
    if divergence is not None and divergence.reason != DivergenceReason.NO_SESSION_RESULT:
        details.append(DetailLine(f"session FAIL -- {divergence.describe()}", False, divergence.to_json()))
        return verdict(False, f"browser replay {divergence.describe()}", details=tuple(details), data=data)
    found = _action_size_findings(cas, tuple(actions), tally)
    crossing = tally.crossing(first_offset, first["seq"]) if tally is not None else None
    findings = (*found, crossing) if crossing is not None else tuple(found)
    if findings:
        return verdict(False, findings[0].message, details=tuple(details), data=data, findings=findings)
    details.append(
        DetailLine(
            f"head NONE -- no accepted browser result names this session's head: {count} verified, its end is not vouched for",
            True,
        )
    )
    return verdict(
        True,
        "the session never produced an accepted browser result (worker stopped, or its result was refused)",
        notes=(f"{plural(result.action_count, 'step')} replayed", "evidence reattached", *result.notes),
        details=tuple(details),
        evidence_reattached=True,
        data=data,
    )


def _computer_use_entry(c: codec.Codec, value: bytes | None) -> dict[str, Any] | None:
    """The decoded ComputerUseEntry of a journal record value, or None for anything else."""
    try:
        name, fields = codec.split_envelope(value or b"")
        if name != codec.JOURNAL_RECORD:
            return None
        return c.decode(fields[0], expect=codec.COMPUTER_USE_ENTRIES).record
    except codec.DecodeError:
        return None


def verify_stage(
    entry: dict[str, Any], offset: int, *, cas: BlobStore | None, trusted: TrustedKeys, entry_problem: str = ""
) -> StageVerdict:
    """Reconstruct one activity.result entry: evidence set, blobs, modality check.

    ``entry_problem`` says why the entry itself cannot be trusted (its bytes fail
    the chain); it leads the stage's problems, so such a stage is never OK.
    """
    fact = _facts.result_fact(entry, "", b"")
    return _stage_verdict(fact, entry, check_for(entry["kind"]), offset, cas, trusted, entry_problem)


def _stage_verdict(
    fact: tuple[Any, ...],
    entry: dict[str, Any] | None,
    check: ModalityCheck | None,
    offset: int,
    cas: BlobStore | None,
    trusted: TrustedKeys,
    entry_problem: str,
    related: tuple[tuple[int, dict[str, Any]], ...] = (),
    why_unchecked: str = "no content store",
    tally: _EvidenceTally | None = None,
    timestamp: int | None = None,
) -> StageVerdict:
    """The stage verdict from an ``S_RESULT`` fact; ``entry`` is the decoded entry when ``check`` needs it.

    ``timestamp`` is the journal record's Kafka timestamp (the input's): a data/ops receipt's signing key
    must be in force then."""
    (
        _,
        _,
        _,
        run_id,
        seq,
        stage_id,
        kind,
        terminal_state,
        artifact_hash,
        anchored_set,
        observations,
        recomputed_set,
        payload,
        sizes,
        _producer,
        _key_id,
    ) = fact
    problems: list[str] = []
    notes: list[str] = []
    findings: list[Problem] = []
    if recomputed_set is None:  # a member is malformed: the reference names it
        try:
            recomputed_set = evidence_set_hash(o[2] for o in observations)
        except MalformedDigest as exc:
            problems.append(f"malformed observation hash: {exc}")
    if recomputed_set is not None and recomputed_set != anchored_set:
        problems.append(f"evidence_set_hash mismatch: anchored {anchored_set}, recomputed {recomputed_set}")
    reattached = False
    artifact: bytes | None = None
    artifact_problem = ""
    if cas is not None:
        blob_problems = []
        declared = list(sizes) if sizes is not None and len(sizes) == len(observations) else None
        undeclared_bytes = 0
        for index, (_, ref, content_hash) in enumerate(observations):
            what = f"evidence bytes for '{ref}'"
            problem, size = _reattach_sized(cas, content_hash, what)
            if declared is not None and tally is not None:
                tally.add(content_hash, declared[index])  # what the scheduler counted
            if problem:
                blob_problems.append(problem)
            elif declared is None:
                undeclared_bytes += size or 0
                if tally is not None and size is not None:
                    tally.add(content_hash, size)  # the scheduler counted nothing: the real size
            elif size != declared[index]:
                findings.append(_size_mismatch(what, content_hash, declared[index], size, offset, seq))
        if findings:
            blob_problems.append(findings[0].message)
        if declared is None and observations and not blob_problems:
            notes.append(
                f"sizes not declared (a v1 submission): {undeclared_bytes} bytes of evidence reattached, "
                "counted toward the run's evidence cap by the verifier (the scheduler could not)"
            )
        findings.extend(_action_size_findings(cas, related, tally))
        crossing = tally.crossing(offset, seq) if tally is not None else None
        if crossing is not None:
            findings.append(crossing)
        problems.extend(blob_problems)
        if findings and findings[0].message not in problems:
            problems.append(findings[0].message)
        reattached = not blob_problems and bool(observations)
        if is_digest(artifact_hash):
            try:
                artifact = cas.get(artifact_hash)
            except BlobNotFound:
                artifact_problem = f"artifact bytes missing from store ({artifact_hash})"
            except BlobIntegrityError as exc:
                artifact_problem = (
                    f"artifact hash mismatch reattaching the artifact (pinned '{exc.expected}', recomputed '{exc.actual}')"
                )
            except CasError as exc:
                artifact_problem = f"artifact unreadable: {exc}"
        else:
            artifact_problem = f"malformed artifact hash {artifact_hash!r}"
        if artifact_problem:
            problems.append(artifact_problem)
        if reattached:
            notes.append("evidence reattached")
    details: tuple[Any, ...] = ()
    data: dict[str, Any] = {}
    unchecked = "" if cas is not None else f"evidence not reattached ({why_unchecked})"
    if check is not None:
        assert entry is not None
        verdict = check(
            CheckContext(
                run_id=run_id,
                stage_id=stage_id,
                kind=kind,
                entry=entry,
                artifact=artifact,
                artifact_problem=artifact_problem,
                cas=cas,
                trusted=trusted,
                related_entries=related,
            )
        )
        notes.extend(verdict.notes)
        details = verdict.details
        data = dict(verdict.data)
        receipt_key = _receipt_key_problem(data, entry, trusted, offset, seq, timestamp)
        if receipt_key is not None:
            findings.insert(0, receipt_key)
            problems.insert(0, receipt_key.message)
        if verdict.unchecked:
            unchecked = f"{verdict.unchecked} ({why_unchecked})" if cas is None else verdict.unchecked
        elif not verdict.ok:
            # The modality names the failure in its own terms (which claim, which
            # action): lead with it, as the seed's output does.
            problems.insert(0, verdict.reason or f"{kind} check failed")
    if entry_problem:
        problems.insert(0, entry_problem)
    return StageVerdict(
        stage_id,
        kind,
        seq,
        offset,
        not problems and not unchecked,
        problems[0] if problems else "",
        tuple(notes),
        details,
        reattached,
        terminal_state,
        data,
        unchecked="" if problems else unchecked,
        findings=tuple(findings),
    )


def _receipt_key_problem(
    data: dict[str, Any], entry: dict[str, Any], trusted: TrustedKeys, offset: int, seq: int, timestamp: int | None
) -> Problem | None:
    """A data/ops receipt whose signatures verified must also be signed by a pinned producer key of the
    entry's producer, in force at the record's timestamp (``bernstein.verifier.keyuse``)."""
    key_id = data.get("signer_key_id")
    if not key_id or not data.get("signatures_ok") or not isinstance(key_id, str):
        return None
    pinned = trusted.entry(key_id)
    if pinned is None:
        return None  # the receipt check names an unpinned signer
    what = f"the data/ops receipt of journal seq {seq} at offset {offset}"
    finding = key_problem(pinned, KeyUse.PRODUCER, what, timestamp, producer=str(entry.get("producer_id", "")))
    return None if finding is None else finding.problem(stream="journal", offset=offset, seq=seq)


def _reattach(cas: BlobStore, digest: str, what: str) -> str:
    return _reattach_sized(cas, digest, what)[0]


def _reattach_sized(cas: BlobStore, digest: str, what: str) -> tuple[str, int | None]:
    """(problem or "", the blob's byte length when it reattached)."""
    if not is_digest(digest):
        return f"{what}: malformed hash {digest!r}", None
    hashed = cas.sized(digest) if isinstance(cas, HashedAhead) else None
    if hashed is not None:  # re-hashed ahead with its batch (verifier.blobs)
        actual, size = hashed
        if actual != digest:
            return (
                f"content hash mismatch reattaching {what.removeprefix('evidence bytes for ')} (pinned '{digest}', recomputed '{actual}')",
                None,
            )
        return "", size
    try:
        size = check_blob_size(cas, digest)  # re-hashed in a stream: the bytes are not held
    except BlobNotFound:
        return f"{what} missing from store ({digest})", None
    except BlobIntegrityError as exc:
        return (
            f"content hash mismatch reattaching {what.removeprefix('evidence bytes for ')} (pinned '{exc.expected}', recomputed '{exc.actual}')",
            None,
        )
    except CasError as exc:
        return f"{what} unreadable: {exc}", None
    return "", size


class _EvidenceTally:
    """A run's evidence bytes as the verifier counts them (docs/decisions.md, "The evidence cap").

    Each distinct digest counts once, with the size the scheduler counted (a v2 entry's declared
    size; a wrong one is EVIDENCE_SIZE_MISMATCH) or, for a v1 entry that declared none, the stored
    blob's real size. The stage whose blobs take the total past ``MAX_RUN_EVIDENCE_BYTES`` reports
    EVIDENCE_CAP_EXCEEDED_IN_JOURNAL, once per run.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.blobs: set[str] = set()
        self.total = 0
        self.reported = False

    def add(self, digest: str, size: int) -> None:
        if digest not in self.blobs:
            self.blobs.add(digest)
            self.total += size

    def crossing(self, offset: int, seq: int) -> Problem | None:
        if self.reported or self.total <= MAX_RUN_EVIDENCE_BYTES:
            return None
        self.reported = True
        return Problem(
            "EVIDENCE_CAP_EXCEEDED_IN_JOURNAL",
            f"run {self.run_id!r} holds {self.total} bytes of evidence in {len(self.blobs)} distinct blobs by this "
            f"entry (declared sizes, and the stored sizes of blobs a v1 input did not declare); the per-run cap is "
            f"{MAX_RUN_EVIDENCE_BYTES}",
            stream="journal",
            offset=offset,
            seq=seq,
            expected=str(MAX_RUN_EVIDENCE_BYTES),
            recomputed=str(self.total),
        )


def _size_mismatch(what: str, digest: str, declared: int, actual: int | None, offset: int, seq: int) -> Problem:
    return Problem(
        "EVIDENCE_SIZE_MISMATCH",
        f"{what} ({digest}) are {actual} bytes, but {declared} were declared: the producer misstated the size "
        "the run's evidence cap counts",
        stream="journal",
        offset=offset,
        seq=seq,
        expected=str(declared),
        recomputed=str(actual),
    )


def _action_size_findings(
    cas: BlobStore, actions: tuple[tuple[int, dict[str, Any]], ...], tally: _EvidenceTally | None = None
) -> list[Problem]:
    """EVIDENCE_SIZE_MISMATCH for every ComputerUseEntry.v2 whose screenshot or DOM snapshot is not its declared size.

    Blobs that do not reattach are the replay's to name (missing, changed); only a size lie is reported here.
    ``tally`` counts each action's blobs: declared sizes, or for a ComputerUseEntry.v1 (no sizes) the real ones.
    """
    findings: list[Problem] = []
    for offset, action in actions:
        if "screenshot_size" not in action:
            if tally is not None:  # ComputerUseEntry.v1: no sizes declared, the stored blobs' sizes count
                for what, digest in (("screenshot", action["screenshot_hash"]), ("DOM snapshot", action["dom_digest"])):
                    size = _reattach_sized(cas, digest, what)[1]
                    if size is not None:
                        tally.add(digest, size)
            continue
        index = action["action_index"]
        for what, digest, declared in (
            (f"screenshot of action {index}", action["screenshot_hash"], action["screenshot_size"]),
            (f"DOM snapshot of action {index}", action["dom_digest"], action["dom_size"]),
        ):
            if tally is not None:
                tally.add(digest, declared)
            problem, size = _reattach_sized(cas, digest, what)
            if not problem and size != declared:
                findings.append(_size_mismatch(what, digest, declared, size, offset, action["seq"]))
    return findings
