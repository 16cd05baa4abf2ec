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
   force at the record's timestamp (``bernstein.verifier.keyuse``); older entries are
   counted, not reported. Every key must also be pinned for the purpose it
   was used for, and in force when it was used (seals, checkpoints, audit
   records, lineage entries, data/ops receipts).
3. Audit. The partition's HMAC chain must recompute with the pinned audit
   key, count from 0 without gaps, link each record to its predecessor, and
   agree with the journal crossing by crossing (entry hashes, seals). Audit
   records of this run that the journal lacks name a truncated journal. The
   partition's signed checkpoints must verify and the chain must reach each
   one's length with exactly its head (``bernstein.verifier.checkpoints``); the audit
   records after the last one are counted as not covered yet.
4. Stages. For each ``activity.result`` entry: recompute the evidence-set
   hash from the pinned observation hashes; where a CAS is given, reattach and
   re-hash every observation and the artifact (missing and changed are
   different verdicts); then run the modality check for its kind.

Keys come only from ``trusted`` (pinned); a key found in the data is never
used. No step touches the network unless the source is a live cluster.

Each step has its module: 1-2 ``bernstein.verifier.walks.chain``, 3 ``bernstein.verifier.walks.partition``
(the partition's audit chain) and ``bernstein.verifier.walks.audit`` (one run's join with it), 4
``bernstein.verifier.stages``; this module finds the run, feeds the walks and assembles the report.

Every decision is made in Python, in these modules; the byte work on each record (splitting
envelopes, reading heads, recomputing hashes and MACs, decoding stage fields)
is done a batch of records at a time by ``bernstein.verifier.facts``, in Rust when the
``bernstein_native`` extension is built, with the same results either way.
With it, the records the walks find plain (an audit record whose MAC verifies
under a key in force and that links on; a journal entry next in its chain,
joined with its audit crossing, its producer signature verified under a key in
force) are also advanced in Rust (``native/src/walk.rs``), and the first record
that is not plain is checked in Python: what the walks' modules say is the reference.
Memory stays flat: records are read, and facts computed, a chunk at a time.

``verify_many(runs, source, ...)`` verifies many runs (every run with ``runs``
None) reading each partition once: one journal pass feeds every run's walks,
and the partition's audit chain is read once alongside (``bernstein.verifier.walks.partition``),
its own findings kept with their position so that each run's report is the
one ``verify`` gives for it alone. Evidence blobs of a directory store are
re-hashed ahead, a batch of stages at a time, on every core
(``bernstein.verifier.blobs``); the next chunks' producer signatures are verified while
the current chunk is checked, on both cores (``_signed_ahead``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from bernstein.schemas import codec
from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import BlobStore
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier import facts as _facts
from bernstein.verifier.blobs import FailFast, HashedAhead
from bernstein.verifier.checkpoints import CheckpointWalk
from bernstein.verifier.facts import A_RECORD, Facts, Row
from bernstein.verifier.keyuse import KeyLedger
from bernstein.verifier.report import KeysUsed, Problem, RefusalSeen, RunHeader, RunReport, StageVerdict
from bernstein.verifier.sources import DumpProblem, DumpSource, KcatSource, RecordSource, StoredRecord
from bernstein.verifier.stages import _StageBuilder
from bernstein.verifier.tlog import LeafRecorder
from bernstein.verifier.walks.audit import RefusalRecord, _AuditWalk
from bernstein.verifier.walks.chain import _ChainWalk, producer_keys
from bernstein.verifier.walks.partition import JOIN_EVENTS, AuditRow, _PartitionAudit, is_authenticated

_CHUNK: Final = 256
"""Records per batch for sources that only offer ``records`` (dumps give their own chunks)."""

_JOURNAL = frozenset({codec.JOURNAL_RECORD, codec.SEAL_RECORD})
_AUDIT_RECORD = frozenset({codec.AUDIT_RECORD})
_AUDIT_V2_HEADER = codec.default_codec().schema(codec.AUDIT_RECORD_V2).header


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

    # 1-3. chain, seals, producers and audit: one pass over the run's journal, joined with its partition's audit chain
    facts = _facts.current()
    walk = _RunWalk(c, run_id, partition, trusted, _partition_audit(c, source, partition, facts, trusted, frozenset({run_id})))
    recorder = walk.audit.part.leaves = LeafRecorder()
    for mine, signed in _signed_ahead(
        recorder.rows(_row_chunks(source, "journal", partition)), lambda row: row[2] == key, facts, trusted
    ):
        walk.feed(facts, mine, signed)
    if walk.chain.records == 0:
        return _not_found(run_id, source, _audit_mentions(source, run_id, trusted)), iter(())
    header = walk.header(source, _refusal_records(source, {key}).get(key, []), cas=cas, records_only=records_only)
    header = _finish_header(header, walk, source)
    # 4. stages, lazily
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
        part.leaves = LeafRecorder()
        chunks = part.leaves.rows(_row_chunks(source, "journal", partition)) if partition in journal else iter(())
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
        self, source: RecordSource, refusals: list[RefusalRecord], *, cas: BlobStore | None, records_only: bool
    ) -> RunHeader:
        """The run's header once its journal is read: the audit chain is drained, refusals and dead letters checked."""
        audit, chain = self.audit, self.chain
        truncated = audit.finish(chain.expected_seq)
        own = truncated or any(f.first is not None for f in (chain.chain, chain.seals, chain.producers, audit.findings))
        audit.finish_checkpoints(own_problems=own)
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
                producer=producer_keys(self.ledger),
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

    ``producer_facts`` verifies the Ed25519 signatures in batches without the GIL (``bernstein.verifier.facts``);
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
    """Every finding of one partition's audit chain, in the order met: its records (``bernstein.verifier.audit_chain``), input
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


def _refusal_records(source: RecordSource, keys: set[bytes] | None) -> dict[bytes, list[RefusalRecord]]:
    """Each run's refusal records (every run for ``keys`` None), every refusals partition read once, in
    partition and offset order."""
    c = codec.default_codec()
    found: dict[bytes, list[RefusalRecord]] = {}
    for partition in source.partitions("refusals"):
        for rows in _row_chunks(source, "refusals", partition):
            for row in rows:
                key = row[2]
                if key is not None and (keys is None or key in keys):
                    value = row[3] or b""
                    seen = _refusal_seen(c, partition, row[0], value)
                    found.setdefault(key, []).append(RefusalRecord(partition, row[0], sha256_digest(value), seen))
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
    """The header with the damage the source found in the files its verification reads (``bernstein.verifier.sources.DumpProblem``).

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
                if fact[0] == A_RECORD and fact[8] == run_id and fact[7] in JOIN_EVENTS and is_authenticated(fact, trusted):
                    count += 1
    return count


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
