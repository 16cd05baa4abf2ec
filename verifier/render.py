"""Render a verification report; nothing here decides a verdict.

The human format keeps the seed's lines exactly::

    Activity verify run=run-42
      OK research-0 [research] (evidence reattached, 2 citations resolved)
        cite OK claim=c1 (1 checked)
    verified -- every activity reconstructs from the journal.

and adds, before the stages, one line each for the chain, the seals and the
audit chain, in the same ``OK <subject> (...)`` / ``MISMATCH <subject> -- <reason>``
grammar. Output is a pure function of the report: two runs over the same
data print the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from substrate.text import plural
from verifier.report import (
    AuditVerdict,
    ChainVerdict,
    HeaderCheckVerdict,
    Problem,
    RunHeader,
    SealVerdict,
    StageVerdict,
    exit_code_for,
)


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
        yield _seal_line(header.seal)
    if header.audit is not None:
        yield _audit_line(header.audit)


def _mismatch_line(subject: str, problem: Problem, further: int) -> str:
    """The line of a failed chain, seal or audit check: its first problem and a count of the rest."""
    return f"  MISMATCH {subject} -- {problem.message}" + (f" (+{plural(further, 'further problem')})" if further else "")


def _chain_line(chain: ChainVerdict) -> str:
    if chain.problem is not None:
        return _mismatch_line("chain", chain.problem, chain.further_problems)
    return f"  OK chain ({plural(chain.entries, 'entry', 'entries')} on partition {chain.partition}, head {chain.head})"


def _seal_line(seal: SealVerdict) -> str:
    if seal.problem is not None:
        return _mismatch_line("seal", seal.problem, seal.further_problems)
    keys = ", ".join(seal.key_ids)
    return f"  OK seal (final seal covers {plural(seal.covered, 'entry', 'entries')}, {plural(seal.seals, 'seal')} signed by pinned key {keys})"


def _audit_line(audit: AuditVerdict) -> str:
    if audit.problem is not None:
        return _mismatch_line("audit", audit.problem, audit.further_problems)
    macs = f"MACs verified with pinned key {', '.join(audit.key_ids)}" if audit.macs_verified else ""
    detail = "; ".join(part for part in (macs, audit.note) if part)
    refusals = f", {plural(audit.refusals, 'refusal')}" if audit.refusals else ""
    return (
        f"  OK audit ({plural(audit.records, 'record')} on the partition, {detail}; "
        f"{audit.run_records} of this run agree with the journal{refusals})"
    )


def stage_lines(stage: StageVerdict) -> Iterator[str]:
    if stage.ok:
        notes = f" ({', '.join(stage.notes)})" if stage.notes else ""
        yield f"  OK {stage.stage_id} [{stage.kind}]{notes}"
    else:
        yield f"  MISMATCH {stage.stage_id} [{stage.kind}] -- {stage.reason}"
    for detail in stage.details:
        yield f"    {detail.text}"


def render_text(header: RunHeader, stages: Iterable[StageVerdict], out: TextIO) -> int:
    """Print the report as it streams; return the exit code."""
    for line in header_lines(header):
        out.write(line + "\n")
    if not header.found:
        return exit_code_for(header, True, 0)
    count = 0
    failed = 0
    for stage in stages:
        count += 1
        failed += 0 if stage.ok else 1
        for line in stage_lines(stage):
            out.write(line + "\n")
    code = exit_code_for(header, failed == 0, count)
    if code == 0:
        out.write("verified -- every activity reconstructs from the journal.\n")
    elif count == 0 and header.ok:
        out.write(f"NO ACTIVITY -- {header.reason or 'run journal holds no activity.result entries'}\n")
    else:
        problems = (
            failed
            + sum(1 for v in (header.chain, header.seal, header.audit) if v is not None and not v.ok)
            + len(header.dump_problems)
        )
        out.write(f"mismatch -- {plural(problems, 'check')} failed; the run does not reconstruct.\n")
    return code


def render_json(header: RunHeader, stages: Iterable[StageVerdict], out: TextIO) -> int:
    """Print the report as one JSON document (stages streamed into the array)."""
    stage_list: list[dict[str, Any]] = []
    failed = 0
    for stage in stages:
        failed += 0 if stage.ok else 1
        stage_list.append(stage.to_json())
    code = exit_code_for(header, failed == 0, len(stage_list))
    document = {
        "run": header.run_id,
        "source": header.source,
        "found": header.found,
        "ok": code == 0,
        "exit_code": code,
        "reason": header.reason,
        "dump_problems": [p.to_json() for p in header.dump_problems],
        "chain": _section(header.chain),
        "seal": _section(header.seal),
        "audit": _section(header.audit),
        "stages": stage_list,
    }
    out.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return code


def _section(verdict: HeaderCheckVerdict | None) -> dict[str, Any] | None:
    return None if verdict is None else verdict.to_json()
