"""``bernstein research run``: fetch sources, build a cited report, publish it as one activity.

    bernstein research run --query "what changed in Quill 2.0" \\
        --source https://example.org/notes --source https://example.org/perf \\
        --run run-42 --stage research-0 [--role scout] [--max-fetches 8] \\
        [--max-cost N --cost-per-fetch N] [--max-bytes N] [--allow-private] \\
        [--synthesiser extractive|module:attr] [--producer-keys DIR] [--json]

Exit codes: 0 published; 3 refused at the boundary (nothing published), a
budget overrun or fetch failure (the refused / failed result IS published so
the stop is journalled), or a usage / service error. Only ``_handle`` touches
Kafka and S3; ``execute`` takes the store and a publish function, so it is
unit-tested with a directory store.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from bernstein.producers.activity import ActivityRejected, ActivityResult
from bernstein.producers.identity import add_producer_flags, producer_from_args
from bernstein.producers.research.budget import ResearchBudget
from bernstein.producers.research.errors import ResearchAborted, ResearchBudgetExceeded
from bernstein.producers.research.fetch import DEFAULT_TIMEOUT, FetchFn, make_fetch
from bernstein.producers.research.synthesis import load_synthesiser
from bernstein.producers.research.worker import ResearchWorker
from bernstein.substrate.cas import BlobStore
from bernstein.substrate.cli_args import command_group, non_negative_int
from bernstein.substrate.exit_codes import EXIT_OK, EXIT_REFUSED
from bernstein.substrate.text import plural

Publish = Callable[[ActivityResult], str]
"""Publishes a result for the command's run/stage/role; returns where it landed (for the summary)."""


def register(subparsers: Any) -> None:
    commands = command_group(
        subparsers, "research", help="research activities: cited reports over fetched pages", metavar="<research-command>"
    )
    run = commands.add_parser(
        "run",
        help="fetch sources, build a cited report and publish it as one activity",
        description="Fetch every source (content-addressed into the CAS), synthesise claims quoting the fetched "
        "pages, refuse any claim whose quote is not in its page, and publish the report as a research activity.",
    )
    run.add_argument("--query", required=True, help="the research question")
    run.add_argument("--source", action="append", required=True, metavar="URL", help="a source URL (repeatable, order kept)")
    run.add_argument("--run", dest="run_id", required=True, metavar="RUN", help="run id to publish into")
    run.add_argument("--stage", dest="stage_id", required=True, metavar="STAGE", help="stage id of this activity")
    run.add_argument("--role", default="scout", help="role publishing the activity (default: scout)")
    run.add_argument("--max-fetches", type=non_negative_int, default=8, metavar="N", help="fetch cap (default: 8)")
    run.add_argument("--max-cost", type=non_negative_int, default=None, metavar="N", help="cost-unit cap (default: none)")
    run.add_argument("--cost-per-fetch", type=non_negative_int, default=1, metavar="N", help="cost units per fetch (default: 1)")
    run.add_argument(
        "--max-bytes", type=non_negative_int, default=None, metavar="N", help="cap on total fetched bytes (default: none)"
    )
    run.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS", help="per-operation network timeout")
    run.add_argument("--allow-private", action="store_true", help="allow sources on private / loopback addresses")
    run.add_argument(
        "--synthesiser", default="extractive", metavar="extractive|module:attr", help="claim drafter (default: extractive)"
    )
    add_producer_flags(run)
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    """The thin shell: build the emitter from settings, then ``execute``."""
    from bernstein.producers.emitter import Emitter
    from bernstein.substrate.config import Settings

    with Emitter.from_settings(Settings.load(), producer=producer_from_args(args)) as emitter:
        emitter.require_topic()  # before any fetch: no submissions topic, nothing to do (E_TOPIC_MISSING, exit 3)

        def publish(result: ActivityResult) -> str:
            return emitter.publish(run_id=args.run_id, stage_id=args.stage_id, role=args.role, result=result).where

        return execute(args, store=emitter.store, publish=publish)


def execute(
    args: argparse.Namespace,
    *,
    store: BlobStore,
    publish: Publish,
    fetch_fn: FetchFn | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the worker and publish its result (or its refusal); returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    budget = ResearchBudget(
        max_fetches=args.max_fetches,
        max_cost_units=args.max_cost,
        cost_per_fetch=args.cost_per_fetch,
        max_bytes=args.max_bytes,
    )
    synthesise = load_synthesiser(args.synthesiser)
    fetch = fetch_fn or make_fetch(allow_private=args.allow_private, timeout=args.timeout)
    worker = ResearchWorker(store=store, budget=budget)
    try:
        run = worker.run(query=args.query, sources=args.source, fetch_fn=fetch, synthesise=synthesise)
    except ActivityRejected as exc:
        print(f"research refused: {exc.code}: {exc.message} (nothing published)", file=err)
        return EXIT_REFUSED
    except ResearchAborted as exc:
        result = worker.refused_result(exc)
        kind = "budget refusal" if isinstance(exc, ResearchBudgetExceeded) else "fetch failure"
        print(f"research stopped: {exc.code}: {exc.message}", file=err)
        landed = publish(result)
        summary = _summary(args, result, landed, claims=0, sources=len(exc.fetched))
        summary["stopped"] = {"code": exc.code, "message": exc.message, "source": exc.source}
        _print(
            summary, out, json_output=args.json, headline=f"published {kind} ({result.terminal_state.value}/{result.reason_code})"
        )
        return EXIT_REFUSED
    landed = publish(run.result)
    summary = _summary(args, run.result, landed, claims=len(run.report.claims), sources=len(run.fetched))
    summary["citations"] = run.report.citation_count
    _print(summary, out, json_output=args.json, headline="published research report")
    return EXIT_OK


def _summary(args: argparse.Namespace, result: ActivityResult, landed: str, *, claims: int, sources: int) -> dict[str, Any]:
    return {
        "run_id": args.run_id,
        "stage_id": args.stage_id,
        "kind": result.kind.value,
        "terminal_state": result.terminal_state.value,
        "reason_code": result.reason_code,
        "artifact_hash": result.artifact_hash,
        "evidence_set_hash": result.evidence_set_hash,
        "claims": claims,
        "sources": sources,
        "landed": landed,
    }


def _print(summary: dict[str, Any], out: TextIO, *, json_output: bool, headline: str) -> None:
    if json_output:
        print(json.dumps(summary, sort_keys=True), file=out)
        return
    print(f"{headline}: run={summary['run_id']} stage={summary['stage_id']} [{summary['kind']}]", file=out)
    print(f"  artifact {summary['artifact_hash']}", file=out)
    counts = f"  {plural(summary['claims'], 'claim')}"
    if "citations" in summary:
        counts += f", {plural(summary['citations'], 'citation')}"
    print(f"{counts}, {plural(summary['sources'], 'source')} fetched", file=out)
    print(f"  landed at {summary['landed']}", file=out)
