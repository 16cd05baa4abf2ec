"""``bernstein data run`` and ``bernstein ops run``: run an example job and publish its result.

The private key comes ONLY from this producer's key directory
(``bernstein keys init --producer NAME``, ``--producer-keys DIR`` or
``$BERNSTEIN_PRODUCER_KEYS_DIR``): it signs the receipt and the submission. Nothing
in an input file or job spec can supply or name a key, and no scheduler key is read. Blobs go to the CAS
before the submission that names them is published. When the job breaks the
phase order or cannot run as declared, the refusal itself is published (a
``refused`` result) and the command exits 3.

    bernstein data run --run run-1 --stage rollup \\
        --input demo/data/orders.csv --output out/shipped_by_region.csv \\
        --job demo/data/orders.job.json
    bernstein ops run --run run-1 --stage tune \\
        --input demo/data/service.conf --output out/service.conf \\
        --step 'set max_connections = 200' --step 'set log_level = info'
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from bernstein.producers.activity import ActivityRejected, ActivityResult
from bernstein.producers.dataops.activity import DataOpsActivity
from bernstein.producers.dataops.examples import (
    VIOLATIONS,
    InputFile,
    JobOutcome,
    JobSpec,
    misordered_job,
    run_data_job,
    run_ops_job,
)
from bernstein.producers.identity import add_producer_flags, producer_from_args
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.records import ID_RULE, is_valid_id
from bernstein.substrate.cas import BlobStore, DirBlobStore
from bernstein.substrate.exit_codes import EXIT_OK, EXIT_REFUSED
from bernstein.substrate.keys import ProducerKeys
from bernstein.substrate.text import plural

DEFAULT_ROLES: Final = {"data": "analyst", "ops": "operator"}
_JOBS: Final[dict[str, Callable[[DataOpsActivity, Sequence[InputFile], Sequence[str], Path], JobOutcome]]] = {
    "data": run_data_job,
    "ops": run_ops_job,
}
_HELP: Final = {
    "data": "data activities: signed inputs -> plan -> signed outputs (CSV rollup job)",
    "ops": "ops activities: signed config before -> plan -> signed config after",
}


class DataOpsUsageError(BernsteinError):
    code = "E_USAGE"


def register(subparsers: Any) -> None:
    """Add ``data run`` and ``ops run`` to the ``bernstein`` command line."""
    for kind in ("data", "ops"):
        parser = subparsers.add_parser(kind, help=_HELP[kind], description=_HELP[kind])
        commands = parser.add_subparsers(dest=f"{kind}_command", metavar="<command>")
        run = commands.add_parser(
            "run",
            help=f"run the example {kind} job and publish its signed receipt",
            description=f"Run the example {kind} job through the phase machine and publish the result.",
        )
        _add_run_arguments(run, kind)
        run.set_defaults(func=run_command, kind=kind)


def _add_run_arguments(run: argparse.ArgumentParser, kind: str) -> None:
    run.add_argument("--run", required=True, dest="run_id", metavar="RUN", help="run id")
    run.add_argument("--stage", required=True, dest="stage_id", metavar="STAGE", help="stage id within the run")
    run.add_argument("--role", default=DEFAULT_ROLES[kind], help=f"role submitting (default {DEFAULT_ROLES[kind]})")
    run.add_argument(
        "--input", required=True, action="append", type=Path, dest="inputs", metavar="FILE", help="input file (repeatable)"
    )
    run.add_argument("--output", required=True, type=Path, metavar="PATH", help="where the job writes its output file")
    steps = run.add_mutually_exclusive_group(required=True)
    steps.add_argument(
        "--job",
        type=Path,
        metavar="SPEC",
        help=f'job spec JSON: {{"format": "bernstein.dataops.job/v1", "kind": "{kind}", "steps": [...]}}',
    )
    steps.add_argument("--step", action="append", dest="steps", metavar="STEP", help="one declared step (repeatable, in order)")
    add_producer_flags(run)
    run.add_argument("--cas-dir", type=Path, metavar="DIR", help="store blobs in this directory instead of the S3 bucket")
    run.add_argument("--no-publish", action="store_true", help="do not publish to Kafka (needs --cas-dir)")
    run.add_argument(
        "--violate",
        choices=VIOLATIONS,
        help="demo: break the phase order on purpose, to show the refusal being recorded",
    )


def run_command(args: argparse.Namespace) -> int:
    """Handler of ``bernstein data run`` / ``bernstein ops run``."""
    kind: str = args.kind
    for flag, value in (("--run", args.run_id), ("--stage", args.stage_id), ("--role", args.role)):
        if not is_valid_id(value):
            raise DataOpsUsageError(f"{flag} {value!r} {ID_RULE}")
    steps = _load_steps(args, kind)
    inputs = [InputFile(path.name, _read(path, "input")) for path in args.inputs]
    keys = producer_from_args(args)
    store, emitter = _open(args, keys)
    try:
        activity = DataOpsActivity(kind, args.run_id, args.stage_id, store=store, signer=keys.signer)
        outcome: JobOutcome | None = None
        refusal: ActivityRejected | None = None
        try:
            if args.violate:
                misordered_job(activity, args.violate, inputs, steps, args.output)
            outcome = _JOBS[kind](activity, inputs, steps, args.output)
            result = outcome.result
        except ActivityRejected as exc:
            refusal = exc
            result = activity.refused_result(exc)
        published = None
        if emitter is not None:
            published = emitter.publish(run_id=args.run_id, stage_id=args.stage_id, role=args.role, result=result)
    finally:
        if emitter is not None:
            emitter.close()
    for line in _summary(kind, args, result, outcome, refusal):
        print(line)
    if published is not None:
        print(f"  published {published.where} (submission {published.submission_id})")
    else:
        print("  not published (--no-publish)")
    return EXIT_OK if refusal is None else EXIT_REFUSED


def _summary(
    kind: str, args: argparse.Namespace, result: ActivityResult, outcome: JobOutcome | None, refusal: ActivityRejected | None
) -> list[str]:
    where = f"{kind} {args.run_id}/{args.stage_id}"
    if refusal is not None or outcome is None:
        code = refusal.code if refusal is not None else "REFUSED"
        message = refusal.message if refusal is not None else ""
        inputs = sum(1 for o in result.observations if o.kind == "input")
        return [
            f"{where} refused: {code} -- {message}",
            f"  refusal  {result.artifact_hash} ({plural(inputs, 'input')} recorded)",
        ]
    receipt = outcome.receipt
    lines = [f"{where} completed: {plural(len(receipt.inputs), 'input')}, {plural(len(receipt.outputs), 'output')} signed"]
    lines += [f"  input    {item.ref} {item.content_hash}" for item in receipt.inputs]
    lines.append(f"  plan     {receipt.plan.plan_hash} ({plural(len(receipt.plan.steps), 'step')})")
    lines += [f"  output   {item.ref} {item.content_hash} -> {outcome.output_path}" for item in receipt.outputs]
    lines += [f"  change   {c.key}: {c.before if c.before is not None else '(new)'} -> {c.after}" for c in outcome.changes]
    lines.append(f"  receipt  {result.artifact_hash} signed by {receipt.signer_key_id}")
    return lines


def _load_steps(args: argparse.Namespace, kind: str) -> list[str]:
    if args.job is not None:
        spec = JobSpec.parse(_read(args.job, "job spec"), where=str(args.job))
        if spec.kind != kind:
            raise DataOpsUsageError(f"{args.job} is a {spec.kind} job; run it with `bernstein {spec.kind} run`")
        return list(spec.steps)
    return list(args.steps)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataOpsUsageError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise DataOpsUsageError(f"cannot read {what} {path}: {exc.strerror}") from None


def _open(args: argparse.Namespace, keys: ProducerKeys) -> tuple[BlobStore, Any]:
    """The blob store and (unless --no-publish) the emitter; the only Kafka/S3-touching part."""
    local = DirBlobStore(args.cas_dir) if args.cas_dir else None
    if args.no_publish:
        if local is None:
            raise DataOpsUsageError("--no-publish needs --cas-dir DIR: the receipt and its blobs must be stored somewhere")
        return local, None
    from bernstein.producers.emitter import Emitter
    from bernstein.substrate.config import Settings

    emitter = Emitter.from_settings(Settings.load(), producer=keys, store=local)
    emitter.require_topic()  # before the job runs: no submissions topic, nothing to do (E_TOPIC_MISSING, exit 3)
    return emitter.store, emitter
