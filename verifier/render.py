"""Render a verification report; nothing here decides a verdict.

The human format keeps the seed's lines exactly::

    Activity verify run=run-42
      OK research-0 [research] (evidence reattached, 2 citations resolved)
        cite OK claim=c1 (1 checked)
    verified -- every activity reconstructs from the journal.

and adds, before the stages, one line each for the chain, the seals and the
audit chain, in the same ``OK <subject> (...)`` / ``MISMATCH <subject> -- <reason>``
grammar. Checks that could not be run get ``NOT CHECKED <code> -- <why>``
lines, an open run an ``OPEN seal`` line, a computer-use session without an
accepted result an ``INCOMPLETE`` line. The last line always names the
verdict (docs/verifier.md lists them with their exit codes).

Every line is escaped before it is written (``escape``): record fields are
attacker-controlled, and a control character, ANSI escape or newline in a
stage id must not be able to rewrite or forge a line of the report. Output is
a pure function of the report: two runs over the same data print the same
bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from bernstein.substrate.text import plural
from bernstein.verifier.report import (
    EXIT_MISMATCH,
    EXIT_NOT_FOUND,
    EXIT_NOT_FULLY_VERIFIED,
    EXIT_OPEN,
    EXIT_VERIFIED,
    AuditVerdict,
    ChainVerdict,
    HeaderCheckVerdict,
    KeysUsed,
    Problem,
    ProducerVerdict,
    RefusalSeen,
    RunHeader,
    SealVerdict,
    StageTally,
    StageVerdict,
    exit_code_for,
    verdict_name,
)

VERIFIED_LINE = "verified -- every activity reconstructs from the journal."
RECORDS_ONLY = "RECORDS_ONLY"


def escape(line: str) -> str:
    """``line`` with every non-printable character (controls, ANSI escapes, line and bidi
    separators) written as a Python escape, so data cannot add, erase or disguise a line."""
    if line.isprintable():
        return line
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in line)


def header_lines(header: RunHeader) -> Iterator[str]:
    yield f"Activity verify run={header.run_id}"
    if not header.found:
        yield f"NO ACTIVITY -- {header.reason}"
        return
    for problem in header.dump_problems:
        yield f"  MISMATCH dump -- {problem.message}"
    if header.chain is not None:
        yield _chain_line(header.chain)
    if header.seal is not None:
        yield _seal_line(header.seal, header.open)
    if header.audit is not None:
        yield _audit_line(header.audit)
    if header.producers is not None:
        yield _producers_line(header.producers, header.keys)
    for refusal in header.refusals:
        yield _refusal_line(refusal)
    for problem in header.unchecked:
        yield f"  NOT CHECKED {problem.code} -- {problem.message}"


def _mismatch_line(subject: str, problem: Problem, further: int) -> str:
    """The line of a failed chain, seal or audit check: its first problem and a count of the rest."""
    return f"  MISMATCH {subject} -- {problem.message}" + (f" (+{plural(further, 'further problem')})" if further else "")


def _chain_line(chain: ChainVerdict) -> str:
    if chain.problem is not None:
        return _mismatch_line("chain", chain.problem, chain.further_problems)
    return f"  OK chain ({plural(chain.entries, 'entry', 'entries')} on partition {chain.partition}, head {chain.head})"


def _seal_line(seal: SealVerdict, is_open: bool = False) -> str:
    if seal.problem is not None:
        return _mismatch_line("seal", seal.problem, seal.further_problems)
    keys = ", ".join(seal.key_ids)
    if is_open:
        signed = f", {plural(seal.seals, 'periodic seal')} signed by pinned key {keys}" if seal.seals else ""
        return f"  OPEN seal (no final seal yet: the last valid seal covers {plural(seal.covered, 'entry', 'entries')}{signed})"
    closed = f", closed by {author(seal.closed_by, seal.closed_by_key)}" if seal.closed_by else ""
    return (
        f"  OK seal (final seal covers {plural(seal.covered, 'entry', 'entries')}, {plural(seal.seals, 'seal')} signed by "
        f"pinned key {keys}{closed})"
    )


def _audit_line(audit: AuditVerdict) -> str:
    if audit.problem is not None:
        return _mismatch_line("audit", audit.problem, audit.further_problems)
    macs = f"MACs verified with pinned key {', '.join(audit.key_ids)}" if audit.macs_verified else ""
    detail = "; ".join(part for part in (macs, audit.note) if part)
    refusals = f", {plural(audit.refusals, 'refusal')}" if audit.refusals else ""
    checkpoints = (
        f"{plural(audit.checkpoints, 'signed checkpoint')}, {plural(audit.uncovered, 'record')} not covered by a checkpoint yet"
    )
    if audit.tree_heads:
        checkpoints += (
            f"; its Merkle log of {plural(audit.tree_leaves or 0, 'leaf', 'leaves')} reproduces "
            f"{plural(audit.tree_heads, 'signed tree head')}"
        )
    return (
        f"  OK audit ({plural(audit.records, 'record')} on the partition, {detail}; "
        f"{audit.run_records} of this run agree with the journal{refusals}; {checkpoints})"
    )


def _producers_line(producers: ProducerVerdict, keys: KeysUsed | None) -> str:
    if producers.problem is not None:
        return _mismatch_line("producers", producers.problem, producers.further_problems)
    signed = f"{plural(producers.signed, 'producer signature')} verified with pinned producer keys"
    legacy = f", {plural(producers.legacy, 'entry predates', 'entries predate')} producer signatures" if producers.legacy else ""
    return f"  OK producers ({signed}{legacy}; keys: {keys_summary(keys or KeysUsed())})"


def _refusal_line(refusal: RefusalSeen) -> str:
    """``REFUSED CODE stage S [kind] (refusals partition P, offset N) -- by NAME (key K)``: who sent what the
    scheduler refused; "claimed by" when it was refused before its signature verified."""
    stage = f" stage {refusal.stage_id}" if refusal.stage_id else ""
    kind = f" [{refusal.kind}]" if refusal.kind else ""
    where = f"(refusals partition {refusal.partition}, offset {refusal.offset})"
    if refusal.authenticated is None:
        sender = "sender not recorded (a Refusal.v1)"
    elif refusal.authenticated:
        sender = f"by {author(refusal.producer, refusal.key_id)}"
    else:
        key = f"key {refusal.key_id}" if refusal.key_id else "unsigned"
        sender = f"claimed by {refusal.producer} ({key}; not authenticated: refused before its signature verified)"
    return f"  REFUSED {refusal.code}{stage}{kind} {where} -- {sender}"


def keys_summary(keys: KeysUsed) -> str:
    """Which key ids signed or MACed what, in one phrase: ``seal K; checkpoint K; audit A; producer P (name)``."""
    parts = [
        f"{what} {', '.join(ids) if ids else 'none'}"
        for what, ids in (("seal", keys.seal), ("checkpoint", keys.checkpoint), ("audit", keys.audit))
    ]
    producer = ", ".join(f"{k.key_id} ({k.producer})" for k in keys.producer) or "none"
    return "; ".join([*parts, f"producer {producer}"])


def stage_lines(stage: StageVerdict) -> Iterator[str]:
    notes = f" ({', '.join(stage.notes)})" if stage.notes else ""
    if stage.failed:
        yield f"  MISMATCH {stage.stage_id} [{stage.kind}] -- {stage.reason}"
    elif stage.unchecked:
        yield f"  NOT CHECKED {stage.stage_id} [{stage.kind}] -- {stage.unchecked}"
    elif stage.incomplete:
        yield f"  INCOMPLETE {stage.stage_id} [{stage.kind}]{notes} -- {stage.reason}"
    else:
        yield f"  OK {stage.stage_id} [{stage.kind}]{notes}"
    for detail in stage.details:
        yield f"    {detail.text}"
    if stage.producer:  # after the details: the seed's stage block stays as the seed writes it
        yield f"    by {author(stage.producer, stage.key_id)}"


def author(producer: str, key_id: str) -> str:
    """``alice@agents (key K)``: who a stage or a close names as its maker, and the key that signed it."""
    return f"{producer} (key {key_id})" if key_id else f"{producer} (unsigned: predates producer signatures)"


def final_line(header: RunHeader, tally: StageTally, code: int) -> str:
    """The last line of the text report: the verdict in words."""
    if code == EXIT_VERIFIED:
        if tally.incomplete:
            return f"verified -- every activity reconstructs from the journal; {plural(tally.incomplete, 'incomplete session')} verified as far as it went."
        return VERIFIED_LINE
    if code == EXIT_MISMATCH:
        problems = (
            tally.failed
            + sum(1 for v in (header.chain, header.seal, header.audit, header.producers) if v is not None and not v.ok)
            + len(header.dump_problems)
        )
        return f"mismatch -- {plural(problems, 'check')} failed; the run does not reconstruct."
    if code == EXIT_NOT_FULLY_VERIFIED:
        codes = [p.code for p in header.unchecked]
        if codes == [RECORDS_ONLY]:
            return "records verified -- evidence NOT checked (--records-only): no blob was reattached or re-hashed; not a pass."
        what = ", ".join(codes) if codes else plural(tally.unchecked, "stage")
        return f"not fully verified -- not checked: {what}; nothing that was checked failed, but this is not a pass."
    if code == EXIT_OPEN:
        entries = header.chain.entries if header.chain is not None else 0
        return f"open -- run is not sealed yet; {plural(entries, 'entry', 'entries')} verified so far."
    return f"NO ACTIVITY -- {header.reason or 'run journal holds no activity.result entries'}"


def render_text(header: RunHeader, stages: Iterable[StageVerdict], out: TextIO) -> int:
    """Print the report as it streams; return the exit code."""
    for line in header_lines(header):
        out.write(escape(line) + "\n")
    tally = StageTally()
    if not header.found:
        return exit_code_for(header, tally)
    for stage in stages:
        tally.add(stage)
        for line in stage_lines(stage):
            out.write(escape(line) + "\n")
    code = exit_code_for(header, tally)
    out.write(escape(final_line(header, tally, code)) + "\n")
    return code


def render_json(header: RunHeader, stages: Iterable[StageVerdict], out: TextIO) -> int:
    """Print the report as one JSON document (stages streamed into the array)."""
    document, code = report_document(header, stages)
    out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return code


def report_document(header: RunHeader, stages: Iterable[StageVerdict]) -> tuple[dict[str, Any], int]:
    """The --json document of one run's report, and its exit code."""
    stage_list: list[dict[str, Any]] = []
    tally = StageTally()
    for stage in stages:
        tally.add(stage)
        stage_list.append(stage.to_json())
    code = exit_code_for(header, tally)
    document = {
        "run": header.run_id,
        "source": header.source,
        "found": header.found,
        "ok": code == 0,
        "exit_code": code,
        "verdict": verdict_name(header, code),
        "open": header.open,
        "records_only": header.records_only,
        "reason": header.reason,
        "dump_problems": [p.to_json() for p in header.dump_problems],
        "unchecked": [p.to_json() for p in header.unchecked],
        "chain": _section(header.chain),
        "seal": _section(header.seal),
        "audit": _section(header.audit),
        "producers": _section(header.producers),
        "keys": None if header.keys is None else header.keys.to_json(),
        "refusals": [r.to_json() for r in header.refusals],
        "stages": stage_list,
    }
    return document, code


WORST_FIRST = (EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_NOT_FULLY_VERIFIED, EXIT_OPEN, EXIT_VERIFIED)
"""Exit codes of many runs, worst first: the command exits with the worst of its runs' codes."""


def worst_code(codes: Iterable[int]) -> int:
    """The worst of several runs' exit codes (``WORST_FIRST``); 0 for none."""
    found = set(codes)
    return next((code for code in WORST_FIRST if code in found), EXIT_VERIFIED)


def summary_line(runs: list[tuple[str, int, str]]) -> str:
    """The last line of a many-run text report: how many runs got each verdict, the runs that did not verify."""
    counts: dict[str, int] = {}
    for _, _, verdict in runs:
        counts[verdict] = counts.get(verdict, 0) + 1
    order = ("verified", "open", "not_fully_verified", "no_activity", "not_found", "mismatch")
    parts = [f"{counts[name]} {name.replace('_', ' ')}" for name in order if name in counts]
    line = f"summary -- {plural(len(runs), 'run')}: {', '.join(parts) or 'none'}"
    failed = [run for run, code, _ in runs if code == EXIT_MISMATCH]
    if failed:
        line += f"; mismatch: {', '.join(failed)}"
    return f"{line}; exit {worst_code(code for _, code, _ in runs)}"


def render_many_text(reports: Iterable[tuple[RunHeader, Iterable[StageVerdict]]], out: TextIO) -> int:
    """Each run's report as ``render_text`` prints it, a blank line between them, then the summary line."""
    runs: list[tuple[str, int, str]] = []
    for header, stages in reports:
        if runs:
            out.write("\n")
        code = render_text(header, stages, out)
        runs.append((header.run_id, code, verdict_name(header, code)))
    out.write(escape(summary_line(runs)) + "\n")
    return worst_code(code for _, code, _ in runs)


def render_many_json(reports: Iterable[tuple[RunHeader, Iterable[StageVerdict]]], out: TextIO) -> int:
    """A JSON list of the runs' documents (each as ``render_json`` prints it); returns the worst exit code."""
    documents = []
    codes = []
    for header, stages in reports:
        document, code = report_document(header, stages)
        documents.append(document)
        codes.append(code)
    out.write(json.dumps(documents, indent=2, sort_keys=True) + "\n")
    return worst_code(codes)


def _section(verdict: HeaderCheckVerdict | None) -> dict[str, Any] | None:
    return None if verdict is None else verdict.to_json()
