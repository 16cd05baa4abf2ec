"""Offline verification of one run: parse, then verify, then report.

``verify(run_id, source, cas=..., trusted=...)`` returns a frozen
``RunReport``; ``verify_stream`` yields the same verdicts lazily so that the
CLI can print a run of any length in flat memory. The steps, in report order:

1. Chain. Walk the run's journal records in offset order. Each entry's hash
   must recompute over its stored payload bytes, and each entry must name its
   predecessor (``prev_hash``) and the next sequence number. The first break
   is reported once, with its seq, offset, expected and recomputed hashes;
   later entries are checked against their own predecessors, so one edit is
   not smeared over the rest of the run.
2. Seals. Every seal's Ed25519 signature must verify against a pinned key,
   and its (entry_count, head) must match the chain at that point. A run
   needs a final seal; entries after it, or a journal shorter than a seal,
   mean deletion or truncation.
   Every ``JournalEntry.v3`` and every final seal's ``closed_by`` carries its
   producer's signature: the statement is rebuilt from the journal record and
   checked with a pinned producer key registered to that producer and in
   force at the record's timestamp (``verifier.keyuse``); older entries are
   counted, not reported. Every key must also be pinned for the purpose it
   was used for, and in force when it was used (seals, checkpoints, audit
   records, lineage entries, data/ops receipts).
3. Audit. The partition's HMAC chain must recompute with the pinned audit
   key, count from 0 without gaps, link each record to its predecessor, and
   agree with the journal crossing by crossing (entry hashes, seals). Audit
   records of this run that the journal lacks name a truncated journal. The
   partition's signed checkpoints must verify and the chain must reach each
   one's length with exactly its head (``verifier.checkpoints``); the audit
   records after the last one are counted as not covered yet.
4. Stages. For each ``activity.result`` entry: recompute the evidence-set
   hash from the pinned observation hashes; where a CAS is given, reattach and
   re-hash every observation and the artifact (missing and changed are
   different verdicts); then run the modality check for its kind.

Keys come only from ``trusted`` (pinned); a key found in the data is never
used. No step touches the network unless the source is a live cluster.

Every decision is made here; the byte work on each record (splitting
envelopes, reading heads, recomputing hashes and MACs, decoding stage fields)
is done a batch of records at a time by ``verifier.facts``, in Rust when the
``bernstein_native`` extension is built, with the same results either way.
With it, the records the walks find plain (an audit record whose MAC verifies
under a key in force and that links on; a journal entry next in its chain,
joined with its audit crossing, its producer signature verified under a key in
force) are also advanced in Rust (``native/src/walk.rs``), and the first record
that is not plain is checked here: what is written below is the reference.
Memory stays flat: records are read, and facts computed, a chunk at a time.

``verify_many(runs, source, ...)`` verifies many runs (every run with ``runs``
None) reading each partition once: one journal pass feeds every run's walks,
and the partition's audit chain is read once alongside (``_PartitionAudit``),
its own findings kept with their position so that each run's report is the
one ``verify`` gives for it alone. Evidence blobs of a directory store are
re-hashed ahead, a batch of stages at a time, on every core
(``verifier.blobs``); the next chunks' producer signatures are verified while
the current chunk is checked, on both cores (``_signed_ahead``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Final, NamedTuple

from schemas import codec
from schemas.canonical import (
    evidence_set_hash,
    is_digest,
    journal_genesis,
    lineage_signing_input,
    macs_equal,
    run_close_statement,
    seal_signing_input,
    sha256_digest,
    submission_signing_input,
)
from schemas.errors import CanonicalizationError, MalformedDigest
from schemas.records import ENTRY_ACTIVITY_RESULT, ENTRY_COMPUTER_USE_ACTION, MAX_RUN_EVIDENCE_BYTES, AuditEvent
from substrate.cas import BlobIntegrityError, BlobNotFound, BlobStore, CasError, check_blob_size
from substrate.keys import TrustedKey, TrustedKeys, verify_signature
from substrate.text import plural
from verifier import audit_chain as audit_rules
from verifier import facts as _facts
from verifier.audit_chain import ChainPosition, Finding, advance, judge
from verifier.blobs import FailFast, HashedAhead, StoreUnavailable
from verifier.checkpoints import CheckpointWalk, final_seal_checkpoint_missing
from verifier.checks import CheckContext, DetailLine, ModalityCheck, check_for
from verifier.facts import (
    A_RECORD,
    J_ENTRY,
    J_ENTRY_UNDECODABLE,
    J_SEAL,
    P_ACTION,
    P_LEGACY,
    P_SIGNED,
    RAISE,
    S_RESULT,
    S_SKIP,
    Facts,
    Row,
)
from verifier.keyuse import KeyLedger, KeysInForce, KeyUse, allowed_for, key_problem
from verifier.report import (
    AuditVerdict,
    ChainVerdict,
    KeysUsed,
    Problem,
    ProducerKeyUse,
    ProducerVerdict,
    RefusalSeen,
    RunHeader,
    RunReport,
    SealVerdict,
    StageVerdict,
)
from verifier.sources import DumpProblem, DumpSource, KcatSource, RecordSource, StoredRecord

_CHUNK: Final = 256
"""Records per batch for sources that only offer ``records`` (dumps give their own chunks)."""

_JOURNAL = frozenset({codec.JOURNAL_RECORD, codec.SEAL_RECORD})
_ENTRY = codec.JOURNAL_ENTRIES
_RESULT = AuditEvent.ACTIVITY_RESULT.value
_ENTRY_EVENTS = frozenset({AuditEvent.ACTIVITY_RESULT.value, AuditEvent.COMPUTER_USE_ACTION.value})
"""Audit events that mirror a journal entry (joined with the journal entry by entry)."""
_JOIN_EVENTS = _ENTRY_EVENTS | {AuditEvent.RUN_SEALED.value}
_REFUSED = AuditEvent.ACTIVITY_REFUSED.value
_DEADLETTER = AuditEvent.INPUT_DEADLETTER.value
_SEALED = AuditEvent.RUN_SEALED.value
_SEAL = codec.RUN_SEALS
_SIGNED_ENTRY_TYPES = frozenset({ENTRY_ACTIVITY_RESULT, ENTRY_COMPUTER_USE_ACTION})
_AUDIT_RECORD = frozenset({codec.AUDIT_RECORD})
_AUDIT_V2_HEADER = codec.default_codec().schema(codec.AUDIT_RECORD_V2).header

_AUDIT_ENTRY = frozenset({codec.AUDIT_ENTRY, codec.AUDIT_ENTRY_V2})
_DEAD_LETTER = frozenset({codec.DEAD_LETTER, getattr(codec, "DEAD_LETTER_V2", codec.DEAD_LETTER)})
"""Both dead-letter layouts carry what the audit mirrors: the input position and raw_sha256."""


def verify(
    run_id: str, source: RecordSource, *, cas: BlobStore | None, trusted: TrustedKeys, records_only: bool = False
) -> RunReport:
    """Verify one run and return the whole report (stage verdicts held in memory)."""
    header, stages = verify_stream(run_id, source, cas=cas, trusted=trusted, records_only=records_only)
    return RunReport(header=header, stages=tuple(stages))


def verify_stream(
    run_id: str, source: RecordSource, *, cas: BlobStore | None, trusted: TrustedKeys, records_only: bool = False
) -> tuple[RunHeader, Iterator[StageVerdict]]:
    """The run header now, and the stage verdicts as a lazy iterator (flat memory).

    ``cas`` None without ``records_only`` means no content store could be found:
    nothing is reattached and the verdict says so (``NO_CONTENT_STORE``, or
    ``CAS_MISSING`` for a dump whose manifest lists blobs it no longer has).
    With ``records_only`` the store is deliberately not consulted (``RECORDS_ONLY``).
    """
    cas = None if records_only else FailFast.wrap(HashedAhead.wrap(cas))
    c = codec.default_codec()
    key = run_id.encode()
    every = source.partitions("journal")
    # With one partition the chain walk itself finds out whether the run is there.
    partitions = every if len(every) == 1 else [p for p in every if _has_key(source.records("journal", p, headers=False), key)]
    if not partitions:
        return _not_found(run_id, source, _audit_mentions(source, run_id, trusted)), iter(())
    if len(partitions) > 1:
        return _several_partitions(run_id, source, partitions), iter(())
    partition = partitions[0]

    facts = _facts.current()
    walk = _RunWalk(c, run_id, partition, trusted, _partition_audit(c, source, partition, facts, trusted, frozenset({run_id})))
    for mine, signed in _signed_ahead(_row_chunks(source, "journal", partition), lambda row: row[2] == key, facts, trusted):
        walk.feed(facts, mine, signed)
    if walk.chain.records == 0:
        return _not_found(run_id, source, _audit_mentions(source, run_id, trusted)), iter(())
    header = walk.header(source, _refusal_records(source, {key}).get(key, []), cas=cas, records_only=records_only)
    header = _finish_header(header, walk, source)
    why_unchecked = "--records-only" if records_only else "no content store"
    return header, _stages(c, facts, source, partition, key, cas, trusted, why_unchecked)


def verify_many(
    runs: Sequence[str] | None,
    source: RecordSource,
    *,
    cas: BlobStore | None,
    trusted: TrustedKeys,
    records_only: bool = False,
) -> list[RunReport]:
    """Verify many runs reading each partition of ``source`` once: every run (``runs`` None) or the listed ones.

    One pass over each partition's journal feeds every run's chain and stage checks, and
    each run's journal crossings are joined with the partition's audit chain, which is read
    (and its MACs, links, checkpoints and dead letters checked) once, alongside. Each
    refusals partition is read once, before. The reports are the ones ``verify`` gives for
    each run alone. ``runs`` None means every run the journal holds and every run whose
    journal crossings the audit chain mirrors without a journal record (``JOURNAL_MISSING``);
    the reports are then in run id order, else in the order given (duplicates once).

    Memory: one walk per run of the partition being read and the stage verdicts of every
    run (never the records).
    """
    cas = None if records_only else FailFast.wrap(HashedAhead.wrap(cas))
    c = codec.default_codec()
    facts = _facts.current()
    wanted = None if runs is None else frozenset(runs)
    keys = None if wanted is None else {run.encode() for run in wanted}
    why_unchecked = "--records-only" if records_only else "no content store"
    refusals = _refusal_records(source, keys)
    found: dict[str, list[tuple[RunHeader, _RunWalk, list[StageVerdict]]]] = {}
    mentions: dict[str, int] = {}
    crossing_runs: set[str] = set()
    journal = source.partitions("journal")
    for partition in sorted(set(journal) | set(source.partitions("audit"))):
        part = _partition_audit(c, source, partition, facts, trusted, wanted)
        here: dict[bytes, tuple[_RunWalk, _StageBuilder, list[StageVerdict]]] = {}
        skipped: set[bytes] = set()
        chunks = _row_chunks(source, "journal", partition) if partition in journal else iter(())
        for rows, signed_rows in _signed_ahead(
            chunks, lambda row: row[2] is not None and (keys is None or row[2] in keys), facts, trusted
        ):
            by_key: dict[bytes, list[Row]] = {}
            signed_by_key: dict[bytes, list[tuple[Any, ...]]] = {}
            for row, signed_row in zip(rows, signed_rows, strict=True):
                key = row[2]
                if key is not None and key not in skipped:
                    by_key.setdefault(key, []).append(row)
                    signed_by_key.setdefault(key, []).append(signed_row)
            for key, mine in by_key.items():
                state = here.get(key)
                if state is None:
                    try:
                        run_id = key.decode()
                    except UnicodeDecodeError:
                        skipped.add(key)  # no run id can name it: no run's record (as for ``verify``)
                        continue
                    builder = _StageBuilder(c, facts, run_id, cas, trusted, why_unchecked)
                    state = here[key] = (_RunWalk(c, run_id, partition, trusted, part), builder, [])
                walk, builder, stages = state
                walk.feed(facts, mine, signed_by_key[key])
                stages.extend(builder.feed(mine))
        part.drain()
        for key, (walk, builder, stages) in here.items():
            header = walk.header(source, refusals.get(key, []), cas=cas, records_only=records_only)
            stages.extend(builder.finish())
            found.setdefault(walk.run_id, []).append((header, walk, stages))
        for run_id, count in part.mentions.items():
            mentions[run_id] = mentions.get(run_id, 0) + count
        crossing_runs |= part.crossing_runs
    scope = _export_scope(source)
    if scope is not None:  # a dump exported with --run: other runs' audit crossings are not deletions, just not here
        crossing_runs &= scope
    names = list(dict.fromkeys(runs)) if runs is not None else sorted(set(found) | crossing_runs)
    reports = []
    for run_id in names:
        places = found.get(run_id, [])
        if len(places) > 1:
            header = _several_partitions(run_id, source, sorted(walk.partition for _, walk, _ in places))
            reports.append(RunReport(header, ()))
        elif places:
            header, walk, stages = places[0]
            reports.append(RunReport(_finish_header(header, walk, source), tuple(stages)))
        else:
            reports.append(RunReport(_not_found(run_id, source, mentions.get(run_id, 0)), ()))
    return reports


class _RunWalk:
    """One run's chain, seal, producer and audit walks over its partition."""

    def __init__(self, c: codec.Codec, run_id: str, partition: int, trusted: TrustedKeys, part: _PartitionAudit) -> None:
        self.run_id = run_id
        self.partition = partition
        self.audit = _AuditWalk(part, run_id)
        self.ledger = KeyLedger()
        self.chain = _ChainWalk(c, run_id, partition, trusted, self.audit, self.ledger)

    def feed(self, facts: Facts, rows: list[Row], signed: list[tuple[Any, ...]]) -> None:
        """This run's journal records, in offset order, and their producer facts (``_signed_ahead``)."""
        self.chain.feed_many(facts, [row[0] for row in rows], [row[3] for row in rows], [row[1] for row in rows], signed)

    def header(
        self, source: RecordSource, refusals: list[_RefusalRecord], *, cas: BlobStore | None, records_only: bool
    ) -> RunHeader:
        """The run's header once its journal is read: the audit chain is drained, refusals and dead letters checked."""
        audit, chain = self.audit, self.chain
        truncated = audit.finish(chain.expected_seq)
        audit.finish_checkpoints()
        is_open = chain.finish(truncated)
        audit.check_refusals(source, refusals)
        audit.check_deadletters(source)
        part = audit.part
        unchecked = list(audit.unchecked())
        dump_problems: tuple[Problem, ...] = ()
        if records_only:
            unchecked.insert(
                0,
                Problem(
                    "RECORDS_ONLY",
                    "--records-only: the records were checked, the evidence was NOT (no blob reattached or re-hashed)",
                ),
            )
        elif cas is None:
            missing = _cas_missing(source)
            if missing is not None:
                dump_problems = (missing,)
            else:
                unchecked.insert(
                    0,
                    Problem(
                        "NO_CONTENT_STORE",
                        f"no content store for {source.describe()}: no evidence blob was reattached or re-hashed "
                        "(pass --cas DIR or --cas s3, or --records-only to check the records alone)",
                    ),
                )
        return RunHeader(
            run_id=self.run_id,
            source=source.describe(),
            found=True,
            chain=chain.chain_verdict(),
            seal=chain.seal_verdict(),
            audit=audit.verdict(),
            producers=chain.producer_verdict(),
            keys=KeysUsed(
                seal=tuple(sorted(chain.seal_keys)),
                checkpoint=tuple(sorted(part.checkpoints.key_ids)) if part.checkpoints is not None else (),
                audit=tuple(sorted(part.key_ids)),
                producer=_producer_keys(self.ledger),
            ),
            dump_problems=dump_problems,
            unchecked=tuple(unchecked),
            open=is_open,
            records_only=records_only,
            refusals=tuple(r.seen for r in refusals if r.seen is not None),
        )


_SIGNED_AHEAD: Final = 4
"""Chunks whose signatures may be in hand ahead of the walk: enough that neither side waits on the other's
slower chunks (a chunk is about 250 records)."""


def _signed_ahead(
    chunks: Iterator[list[Row]], keep: Callable[[Row], bool], facts: Facts, trusted: TrustedKeys
) -> Iterator[tuple[list[Row], list[tuple[Any, ...]]]]:
    """The kept rows of each chunk with their producer-signature facts, the next chunks' computed while this
    one is walked.

    ``producer_facts`` verifies the Ed25519 signatures in batches without the GIL (``verifier.facts``);
    in a second thread it does so while this thread checks earlier chunks' records, so the two
    overlap instead of taking turns. When the walk is ahead (its next chunk's signatures are still
    being checked), it checks the newest chunk not yet started itself rather than wait: the
    signatures then have both cores. Facts are computed for the kept rows only (a run's own records),
    and handed over in order: the same facts as computed in line.
    """

    def public_for(key_id: str) -> bytes | None:
        pinned = trusted.entry(key_id)
        return None if pinned is None or pinned.is_hmac else pinned.material

    def signed(rows: list[Row]) -> list[tuple[Any, ...]]:
        return facts.producer_facts([row[3] for row in rows], public_for)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verifier-signatures") as pool:
        pending: deque[_Signing] = deque()

        def take() -> tuple[list[Row], list[tuple[Any, ...]]]:
            oldest = pending.popleft()
            while not oldest.ready():
                idle = next((later for later in reversed(pending) if later.unstarted()), None)
                if idle is None:
                    break
                idle.result = signed(idle.rows)  # this thread would wait: it checks a later chunk meanwhile
            return oldest.rows, oldest.get()

        for rows in chunks:
            kept = [row for row in rows if keep(row)]
            if not kept:
                continue
            pending.append(_Signing(kept, pool.submit(signed, kept)))
            if len(pending) > _SIGNED_AHEAD:
                yield take()
        while pending:
            yield take()


class _Signing:
    """One chunk's producer facts: computed by the signature thread, or taken over by the walk's."""

    __slots__ = ("future", "result", "rows")

    def __init__(self, rows: list[Row], future: Future[list[tuple[Any, ...]]]) -> None:
        self.rows = rows
        self.future = future
        self.result: list[tuple[Any, ...]] | None = None

    def ready(self) -> bool:
        return self.result is not None or self.future.done()

    def unstarted(self) -> bool:
        """Not computed and not started: cancelled now, for the caller to compute."""
        return self.result is None and self.future.cancel()

    def get(self) -> list[tuple[Any, ...]]:
        return self.result if self.result is not None else self.future.result()


def _finish_header(header: RunHeader, walk: _RunWalk, source: RecordSource) -> RunHeader:
    header = _with_torn(header, source, walk.partition)
    if walk.chain.results == 0 and header.ok:
        header = replace(header, reason="run journal holds no activity.result entries")
    return header


def _several_partitions(run_id: str, source: RecordSource, partitions: list[int]) -> RunHeader:
    problem = Problem(
        "RUN_ON_SEVERAL_PARTITIONS",
        f"run {run_id!r} has journal records on partitions {partitions}; a run lives on exactly one",
    )
    header = RunHeader(run_id, source.describe(), found=True, dump_problems=(problem,))
    return _with_torn(header, source, None, journal_only=True)


def audit_chain_findings(source: RecordSource, partition: int, trusted: TrustedKeys) -> list[Problem]:
    """Every finding of one partition's audit chain, in the order met: its records (``verifier.audit_chain``), input
    accounting, checkpoints and dead letters. A run's report names the first that concerns it and counts the rest;
    this is the whole list (the audit-chain vectors hold every judge to it)."""
    c = codec.default_codec()
    part = _partition_audit(c, source, partition, _facts.current(), trusted, frozenset())
    part.drain()
    end = part.finish_checkpoints()
    return [*part.found, *end, *part.check_deadletters(source)]


def _partition_audit(
    c: codec.Codec, source: RecordSource, partition: int, facts: Facts, trusted: TrustedKeys, wanted: frozenset[str] | None
) -> _PartitionAudit:
    part = _PartitionAudit(c, _audit_facts(source, partition, facts, trusted), partition, trusted, wanted, walks=facts.walks)
    part.input_start = _input_log_start(source, partition)
    part.checkpoints = CheckpointWalk(c, source, partition, trusted, part.add)
    # a capture that left the checkpoints topic out cannot say whether checkpoints are missing
    part.checkpoints_captured = part.checkpoints.present or not isinstance(source, KcatSource)
    return part


class _RefusalRecord(NamedTuple):
    """One refusal record of a run: where it is, the sha256 of its value, and what it says (None: undecodable)."""

    partition: int
    offset: int
    digest: str
    seen: RefusalSeen | None


def _refusal_records(source: RecordSource, keys: set[bytes] | None) -> dict[bytes, list[_RefusalRecord]]:
    """Each run's refusal records (every run for ``keys`` None), every refusals partition read once, in
    partition and offset order."""
    c = codec.default_codec()
    found: dict[bytes, list[_RefusalRecord]] = {}
    for partition in source.partitions("refusals"):
        for rows in _row_chunks(source, "refusals", partition):
            for row in rows:
                key = row[2]
                if key is not None and (keys is None or key in keys):
                    value = row[3] or b""
                    seen = _refusal_seen(c, partition, row[0], value)
                    found.setdefault(key, []).append(_RefusalRecord(partition, row[0], sha256_digest(value), seen))
    return found


def _refusal_seen(c: codec.Codec, partition: int, offset: int, value: bytes) -> RefusalSeen | None:
    """What a refusal record says of its sender; None for bytes that are no Refusal (the audit check names them)."""
    try:
        decoded = c.decode(value)
    except codec.DecodeError:
        return None
    if decoded.schema.name not in codec.REFUSALS:
        return None
    r = decoded.record
    v2 = decoded.schema.name == codec.REFUSAL_V2
    return RefusalSeen(
        partition,
        offset,
        r["code"],
        r["stage_id"],
        r["kind"],
        r["producer"] if v2 else "",
        r["key_id"] if v2 else "",
        r["authenticated"] if v2 else None,
    )


def _producer_keys(ledger: KeyLedger) -> tuple[ProducerKeyUse, ...]:
    return tuple(ProducerKeyUse(key_id, name, count) for (key_id, name), count in sorted(ledger.producer.items()))


def _cas_missing(source: RecordSource) -> Problem | None:
    """For our dump format: a manifest that lists copied blobs, and no ``cas/`` directory to hold them."""
    if not isinstance(source, DumpSource) or (source.root / "cas").exists():
        return None
    blobs = source.manifest.get("blobs")
    if not isinstance(blobs, int) or isinstance(blobs, bool) or blobs <= 0:
        return None
    return Problem(
        "CAS_MISSING",
        f"the dump's manifest lists {blobs} evidence blobs but {source.root / 'cas'} is missing (content store deleted)",
    )


def _row_chunks(source: RecordSource, stream: str, partition: int) -> Iterator[list[Row]]:
    """The records of one partition as non-empty lists of rows ``(offset, timestamp, key, value, ...)``."""
    chunks = getattr(source, "row_chunks", None)
    if chunks is not None:
        yield from chunks(stream, partition, headers=False)
        return
    batch: list[Row] = []
    for r in source.records(stream, partition, headers=False):
        batch.append((r.offset, r.timestamp_ms, r.key, r.value, r.topic, r.partition, r.headers))
        if len(batch) == _CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


AuditRow = tuple[int, tuple[Any, ...], int, int, bytes | None]
"""(offset, audit fact, envelope version, Kafka timestamp, value) of one audit record."""


def _audit_facts(source: RecordSource, partition: int, facts: Facts, trusted: TrustedKeys) -> Iterator[list[AuditRow]]:
    """The audit records of the partition in offset order, a chunk at a time (never an empty one).

    The version is 2 for an ``AuditRecord.v2`` (what schedulers that write checkpoints write), else 1;
    it only decides which checkpoints must exist, the fact says whether the record decodes.
    """
    for rows in _row_chunks(source, "audit", partition):
        values = [row[3] for row in rows]
        versions = [2 if value is not None and value[: codec.HEADER_SIZE] == _AUDIT_V2_HEADER else 1 for value in values]
        yield list(
            zip(
                [row[0] for row in rows],
                facts.audit_facts(values, trusted.audit_secret),
                versions,
                [row[1] for row in rows],
                values,
                strict=True,
            )
        )


def _input_log_start(source: RecordSource, partition: int) -> int:
    """The first offset the input partition holds, as the source knows it: a cluster's log start, the one a dump's
    manifest recorded at export; 0 otherwise (submissions are retained forever, so 0 is the normal case)."""
    log_start = getattr(source, "log_start", None)
    return int(log_start("submissions", partition)) if callable(log_start) else 0


def _not_found(run_id: str, source: RecordSource, mentions: int) -> RunHeader:
    """The header of a run the journal does not hold; ``mentions`` counts the audit records that name it
    (``_audit_mentions``). A dump exported with ``--run`` for other runs does not hold this one at all: "not in this
    dump", never "deleted"."""
    scope = _export_scope(source)
    if mentions and scope is not None and run_id not in scope:
        header = RunHeader(
            run_id,
            source.describe(),
            found=False,
            reason=f"run {run_id!r} is not in {source.describe()}: it was exported with --run for {len(scope)} other "
            "run(s) only (export this run, or the whole partition)",
        )
        return _with_torn(header, source, None)
    if mentions:
        problem = Problem(
            "JOURNAL_MISSING",
            f"the journal holds no records of run {run_id!r}, but the audit chain mirrors {mentions} crossings of it "
            "(journal records deleted)",
        )
        return _with_torn(RunHeader(run_id, source.describe(), found=True, dump_problems=(problem,)), source, None)
    header = RunHeader(
        run_id, source.describe(), found=False, reason=f"no journal records for run {run_id!r} in {source.describe()}"
    )
    return _with_torn(header, source, None)


def _export_scope(source: RecordSource) -> frozenset[str] | None:
    """The runs a dump was exported for (``topic export --run``; its manifest's ``runs``); None: every run."""
    scope = getattr(source, "exported_runs", None)
    return scope if isinstance(scope, frozenset) else None


_STREAM_ORDER: Final = {"journal": 0, "audit": 1, "checkpoints": 2, "refusals": 3, "deadletter": 4}


def _with_torn(header: RunHeader, source: RecordSource, partition: int | None, *, journal_only: bool = False) -> RunHeader:
    """The header with the damage the source found in the files its verification reads (``verifier.sources.DumpProblem``).

    A run on ``partition`` reads every journal and refusals file and its partition's audit, checkpoints
    and dead-letter files; a run not found (``partition`` None) the journal and audit files (only the
    journal's with ``journal_only``). Damage in a file that no check of the run reads belongs to other
    runs' reports, so a run reports the same whether verified alone or with others (``verify_many``). The
    damage is listed by stream, partition and line (a capture file: in the order found).
    """
    found = getattr(source, "dump_problems", None)
    if found is None:  # a source that lists only torn lines
        found = [
            DumpProblem(
                "DUMP_TRUNCATED", f"{t.path} ends in a torn line at line {t.line}: the dump file was truncated", t.path, t.line
            )
            for t in getattr(source, "torn_lines", [])
        ]
    if not found:
        return header
    ranked = []
    for problem in found:
        where = _dump_file(problem.path)
        if where is not None:
            stream, file_partition = where
            if partition is None:
                if stream != "journal" and (journal_only or stream != "audit"):
                    continue
            elif stream not in ("journal", "refusals") and file_partition != partition:
                continue
            rank = (_STREAM_ORDER.get(stream, len(_STREAM_ORDER)), file_partition, problem.line)
        else:
            rank = (-1, 0, 0)  # a capture file: kept in the order found
        ranked.append((rank, problem))
    ranked.sort(key=lambda item: item[0])
    if not ranked:
        return header
    return replace(header, dump_problems=header.dump_problems + tuple(_dump_problem(p) for _, p in ranked))


def _dump_file(path: str) -> tuple[str, int] | None:
    """(stream, partition) of a dump's ``topics/<stream>/<partition>.jsonl``; None for any other file (a capture)."""
    file = Path(path)
    if file.parent.parent.name != "topics" or file.suffix != ".jsonl" or not file.stem.isdigit():
        return None
    return file.parent.name, int(file.stem)


def _dump_problem(found: DumpProblem) -> Problem:
    """The Problem of damage in a dump or capture file (docs/verifier.md, dump_problems)."""
    match found.code:
        case "DUMP_TRUNCATED":
            code = "DUMP_TRUNCATED"
        case "DUMP_LINE_CORRUPTED":
            code = "DUMP_LINE_CORRUPTED"
        case "DUMP_LINE_TOO_LONG":
            code = "DUMP_LINE_TOO_LONG"
        case "DUMP_RECORD_MISPLACED":
            code = "DUMP_RECORD_MISPLACED"
        case "DUMP_OFFSET_ORDER":
            code = "DUMP_OFFSET_ORDER"
        case other:
            raise AssertionError(f"unknown dump problem {other}")
    return Problem(code, found.message, stream=found.stream, offset=found.offset)


def _has_key(records: Iterator[StoredRecord], key: bytes) -> bool:
    return any(r.key == key for r in records)


def _audit_mentions(source: RecordSource, run_id: str, trusted: TrustedKeys) -> int:
    """Audit records whose decoded payload names ``run_id`` (never the unauthenticated Kafka key) and that mirror a
    journal record (a result, an action, a seal): a run whose only records were refused has none, and is not found,
    never "journal records deleted".

    With an audit key pinned, only records whose MAC verifies count; without
    one, the payload is all there is (the verdict then also says MACs were not verified).
    """
    facts = _facts.current()
    count = 0
    for partition in source.partitions("audit"):
        for rows in _row_chunks(source, "audit", partition):
            for fact in facts.audit_facts([row[3] for row in rows], trusted.audit_secret):
                if fact[0] == A_RECORD and fact[8] == run_id and fact[7] in _JOIN_EVENTS and _authenticated(fact, trusted):
                    count += 1
    return count


# ---------------------------------------------------------------------------
# 1-2. chain and seals
# ---------------------------------------------------------------------------


@dataclass
class _Findings:
    first: Problem | None = None
    further: int = 0

    def add(self, problem: Problem) -> None:
        if self.first is None:
            self.first = problem
        else:
            self.further += 1


class _ChainWalk:
    def __init__(
        self, c: codec.Codec, run_id: str, partition: int, trusted: TrustedKeys, audit: _AuditWalk, ledger: KeyLedger
    ) -> None:
        self.c = c
        self.ledger = ledger
        self.producers = _Findings()
        self.signed = 0
        self.legacy = 0
        self.run_id = run_id
        self.partition = partition
        self.trusted = trusted
        self.producer_keys = KeysInForce(trusted, KeyUse.PRODUCER)
        self.audit = audit
        walks = audit.part.walks
        self._plain = (
            None
            if walks is None
            else walks.ChainPlain(
                run_id, self.producer_keys.windows(), _RESULT, ENTRY_ACTIVITY_RESULT, sorted(_SIGNED_ENTRY_TYPES)
            )
        )
        self.expected_seq = 0
        self.head = journal_genesis(run_id)
        # When the previous entry's stored hash does not recompute, the break is
        # already reported; its successor (and a seal) may name either the stored
        # or the recomputed hash, depending on which of the two was edited. Either
        # link continues the chain, so one edited entry is one chain problem.
        self.alt_head: str | None = None
        self.results = 0
        self.records = 0
        self.chain = _Findings()
        self.seals = _Findings()
        self.seal_count = 0
        self.final_seal_offset: int | None = None
        self.covered = 0
        self.seal_keys: set[str] = set()
        self.final_claimed = False
        """A seal record that says it is final (or cannot say: undecodable), valid or not."""
        self.closed_by = ("", "")
        """(producer, key id) of the signed RunClose the final seal carries."""

    def feed_many(
        self,
        facts: Facts,
        offsets: list[int],
        values: list[bytes | None],
        timestamps: list[int],
        signed: list[tuple[Any, ...]] | None = None,
    ) -> None:
        """Walk a batch of this run's journal records (offsets, values and Kafka timestamps, in offset order);
        ``signed``: their producer facts when already computed (``_signed_ahead``)."""
        journal = facts.journal_facts(values)
        if signed is None:
            signed = facts.producer_facts(values, self._public_for)
        plain = self._plain
        if plain is None:
            for record in zip(offsets, values, timestamps, journal, signed, strict=True):
                self._record(*record)
            return
        if not len(offsets) == len(values) == len(timestamps) == len(journal) == len(signed):
            raise ValueError("feed_many: the record lists differ in length")
        at, end = 0, len(offsets)
        while at < end:
            # the plain entries natively (what ``_record`` concludes for them), the next one here
            at = plain.advance(self, timestamps, journal, signed, at)
            if at < end:
                self._record(offsets[at], values[at], timestamps[at], journal[at], signed[at])
                at += 1

    def _record(self, offset: int, value: bytes | None, timestamp: int, fact: tuple[Any, ...], producer: tuple[Any, ...]) -> None:
        """One journal record of the run: an entry, a seal, or one that does not decode."""
        self.records += 1
        kind = fact[0]
        if kind == J_ENTRY:
            self._entry(offset, fact)
            if fact[6] in _SIGNED_ENTRY_TYPES:
                self._producer_entry(offset, value, timestamp, producer)
        elif kind == J_SEAL:
            self._seal(offset, value, fact)
        elif kind == J_ENTRY_UNDECODABLE:
            _, stored, recomputed, message = fact
            self.chain.add(
                Problem(
                    "ENTRY_UNDECODABLE",
                    f"entry at offset {offset}: payload does not decode ({message})",
                    stream="journal",
                    offset=offset,
                    expected=stored,
                    recomputed=recomputed,
                )
            )
            self._advance(self.expected_seq, stored)
        elif kind == RAISE:
            raise fact[1]
        else:
            self.chain.add(
                Problem(
                    "RECORD_UNDECODABLE",
                    f"journal record at offset {offset} does not decode: {fact[1]}",
                    stream="journal",
                    offset=offset,
                )
            )

    def _entry(self, offset: int, fact: tuple[Any, ...]) -> None:
        _, stored, recomputed, run_id, seq, prev_hash, entry_type = fact
        if (
            recomputed == stored
            and seq == self.expected_seq
            and run_id == self.run_id
            and self.final_seal_offset is None
            and (prev_hash == self.head or prev_hash == self.alt_head)
        ):
            # The plain entry (this run's, intact, next in its chain): what the checks below conclude.
            if entry_type == ENTRY_ACTIVITY_RESULT:
                self.results += 1
            self.audit.expect_result(seq, stored, offset)
            self.expected_seq = seq + 1
            self.head = stored
            self.alt_head = None
            return
        if self.final_seal_offset is not None:
            self.seals.add(
                Problem(
                    "ENTRY_AFTER_FINAL_SEAL",
                    f"entry seq {seq} at offset {offset} follows the run's final seal (offset {self.final_seal_offset})",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                )
            )
        if run_id != self.run_id:
            self.chain.add(
                Problem(
                    "ENTRY_WRONG_RUN",
                    f"entry at offset {offset} is keyed {self.run_id!r} but belongs to run {run_id!r}",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                )
            )
        elif recomputed != stored:
            self.chain.add(
                Problem(
                    "ENTRY_HASH_MISMATCH",
                    f"seq {seq} at offset {offset}: entry hash mismatch (stored '{stored}', recomputed '{recomputed}')",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                    expected=stored,
                    recomputed=recomputed,
                )
            )
        elif seq != self.expected_seq or prev_hash not in self._heads():
            self.chain.add(self._link_problem(offset, seq, prev_hash, stored))
        if entry_type == ENTRY_ACTIVITY_RESULT:
            self.results += 1
        self.audit.expect_result(seq, stored, offset, recomputed=recomputed)
        if seq + 1 >= self.expected_seq:
            self._advance(seq + 1, stored, alt=recomputed if recomputed != stored else None)
        # else: an entry from further back (moved or replayed) is named once above;
        # the chain continues from the furthest entry, so its successors are not
        # reported as missing all over again.

    def _heads(self) -> tuple[str, ...]:
        return (self.head,) if self.alt_head is None else (self.head, self.alt_head)

    # -- producer signatures ------------------------------------------------------

    def _public_for(self, key_id: str) -> bytes | None:
        """The pinned Ed25519 key a producer fact verifies under (whether it may sign that is decided here)."""
        pinned = self.trusted.entry(key_id)
        return None if pinned is None or pinned.is_hmac else pinned.material

    def _producer_entry(self, offset: int, value: bytes | None, timestamp: int, fact: tuple[Any, ...]) -> None:
        """A JournalEntry.v3's producer signature (``verifier.facts`` checked it under the pinned key), with
        the key's purpose, owner and lifetime; older entries are counted; a computer-use entry's lineage key."""
        kind = fact[0]
        if kind == P_LEGACY:
            self.legacy += 1
        elif kind == P_ACTION:
            try:
                payload = codec.split_envelope(value or b"")[1][0]
            except (codec.DecodeError, IndexError):
                return  # the chain walk names it
            self._lineage_key(offset, payload, timestamp)
        elif kind == P_SIGNED:
            _, seq, key_id, producer, verified = fact
            if verified is True and self.producer_keys.fits(key_id, timestamp, producer):
                # what ``_producer_signature`` concludes, without building its messages
                self.signed += 1
                self.ledger.signed_by_producer(key_id, producer)
                return
            what = f"journal entry seq {seq} at offset {offset}"
            self._producer_signature(what, key_id, producer, lambda _pinned: verified is True, timestamp, offset, seq)
        elif kind == RAISE:
            raise fact[1]

    def _lineage_key(self, offset: int, payload: bytes, timestamp: int) -> None:
        """A computer-use action's lineage signature is its producer's: the key must be a pinned producer key,
        registered to the entry's producer, in force at the record's timestamp. Whether the signature itself
        verifies (and an unpinned key) is the browser replay's finding, on the session's stage."""
        try:
            action = self.c.decode(payload, expect=codec.COMPUTER_USE_ENTRIES).record
        except codec.DecodeError:
            return
        key_id = action["lineage_key_id"]
        pinned = self.trusted.entry(key_id)
        if pinned is None:
            return
        what = f"the lineage entry of action {action['action_index']} (journal seq {action['seq']} at offset {offset})"
        finding = key_problem(pinned, KeyUse.PRODUCER, what, timestamp, producer=action["producer_id"])
        if finding is not None:
            self.producers.add(finding.problem(stream="journal", offset=offset, seq=action["seq"]))
        elif verify_signature(pinned.material, action["lineage_signature"], lineage_signing_input(action["lineage_entry"])):
            self.signed += 1
            self.ledger.signed_by_producer(key_id, action["producer_id"])

    def _closed_by(self, seal: dict[str, Any], offset: int) -> None:
        """The producer signature of the RunClose.v2 that closed the run (a final seal's ``closed_by``)."""
        closed = seal.get("closed_by")
        if closed is None:
            self.legacy += 1  # closed by a RunClose.v1: it predates producer signatures
            return
        self.closed_by = (closed["producer_id"], closed["key_id"])
        what = f"the run close {closed['submission_id']!r} in the final seal at offset {offset}"
        try:
            signed: bytes | None = submission_signing_input(
                run_close_statement(
                    closed["submission_id"], seal["run_id"], closed["producer_id"], closed["occurred_at_ms"], closed["key_id"]
                )
            )
        except CanonicalizationError:
            signed = None

        def verifies(pinned: TrustedKey) -> bool:
            return signed is not None and verify_signature(pinned.material, closed["signature"], signed)

        self._producer_signature(
            what, closed["key_id"], closed["producer_id"], verifies, seal["sealed_at_ms"], offset, seal["entry_count"]
        )

    def _producer_signature(
        self,
        what: str,
        key_id: str,
        producer: str,
        verifies: Callable[[TrustedKey], bool],
        timestamp: int,
        offset: int,
        seq: int,
    ) -> None:
        """One producer signature: pinned as a producer key, registered to ``producer``, in force at ``timestamp``,
        and ``verifies`` under that pinned key."""
        pinned = self.trusted.entry(key_id)
        if pinned is None:
            allowed = allowed_for(self.trusted, KeyUse.PRODUCER)
            self.producers.add(
                Problem(
                    "PRODUCER_KEY_NOT_PINNED",
                    f"{what} is signed by producer key {key_id}, which is not among the pinned keys (--trusted-keys)",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                    expected=", ".join(allowed) or "(none pinned)",
                    recomputed=key_id,
                )
            )
            return
        finding = key_problem(pinned, KeyUse.PRODUCER, what, timestamp, producer=producer)
        if finding is not None:
            self.producers.add(finding.problem(stream="journal", offset=offset, seq=seq))
            return
        if pinned.is_hmac or not verifies(pinned):
            self.producers.add(
                Problem(
                    "PRODUCER_SIGNATURE_INVALID",
                    f"{what}: the producer signature does not verify against pinned key {key_id} ({producer!r}): "
                    "the signed fields were changed after the producer signed them",
                    stream="journal",
                    offset=offset,
                    seq=seq,
                )
            )
            return
        self.signed += 1
        self.ledger.signed_by_producer(key_id, producer)

    def producer_verdict(self) -> ProducerVerdict:
        return ProducerVerdict(
            signed=self.signed,
            legacy=self.legacy,
            keys=_producer_keys(self.ledger),
            problem=self.producers.first,
            further_problems=self.producers.further,
        )

    def _link_problem(self, offset: int, seq: int, prev: str, stored: str) -> Problem:
        if stored == self.head:
            what = f"seq {seq} at offset {offset} repeats the previous entry (duplicate record)"
            code = "ENTRY_DUPLICATED"
        elif seq < self.expected_seq:
            what = f"seq {seq} at offset {offset} comes after seq {self.expected_seq - 1} (records reordered or duplicated)"
            code = "ENTRY_OUT_OF_ORDER"
        elif seq > self.expected_seq:
            missing = f"seq {self.expected_seq}" if seq == self.expected_seq + 1 else f"seqs {self.expected_seq}..{seq - 1}"
            what = f"seq {seq} at offset {offset} follows seq {self.expected_seq - 1}: {missing} missing (deleted or moved)"
            code = "ENTRY_MISSING"
        else:
            what = f"seq {seq} at offset {offset}: prev_hash does not name the previous entry (stored '{prev}', expected '{self.head}')"
            code = "CHAIN_LINK_BROKEN"
        return Problem(code, what, stream="journal", offset=offset, seq=seq, expected=self.head, recomputed=prev)

    def _advance(self, next_seq: int, head: str, alt: str | None = None) -> None:
        self.expected_seq = next_seq
        self.head = head
        self.alt_head = alt

    def _seal(self, offset: int, value: bytes | None, fact: tuple[Any, ...]) -> None:
        _, payload, key_id, signature = fact
        self.seal_count += 1
        try:
            seal = self.c.decode(payload, expect=_SEAL).record
        except codec.DecodeError as exc:
            self.final_claimed = True  # it may have been the final one
            self.seals.add(
                Problem("SEAL_UNDECODABLE", f"seal at offset {offset} does not decode: {exc}", stream="journal", offset=offset)
            )
            return
        if seal["final"]:
            self.final_claimed = True
        self.audit.expect_seal(seal, sha256_digest(value or b""), offset)
        pinned = self.trusted.entry(key_id)
        if pinned is None:
            self.seals.add(
                Problem(
                    "SEAL_KEY_NOT_PINNED",
                    f"seal at offset {offset} is signed by key {key_id}, which is not among the pinned keys (--trusted-keys)",
                    stream="journal",
                    offset=offset,
                    expected=", ".join(allowed_for(self.trusted, KeyUse.SEAL)) or "(none pinned)",
                    recomputed=key_id,
                )
            )
            return
        # the seal's own signed timestamp (its input's), never a key found in the data
        finding = key_problem(pinned, KeyUse.SEAL, f"seal at offset {offset}", seal["sealed_at_ms"])
        if finding is not None and finding.code != "KEY_OUTSIDE_VALIDITY":
            self.seals.add(finding.problem(stream="journal", offset=offset))
            return
        if pinned.is_hmac or not verify_signature(pinned.material, signature, seal_signing_input(payload)):
            self.seals.add(
                Problem(
                    "SEAL_SIGNATURE_INVALID",
                    f"seal at offset {offset}: signature does not verify against pinned key {key_id}",
                    stream="journal",
                    offset=offset,
                )
            )
            return
        if finding is not None:  # signed by that key, but outside its lifetime
            self.seals.add(finding.problem(stream="journal", offset=offset))
            return
        self.seal_keys.add(key_id)
        count = seal["entry_count"]
        if seal["run_id"] != self.run_id:
            self.seals.add(
                Problem(
                    "SEAL_WRONG_RUN", f"seal at offset {offset} seals run {seal['run_id']!r}", stream="journal", offset=offset
                )
            )
        elif count != self.expected_seq or seal["head_hash"] not in self._heads():
            if count > self.expected_seq:
                message = (
                    f"seal at offset {offset} covers {count} entries but the journal holds {self.expected_seq} before it "
                    f"(entries deleted or truncated after seq {self.expected_seq - 1})"
                )
            elif count < self.expected_seq:
                message = f"seal at offset {offset} covers {count} entries but the journal holds {self.expected_seq} before it (entries inserted)"
            else:
                message = f"seal at offset {offset}: head mismatch (sealed '{seal['head_hash']}', journal '{self.head}')"
            self.seals.add(
                Problem(
                    "SEAL_MISMATCH",
                    message,
                    stream="journal",
                    offset=offset,
                    seq=count,
                    expected=seal["head_hash"],
                    recomputed=self.head,
                )
            )
        else:
            self.covered = count
        if seal["final"]:
            self._closed_by(seal, offset)
            if self.final_seal_offset is not None:
                self.seals.add(
                    Problem("SEAL_DUPLICATE_FINAL", f"second final seal at offset {offset}", stream="journal", offset=offset)
                )
            self.final_seal_offset = offset

    def finish(self, truncated: bool) -> bool:
        """Close the walk; True when the run is open.

        A run without a valid final seal is open only when nothing says a final
        seal was ever written: no seal record claiming to be final (valid or not)
        and no crossing of the run that the audit chain mirrors after the
        journal's end (``truncated``). Otherwise its tail was cut or its final
        seal forged: ``RUN_NOT_SEALED``, a mismatch.
        """
        if self.final_seal_offset is None:
            if not (truncated or self.final_claimed):
                return True
            tail = self.expected_seq - self.covered
            self.seals.add(
                Problem(
                    "RUN_NOT_SEALED",
                    f"no final seal: the last valid seal covers {self.covered} of {self.expected_seq} entries "
                    f"({tail} unsealed; the run is still open or its journal tail was truncated)",
                    seq=self.expected_seq,
                    expected="final seal",
                )
            )
        return False

    def chain_verdict(self) -> ChainVerdict:
        return ChainVerdict(
            entries=self.expected_seq,
            head=self.head,
            partition=self.partition,
            problem=self.chain.first,
            further_problems=self.chain.further,
        )

    def seal_verdict(self) -> SealVerdict:
        return SealVerdict(
            seals=self.seal_count,
            final=self.final_seal_offset is not None,
            covered=self.covered,
            key_ids=tuple(sorted(self.seal_keys)),
            closed_by=self.closed_by[0],
            closed_by_key=self.closed_by[1],
            problem=self.seals.first,
            further_problems=self.seals.further,
        )


# ---------------------------------------------------------------------------
# 3. audit chain, joined with the journal
# ---------------------------------------------------------------------------


class _AuditEvent:
    __slots__ = (
        "seq",
        "offset",
        "event",
        "journal_seq",
        "record_hash",
        "prev_mac",
        "tainted",
        "version",
        "position",
        "checkpoints_seen",
    )

    def __init__(
        self,
        seq: int,
        offset: int,
        event: str,
        journal_seq: int,
        record_hash: str,
        prev_mac: str,
        tainted: bool,
        version: int = 1,
        position: int = 0,
        checkpoints_seen: int = 0,
    ) -> None:
        self.seq = seq
        self.offset = offset
        self.event = event
        self.journal_seq = journal_seq
        self.record_hash = record_hash
        self.prev_mac = prev_mac
        self.tainted = tainted
        self.version = version
        """The AuditRecord envelope version: 2 is written by schedulers that also write checkpoints."""
        self.position = position
        """How many audit records of the partition were read up to and including this one."""
        self.checkpoints_seen = checkpoints_seen
        """``CheckpointWalk.last_seen`` right after this record: the last checkpoint written up to it."""


@dataclass
class _RunCrossings:
    """What the partition's audit chain says about one run, counted as the chain is read."""

    records: int = 0
    refusals: int = 0
    refusal_hashes: list[tuple[int, int, str]] = field(default_factory=list)
    """(audit seq, audit offset, sha256 of the refusal value) of the run's refusals."""
    events: Any = field(default_factory=deque)
    """The run's result and seal crossings read but not yet joined with its journal: a ``deque`` of
    ``_AuditEvent``, or the native ``EventQueue`` that holds them for ``_PartitionAudit.walks``."""


@dataclass
class _PartitionAudit:
    """The audit chain of one partition, read once, however many runs are joined with it.

    Everything that concerns the chain itself (MACs, keys, sequence, links, input accounting,
    checkpoints, dead letters) is checked here once; each run's result and seal crossings are queued
    for that run's ``_AuditWalk``. A finding of the chain is kept with its position (how many records
    had been read), so each run's report lists it where a walk of that run alone would have met it.
    """

    c: codec.Codec
    chunks: Iterator[list[AuditRow]]
    """Every audit record of the partition, in offset order, a chunk at a time."""
    partition: int
    trusted: TrustedKeys
    wanted: frozenset[str] | None = None
    """The runs whose crossings are kept (None: every run)."""
    count: int = 0
    last_mac: str = ""
    expected_seq: int = 0
    key_ids: set[str] = field(default_factory=set)
    macs_verified: bool = True
    missing_key: str = ""
    genesis_checked: bool = False
    """An authentic record moved the chain: ``last_mac`` is a MAC of it (before, the chain starts at its genesis)."""
    stand_ins: int = 0
    """Records reported since the last authentic one (``verifier.audit_chain.ChainPosition``)."""
    deadletters: list[tuple[int, int, int, str]] = field(default_factory=list)
    """(audit seq, audit offset, input offset, raw sha256) of the partition's dead letters."""
    deadletter_codes: dict[int, str] = field(default_factory=dict)
    """audit offset -> ``reason_code`` of the audit records that mirror those dead letters."""
    last_input: int | None = None
    """Input offset of the previous audit record (None at the start, and after a record already reported)."""
    last_event: str = ""
    input_start: int = 0
    """The input partition's first offset (its log start): the first audit record must account for it."""
    started: bool = False
    """An audit record was read: the next one is not the chain's first."""
    checkpoints: CheckpointWalk | None = None
    """The partition's checkpoints, merged with the chain as it is read."""
    checkpoints_captured: bool = True
    """False for a kcat capture without the checkpoints topic: missing checkpoints are then not checked."""
    v2_records: int = 0
    """AuditRecord.v2 records read (their scheduler writes checkpoints)."""
    last_version: int = 0
    """Envelope version of the last decodable audit record."""
    uncovered: int = 0
    exhausted: bool = False
    found: list[Problem] = field(default_factory=list)
    """Findings of the chain itself, in the order met."""
    found_at: list[int] = field(default_factory=list)
    """``count`` when each of ``found`` was met."""
    end_found: list[Problem] | None = None
    """Findings of the checkpoints after the chain's end (``finish_checkpoints``)."""
    deadletter_found: list[Problem] | None = None
    deadletters_not_captured: int = 0
    runs: dict[str, _RunCrossings] = field(default_factory=dict)
    mentions: dict[str, int] = field(default_factory=dict)
    """Records naming each run whose MAC verifies (``_authenticated``): what JOURNAL_MISSING counts."""
    crossing_runs: set[str] = field(default_factory=set)
    """Runs the chain mirrors a journal crossing of (a result, an action or a seal), authenticated."""

    walks: ModuleType | None = None
    """``Facts.walks``: the native plain path of ``_check`` and the queues it fills, or None."""

    audit_keys: KeysInForce = field(init=False, repr=False)
    """The pinned audit keys in force, looked up once per key id."""
    _plain: Any = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self.audit_keys = KeysInForce(self.trusted, KeyUse.AUDIT)
        if self.walks is not None:
            self._plain = self.walks.AuditPlain(
                self.partition,
                self.audit_keys.windows(),
                _RESULT,
                sorted(_ENTRY_EVENTS),
                sorted(_JOIN_EVENTS),
                _REFUSED,
                _DEADLETTER,
            )

    def add(self, problem: Problem) -> None:
        self.found.append(problem)
        self.found_at.append(self.count)

    def run(self, run_id: str) -> _RunCrossings:
        crossings = self.runs.get(run_id)
        if crossings is None:
            queue = deque() if self.walks is None else self.walks.EventQueue(_AuditEvent)
            crossings = self.runs[run_id] = _RunCrossings(events=queue)
        return crossings

    def next_event(self, run_id: str) -> _AuditEvent | None:
        """The next result or seal crossing of ``run_id``, reading the chain a chunk at a time, only as far as it
        takes. (How far ahead it has read changes no verdict: each crossing carries its position in the chain,
        and each finding of the chain its own.)"""
        queued = self.run(run_id).events
        while not queued:
            if not self._read_chunk():
                return None
        event: _AuditEvent = queued.popleft()
        return event

    def drain(self) -> None:
        """Read the rest of the chain (every run's crossings are queued)."""
        while self._read_chunk():
            pass

    def _read_chunk(self) -> bool:
        """Check the next chunk of the chain and queue its crossings for their runs; False at the chain's end."""
        chunk = next(self.chunks, None) if not self.exhausted else None
        if chunk is None:
            self.exhausted = True
            return False
        check, plain, checkpoints = self._check, self._plain, self.checkpoints
        if plain is None:
            for offset, fact, version, timestamp, value in chunk:
                check(offset, fact, version, timestamp, value)  # queues the record's crossing for its run
            return True
        at, end = 0, len(chunk)
        while at < end:
            # the plain records natively (what ``_check`` concludes for them), the next one here
            if checkpoints is None:
                at = plain.advance(self, chunk, at, None, 0)
            else:
                at = plain.advance(self, chunk, at, checkpoints.due(), checkpoints.last_seen)
            if at < end:
                check(*chunk[at])
                at += 1
        return True

    def _check(self, offset: int, fact: tuple[Any, ...], version: int, timestamp: int, value: bytes | None) -> None:
        """Check one audit record of the chain and queue its crossing (a result or a seal) for its run."""
        self.count += 1
        if fact[0] != A_RECORD:
            if fact[0] == RAISE:
                raise fact[1]
            self.add(
                Problem(
                    "AUDIT_UNDECODABLE",
                    f"audit record at offset {offset} does not decode: {fact[1]}",
                    stream="audit",
                    offset=offset,
                )
            )
            self.stand_ins += 1  # it stands in for at most one seq (``verifier.audit_chain``)
            self.last_input = None  # accounting restarts after a record already reported
            return
        (
            _,
            key_id,
            mac,
            recomputed,
            partition,
            seq,
            prev_mac,
            event,
            run_id,
            record_hash,
            journal_seq,
            input_partition,
            input_offset,
        ) = fact
        self.last_version = version
        if version == 2:
            self.v2_records += 1
        if self.checkpoints is not None:
            self.checkpoints.on_audit(seq, mac, input_offset)
        if (
            recomputed == mac
            and seq == self.expected_seq
            and prev_mac == self.last_mac
            and self.genesis_checked
            and partition == self.partition == input_partition
            and self.audit_keys.fits(key_id, timestamp)
        ):
            # The plain record (its MAC verifies under a pinned audit key in force, it links to its
            # predecessor, it is on this partition): what ``verifier.audit_chain.judge`` concludes, in fewer steps.
            tainted = False
            authenticated = True
            self.key_ids.add(key_id)
            self.stand_ins = 0
            last = self.last_input
            if last is not None and input_offset == last + 1:
                self.last_input = input_offset  # the next input: what ``_account`` concludes
                self.last_event = event
            else:
                self._account(offset, seq, event, input_offset)
            self.expected_seq = seq + 1
            self.last_mac = mac
        else:
            tainted = self._judge(offset, fact, timestamp)
            authenticated = _authenticated(fact, self.trusted)
            if tainted:
                self.last_input = None  # already reported: accounting restarts after it
            else:
                self._account(offset, seq, event, input_offset)
        self.started = True
        if event == _DEADLETTER and not tainted:
            self.deadletters.append((seq, offset, input_offset, record_hash))
            reason = _deadletter_code(self.c, value)
            if reason is not None:
                self.deadletter_codes[offset] = reason
        if authenticated and event in _JOIN_EVENTS:  # a refusal mirrors no journal record: it is no evidence of one
            self.mentions[run_id] = self.mentions.get(run_id, 0) + 1
            self.crossing_runs.add(run_id)
        if self.wanted is not None and run_id not in self.wanted:
            return
        crossings = self.run(run_id)
        crossings.records += 1
        if event == _REFUSED:
            crossings.refusals += 1
            if not tainted:
                crossings.refusal_hashes.append((seq, offset, record_hash))
            return
        if event not in _JOIN_EVENTS:
            return
        crossings.events.append(
            _AuditEvent(
                seq,
                offset,
                _RESULT if event in _ENTRY_EVENTS else event,
                journal_seq,
                record_hash,
                prev_mac,
                tainted,
                version,
                self.count,
                self.checkpoints.last_seen if self.checkpoints is not None else 0,
            )
        )

    def _judge(self, offset: int, fact: tuple[Any, ...], timestamp: int) -> bool:
        """The record judged as ``audit follow`` judges it (``verifier.audit_chain``), each finding added and the
        chain moved: True when the record is tainted (its contents are not vouched for)."""
        key_id, mac, recomputed, seq = fact[1], fact[2], fact[3], fact[5]
        position = ChainPosition(self.expected_seq, self.last_mac if self.genesis_checked else None, self.stand_ins)
        where = f"audit seq {seq} at offset {offset}"
        judgement = judge(position, fact, partition=self.partition, timestamp_ms=timestamp, trusted=self.trusted, where=where)
        for finding in judgement.findings:
            self.add(self._problem(offset, fact, finding, position))
        if judgement.unverified:  # no audit key pinned at all
            self.macs_verified = False
            self.missing_key = key_id
        elif recomputed is not None and (recomputed == mac or macs_equal(recomputed, mac)):
            self.key_ids.add(key_id)
        if judgement.moves:
            self.genesis_checked = True
        advance(position, judgement, seq, mac)
        self.expected_seq, self.stand_ins = position.next_seq, position.stand_ins
        if position.head is not None:
            self.last_mac = position.head
        return judgement.tainted

    def _problem(self, offset: int, fact: tuple[Any, ...], finding: Finding, position: ChainPosition) -> Problem:
        """The report's problem for one finding of the judge."""
        code, seq = finding.code, finding.seq
        if finding.key is not None:
            return finding.key.problem(stream="audit", offset=offset, audit_seq=seq)
        if code == audit_rules.KEY_NOT_PINNED:
            message = (
                f"audit seq {seq} at offset {offset} names key {finding.found}, which is not among the pinned audit keys: "
                "its MAC cannot be checked"
            )
        elif code == audit_rules.MAC_MISMATCH:
            message = (
                f"audit seq {seq} at offset {offset}: MAC mismatch (stored '{finding.expected}', recomputed '{finding.found}')"
            )
        elif code == audit_rules.WRONG_PARTITION:
            message = f"audit record at offset {offset} names partition {fact[4]} (input partition {fact[11]})"
            return Problem(code, message, stream="audit", offset=offset, audit_seq=seq)
        elif code == audit_rules.OUT_OF_ORDER:
            message = f"audit seq {seq} at offset {offset} comes after seq {position.next_seq - 1} (reordered or duplicated)"
            return Problem(code, message, stream="audit", offset=offset, audit_seq=seq)
        elif code == audit_rules.GAP:
            message = f"audit seq jumps from {position.next_seq - 1} to {seq} at offset {offset}: records deleted"
            return Problem(code, message, stream="audit", offset=offset, audit_seq=seq)
        elif code == audit_rules.LINK_BROKEN:
            message = (
                f"audit seq {seq} at offset {offset} does not link to its predecessor "
                f"(prev_mac '{finding.found}', expected '{finding.expected}')"
            )
        else:
            raise AssertionError(f"a judge code the verifier does not phrase: {code}")
        return Problem(
            code,
            message,
            stream="audit",
            offset=offset,
            audit_seq=seq,
            expected=finding.expected or "",
            recomputed=finding.found or "",
        )

    def _account(self, offset: int, seq: int, event: str, input_offset: int) -> None:
        """Every input offset is accounted for by exactly one crossing, in input order.

        One input record gives one crossing (a journal entry, a refusal, a dead
        letter, or the final seal of a run close), plus a periodic seal right
        after an entry. Submissions are written without transactions, so their
        offsets have no gaps (docs/verifier.md).
        """
        last = self.last_input
        self.last_input = input_offset
        previous, self.last_event = self.last_event, event
        if last is None and not self.started and input_offset > self.input_start:
            start = self.input_start
            missing = f"offset {start}" if input_offset == start + 1 else f"offsets {start}..{input_offset - 1}"
            message = (
                f"audit seq {seq} at offset {offset}, the chain's first record, accounts for input offset {input_offset}, "
                f"but the input partition starts at offset {start}: input {missing} produced no output (the scheduler "
                "started past them, e.g. from a reset group offset, or their outputs deleted)"
            )
            self.add(
                Problem(
                    "INPUT_OFFSET_GAP",
                    message,
                    stream="audit",
                    offset=offset,
                    audit_seq=seq,
                    expected=str(start),
                    recomputed=str(input_offset),
                )
            )
            return
        if last is None or input_offset == last + 1:
            return
        if input_offset == last and event == _SEALED and previous in _ENTRY_EVENTS:
            return  # the periodic seal the entry triggered
        if input_offset > last:
            missing = f"offset {last + 1}" if input_offset == last + 2 else f"offsets {last + 1}..{input_offset - 1}"
            code = "INPUT_OFFSET_GAP"
            message = (
                f"audit seq {seq} at offset {offset} accounts for input offset {input_offset} after {last}: "
                f"input {missing} produced no output (submissions skipped or their outputs deleted)"
            )
        elif input_offset == last:
            code = "INPUT_OFFSET_REPEATED"
            message = (
                f"audit seq {seq} at offset {offset} accounts for input offset {input_offset} again: "
                "one input gave more than one crossing"
            )
        else:
            code = "INPUT_OFFSET_OUT_OF_ORDER"
            message = f"audit seq {seq} at offset {offset} accounts for input offset {input_offset} after {last}"
        self.add(
            Problem(
                code, message, stream="audit", offset=offset, audit_seq=seq, expected=str(last + 1), recomputed=str(input_offset)
            )
        )

    def finish_checkpoints(self) -> list[Problem]:
        """After the chain's end: checkpoints beyond it, a missing last one, and what none covers yet (once)."""
        if self.end_found is None:
            self.drain()
            self.end_found = []
            walk = self.checkpoints
            if walk is not None:
                if not self.checkpoints_captured:
                    self.uncovered = self.expected_seq
                else:
                    before = len(self.found)
                    self.uncovered = walk.finish(self.expected_seq, self.last_version == 2)
                    self.end_found = self.found[before:]
                    del self.found[before:], self.found_at[before:]
        return self.end_found

    def check_deadletters(self, source: RecordSource) -> list[Problem]:
        """When the source holds the partition's dead letters: each is one the audit chain mirrors
        (input offset and sha256 of the raw input), and vice versa (once per partition)."""
        if self.deadletter_found is None:
            self.drain()
            found: list[Problem] = []
            self.deadletter_found = found
            self._deadletters(source, found.append)
        return self.deadletter_found

    def _deadletters(self, source: RecordSource, add: Callable[[Problem], None]) -> None:
        if self.partition not in source.partitions("deadletter"):
            if not self.deadletters:
                return
            if isinstance(source, KcatSource):  # a capture lists the topics it was given
                self.deadletters_not_captured = len(self.deadletters)
                return
            seq, offset, input_offset, digest = self.deadletters[0]
            add(
                Problem(
                    "DEADLETTER_STREAM_MISSING",
                    f"the audit chain mirrors {plural(len(self.deadletters), 'dead letter')} on this partition (the first "
                    f"of input offset {input_offset} at audit seq {seq}, offset {offset}), but {source.describe()} has no "
                    "dead-letter stream for it (deleted)",
                    stream="audit",
                    offset=offset,
                    audit_seq=seq,
                    expected=digest,
                )
            )
            return
        expected: dict[tuple[int, str], list[tuple[int, int]]] = {}
        for seq, offset, input_offset, digest in self.deadletters:
            expected.setdefault((input_offset, digest), []).append((seq, offset))
        codes = self.deadletter_codes
        for record in source.records("deadletter", self.partition, headers=False):
            problem = ""
            try:
                letter = self.c.decode(record.value or b"", expect=_DEAD_LETTER).record
            except codec.DecodeError as exc:
                problem = f"does not decode ({exc})"
                digest = sha256_digest(record.value or b"")
            else:
                digest = letter["raw_sha256"]
                raw = letter["raw"]
                if raw and sha256_digest(raw) != digest:
                    problem = f"holds raw bytes hashing to '{sha256_digest(raw)}', not its raw_sha256 '{digest}'"
                elif expected.get((letter["input"]["offset"], digest)):
                    seq, offset = expected[(letter["input"]["offset"], digest)].pop()
                    audited = codes.get(offset)
                    if audited is not None and audited != letter["code"]:
                        add(
                            Problem(
                                "DEADLETTER_CODE_MISMATCH",
                                f"dead letter at offset {record.offset} (input offset {letter['input']['offset']}) has code "
                                f"{letter['code']!r}, but audit seq {seq} (offset {offset}) records reason "
                                f"{audited!r} (altered)",
                                stream="deadletter",
                                offset=record.offset,
                                audit_seq=seq,
                                expected=audited,
                                recomputed=letter["code"],
                            )
                        )
                    continue
                else:
                    problem = f"(input offset {letter['input']['offset']}, raw '{digest}') is mirrored by no audit record"
            add(
                Problem(
                    "DEADLETTER_NOT_AUDITED",
                    f"dead letter at offset {record.offset} {problem} (altered or inserted)",
                    stream="deadletter",
                    offset=record.offset,
                    recomputed=digest,
                )
            )
        for (input_offset, digest), places in sorted(expected.items()):
            for seq, offset in places:
                add(
                    Problem(
                        "DEADLETTER_MISSING",
                        f"audit seq {seq} (offset {offset}) mirrors a dead letter of input offset {input_offset} "
                        f"('{digest}') that the dead-letter topic lacks (deleted)",
                        stream="audit",
                        offset=offset,
                        audit_seq=seq,
                        expected=digest,
                    )
                )


def _deadletter_code(c: codec.Codec, value: bytes | None) -> str | None:
    """The ``reason_code`` of an audit record that mirrors a dead letter (None when it does not decode)."""
    try:
        payload = codec.split_envelope(value or b"")[1][0]
        return str(c.decode(payload, expect=_AUDIT_ENTRY).record["reason_code"])
    except (codec.DecodeError, IndexError, KeyError):
        return None  # the walk already named an audit record that does not decode


def _authenticated(fact: tuple[Any, ...], trusted: TrustedKeys) -> bool:
    """Whether a decoded audit record's payload may be believed: its MAC verifies under a pinned audit key,
    or no audit key is pinned at all (the verdict then says MACs were not verified)."""
    mac, recomputed = fact[2], fact[3]
    if recomputed is None:
        return not trusted.hmac  # a key id that is not pinned: not authenticated
    return recomputed == mac or macs_equal(recomputed, mac)


@dataclass
class _AuditWalk:
    """One run's view of its partition's audit chain: its crossings joined with its journal, in order."""

    part: _PartitionAudit
    run_id: str
    findings: _Findings = field(default_factory=_Findings)
    pending: _AuditEvent | None = None
    flushed: int = 0
    """How many of the partition's findings this run's report holds already."""
    refusals_not_captured: int = 0
    deadletters_not_captured: int = 0

    # -- pulling records ---------------------------------------------------------

    def _next_run_event(self) -> _AuditEvent | None:
        """The next result or seal audit event of this run (refusals are counted and skipped).

        The chain's own findings up to that record join this run's findings first, in
        chain order, as if this run's walk had read the chain alone.
        """
        pending = self.pending
        if pending is not None:
            self.pending = None
            return pending
        event = self.part.next_event(self.run_id)
        if self.part.found:  # (none found: nothing to flush)
            self._flush(len(self.part.found) if event is None else bisect_right(self.part.found_at, event.position))
        return event

    def _flush(self, upto: int) -> None:
        if upto <= self.flushed:
            return
        found = self.part.found
        if self.findings.first is None:
            self.findings.first = found[self.flushed]
            self.findings.further += upto - self.flushed - 1
        else:
            self.findings.further += upto - self.flushed
        self.flushed = upto

    def _add_all(self, problems: list[Problem]) -> None:
        for problem in problems:
            self.findings.add(problem)

    def unchecked(self) -> Iterator[Problem]:
        """What the walk could not check, as named verdicts (exit 6, never a quiet note)."""
        part = self.part
        if not part.macs_verified:
            yield Problem(
                "AUDIT_MACS_NOT_VERIFIED",
                f"no audit key is pinned: the MACs of the partition's audit records (key {part.missing_key}) were not "
                "verified, so refusals, dead letters and audit payloads are unauthenticated (add the audit key to --trusted-keys)",
            )
        if not part.checkpoints_captured and part.v2_records:
            yield Problem(
                "CHECKPOINTS_NOT_CAPTURED",
                f"the partition's audit chain was written by a scheduler that signs checkpoints, but the capture has no "
                f"checkpoints topic: the {plural(part.expected_seq, 'audit record')} were not checked against a signed "
                "checkpoint, so a truncated tail would not show (add a kcat capture of the checkpoints topic)",
            )
        if self.refusals_not_captured:
            yield Problem(
                "REFUSALS_NOT_CAPTURED",
                f"the audit chain mirrors {plural(self.refusals_not_captured, 'refusal')} of this run, but the capture has "
                "no refusals topic: they were not checked (add a kcat capture of the refusals topic)",
            )
        if self.deadletters_not_captured:
            yield Problem(
                "DEADLETTERS_NOT_CAPTURED",
                f"the audit chain mirrors {plural(self.deadletters_not_captured, 'dead letter')} on this partition, but "
                "the capture has no dead-letter topic: they were not checked (add a kcat capture of the dead-letter topic)",
            )

    # -- the join ------------------------------------------------------------------

    def expect_result(self, journal_seq: int, entry_hash: str, offset: int, *, recomputed: str | None = None) -> None:
        """Join journal entry ``journal_seq`` with its audit record.

        ``entry_hash`` is the stored hash; ``recomputed`` the hash of the stored
        payload. They differ only for an entry whose break the chain verdict
        already names; the audit agrees when it recorded either of them.
        """
        recomputed = recomputed or entry_hash
        while True:
            event = self._next_run_event()
            if event is None:
                self._disagree(
                    "AUDIT_MISSING_ENTRY",
                    f"journal entry seq {journal_seq} (offset {offset}) has no audit record: the audit chain ends first",
                    stream="journal",
                    offset=offset,
                    seq=journal_seq,
                )
                return
            if event.event != _RESULT or event.journal_seq > journal_seq:
                self.pending = event
                self._disagree(
                    "AUDIT_MISSING_ENTRY",
                    f"journal entry seq {journal_seq} (offset {offset}) has no audit record (inserted into the journal, or its audit record deleted)",
                    stream="journal",
                    offset=offset,
                    seq=journal_seq,
                )
                return
            if event.journal_seq < journal_seq:
                self._journal_lacks(event)
                continue
            if event.record_hash not in (entry_hash, recomputed) and not event.tainted:
                self._disagree(
                    "AUDIT_DISAGREES",
                    f"journal seq {journal_seq} (offset {offset}) hashes to '{recomputed}' but audit seq {event.seq} recorded '{event.record_hash}'",
                    stream="journal",
                    offset=offset,
                    seq=journal_seq,
                    audit_seq=event.seq,
                    expected=event.record_hash,
                    recomputed=recomputed,
                )
            return

    def expect_seal(self, seal: dict[str, Any], value_hash: str, offset: int) -> None:
        while True:
            event = self._next_run_event()
            if event is None:
                self._disagree(
                    "AUDIT_TRUNCATED",
                    f"seal at offset {offset} commits audit seq {seal['audit_seq']} but the audit chain ends at seq {self.part.expected_seq - 1} "
                    "(audit tail truncated)",
                    stream="journal",
                    offset=offset,
                    seq=seal["entry_count"],
                    audit_seq=seal["audit_seq"],
                )
                return
            if event.event == _RESULT:
                self._journal_lacks(event)
                continue
            if event.tainted:
                return
            if event.record_hash != value_hash:
                self._disagree(
                    "AUDIT_DISAGREES",
                    f"seal at offset {offset} hashes to '{value_hash}' but audit seq {event.seq} recorded '{event.record_hash}'",
                    stream="journal",
                    offset=offset,
                    seq=seal["entry_count"],
                    audit_seq=event.seq,
                    expected=event.record_hash,
                    recomputed=value_hash,
                )
            elif event.seq != seal["audit_seq"] or not macs_equal(event.prev_mac, seal["audit_head"]):
                self._disagree(
                    "SEAL_AUDIT_HEAD_MISMATCH",
                    f"seal at offset {offset} commits audit seq {seal['audit_seq']} head '{seal['audit_head']}', "
                    f"but its audit record is seq {event.seq} after '{event.prev_mac}'",
                    stream="journal",
                    offset=offset,
                    seq=seal["entry_count"],
                    audit_seq=event.seq,
                    expected=seal["audit_head"],
                    recomputed=event.prev_mac,
                )
            elif seal["final"] and event.version == 2 and self.part.checkpoints is not None and self.part.checkpoints_captured:
                # the step that wrote this final seal ended with a checkpoint over it
                missing = final_seal_checkpoint_missing(self.run_id, event.seq, event.offset, event.checkpoints_seen)
                if missing is not None:
                    self.findings.add(missing)
            return

    def finish_checkpoints(self) -> None:
        """After ``finish``: checkpoints beyond the chain's end, a missing last one, and what none covers yet."""
        self._add_all(self.part.finish_checkpoints())

    def finish(self, journal_entries: int) -> bool:
        """Drain the audit chain; crossings of this run left over mean the journal lost its tail (returns whether any)."""
        first: _AuditEvent | None = None
        count = 0
        seen = False
        while (event := self._next_run_event()) is not None:
            seen = True
            if event.tainted:
                continue
            count += 1
            first = first or event
        if first is not None:
            what = f"journal seq {first.journal_seq}" if first.event == _RESULT else "a seal"
            self._disagree(
                "JOURNAL_TRUNCATED",
                f"the audit chain mirrors {count} crossing(s) of this run after journal seq {journal_entries - 1}, starting with "
                f"{what} (audit seq {first.seq}): the journal lost its tail",
                stream="audit",
                offset=first.offset,
                seq=first.journal_seq,
                audit_seq=first.seq,
            )
        return seen

    def check_refusals(self, source: RecordSource, records: list[_RefusalRecord]) -> None:
        """Every refusal record of the run must be one the audit chain mirrors, and vice versa.

        ``records`` are the run's refusal records, (refusals partition, offset, sha256 of the value),
        in partition and offset order (``_refusal_records``)."""
        refusal_hashes = self.part.run(self.run_id).refusal_hashes
        partitions = source.partitions("refusals")
        if not partitions:
            if not refusal_hashes:
                return
            if isinstance(source, KcatSource):  # a capture lists the topics it was given
                self.refusals_not_captured = len(refusal_hashes)
                return
            seq, offset, digest = refusal_hashes[0]
            self.findings.add(
                Problem(
                    "REFUSALS_STREAM_MISSING",
                    f"the audit chain mirrors {plural(len(refusal_hashes), 'refusal')} of this run (the first at audit "
                    f"seq {seq}, offset {offset}), but {source.describe()} has no refusals stream (deleted)",
                    stream="audit",
                    offset=offset,
                    audit_seq=seq,
                    expected=digest,
                )
            )
            return
        expected: dict[str, list[tuple[int, int]]] = {}
        for seq, offset, digest in refusal_hashes:
            expected.setdefault(digest, []).append((seq, offset))
        for partition, record_offset, digest, _ in records:
            if expected.get(digest):
                expected[digest].pop()
                continue
            self.findings.add(
                Problem(
                    "REFUSAL_NOT_AUDITED",
                    f"refusal record at offset {record_offset} (refusals partition {partition}) hashes to '{digest}', "
                    "which no audit record of this run mirrors (altered or inserted)",
                    stream="refusals",
                    offset=record_offset,
                    recomputed=digest,
                )
            )
        for digest, places in sorted(expected.items()):
            for seq, offset in places:
                self.findings.add(
                    Problem(
                        "REFUSAL_MISSING",
                        f"audit seq {seq} (offset {offset}) mirrors a refusal '{digest}' that the refusals topic lacks (deleted)",
                        stream="audit",
                        offset=offset,
                        audit_seq=seq,
                        expected=digest,
                    )
                )

    def check_deadletters(self, source: RecordSource) -> None:
        """The partition's dead letters against the chain (``_PartitionAudit.check_deadletters``)."""
        self._add_all(self.part.check_deadletters(source))
        self.deadletters_not_captured = self.part.deadletters_not_captured

    def _journal_lacks(self, event: _AuditEvent) -> None:
        """An audit record of a result the journal skipped (met while joining a later entry or a seal)."""
        self._disagree(
            "JOURNAL_MISSING_ENTRY",
            f"audit seq {event.seq} (offset {event.offset}) mirrors journal seq {event.journal_seq}, which the journal lacks",
            # the journal has no record to point at: name the audit record that proves the loss
            stream="audit",
            offset=event.offset,
            seq=event.journal_seq,
            audit_seq=event.seq,
            tainted=event.tainted,
        )

    def _disagree(
        self,
        code: str,
        message: str,
        *,
        stream: str,
        offset: int,
        seq: int,
        audit_seq: int | None = None,
        expected: str = "",
        recomputed: str = "",
        tainted: bool = False,
    ) -> None:
        """A journal/audit disagreement, unless the audit record involved is already reported as tampered."""
        if tainted:
            return
        self.findings.add(
            Problem(
                code,
                message,
                stream=stream,
                offset=offset,
                seq=seq,
                audit_seq=audit_seq,
                expected=expected,
                recomputed=recomputed,
            )
        )

    def verdict(self) -> AuditVerdict:
        part = self.part
        notes: list[str] = []
        if not part.macs_verified:
            notes.insert(0, f"MACs not verified: audit key {part.missing_key} is not pinned (add it to --trusted-keys)")
        note = "; ".join(notes)
        crossings = part.run(self.run_id)
        return AuditVerdict(
            records=part.count,
            run_records=crossings.records,
            macs_verified=part.macs_verified and part.count > 0,
            key_ids=tuple(sorted(part.key_ids)),
            refusals=crossings.refusals,
            checkpoints=part.checkpoints.verified if part.checkpoints is not None else 0,
            uncovered=part.uncovered,
            problem=self.findings.first,
            further_problems=self.findings.further,
            note=note,
        )


# ---------------------------------------------------------------------------
# 4. stages
# ---------------------------------------------------------------------------


_UNKNOWN: Any = object()


def _stages(
    c: codec.Codec,
    facts: Facts,
    source: RecordSource,
    partition: int,
    key: bytes,
    cas: BlobStore | None,
    trusted: TrustedKeys,
    why_unchecked: str,
) -> Iterator[StageVerdict]:
    builder = _StageBuilder(c, facts, key.decode(), cas, trusted, why_unchecked)
    for rows in _row_chunks(source, "journal", partition):
        mine = [row for row in rows if row[2] == key]
        if mine:
            yield from builder.feed(mine)
    yield from builder.finish()


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
    from verifier.browser_replay import DivergenceReason, replay_steps, step_input_from_entry

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
    entry's producer, in force at the record's timestamp (``verifier.keyuse``)."""
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
