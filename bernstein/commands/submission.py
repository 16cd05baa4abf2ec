"""``bernstein submission check FILE``: the verdict the scheduler would give, offline.

FILE holds one or more submissions: activity descriptions as JSON lines (the input of
``bernstein submit``; stages and run closes, signed here with ``--producer-keys`` exactly as
``submit`` would sign them), or the raw bytes of one Avro single-object record (it starts with
``c3 01``), e.g. a submission another SDK encoded. They run in order through the scheduler's pure
core (``bernstein.consumers.core.step``) from a fresh state, under the roles manifest the scheduler uses
(``--manifest``, default ``$BERNSTEIN_ROLES`` or ``config/roles.toml``), as records of partition 0
of ``<prefix>.activity.submissions`` keyed by their run id and stamped ``--at`` (default now). Seal
and audit keys are ephemeral: only the verdict matters. No network.

Per submission it prints the journal entry (or, for a run close, the final seal) or the refusal
(code, message and evidence) or the dead letter the scheduler would write. What it cannot see:
the state of runs already on the real topics (a stage id or submission id used before, a closed
run, the evidence already counted) and the topic's partition count; it starts every run afresh.

Exit codes (``bernstein.substrate.exit_codes``): 0 every submission would be journalled; 1 at least one
would be refused or dead-lettered; 3 usage error (unreadable FILE, a bad description, a bad
manifest, missing producer keys, bad flags), as for every bernstein command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

from bernstein.consumers.core.model import InputRecord, OutputRecord, SchedulerConfig, Stream
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.consumers.manifest import load_manifest
from bernstein.producers.description import DescriptionError, parse_descriptions, signed_value
from bernstein.producers.identity import add_producer_flags, producer_from_args
from bernstein.schemas import codec
from bernstein.schemas.canonical import hmac_key_id
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.config import Topics
from bernstein.substrate.exit_codes import EXIT_OK, EXIT_USAGE, EXIT_WOULD_BE_REFUSED
from bernstein.substrate.keys import Ed25519Signer

DEFAULT_MANIFEST: Final = Path("config") / "roles.toml"


class CheckUsageError(BernsteinError):
    """``submission check`` cannot run: the message says what to fix (exit 3, ``EXIT_USAGE``)."""

    code = "E_USAGE"


class _CheckParser(argparse.ArgumentParser):
    """Bad flags of ``submission check`` get its own usage line; they exit 3 (``EXIT_USAGE``) as everywhere."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:  # else the top-level parser would report them with its own usage line
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    group = sub.add_parser("submission", help="check submissions offline against the scheduler's rules")
    group.set_defaults(func=lambda _args: _usage(group))
    commands = group.add_subparsers(dest="submission_command", metavar="<submission command>", parser_class=_CheckParser)
    check = commands.add_parser(
        "check",
        help="print the journal entry or refusal each submission in FILE would get (offline)",
        description="Run the submissions in FILE through the scheduler's pure core, offline, from a fresh state, and "
        "print per submission the journal entry (a run close: its seal) or the refusal (code, message, evidence) it "
        "would get. FILE holds activity descriptions as JSON lines (as `bernstein submit` reads them; signed with "
        "--producer-keys) or the raw bytes of one Avro single-object record (starting c3 01). The scheduler's "
        "view of runs already on the topics is not known here: every run starts afresh. Exit 0 all would be "
        "journalled, 1 any would be refused or dead-lettered, 3 usage error. No network.",
    )
    check.add_argument("file", type=Path, metavar="FILE", help="JSON-lines descriptions, or one Avro single-object record")
    check.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help="the roles manifest the scheduler runs with (default: $BERNSTEIN_ROLES or config/roles.toml)",
    )
    add_producer_flags(check)
    check.add_argument(
        "--prefix", default=None, help="topic prefix of the input records (default: $BERNSTEIN_TOPIC_PREFIX or 'bernstein')"
    )
    check.add_argument(
        "--at",
        type=int,
        default=None,
        metavar="MS",
        help="the inputs' Kafka timestamp (ms since the epoch; producer keys must be valid then) and the descriptions' "
        "default occurred_at_ms; default now",
    )
    check.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or one JSON object per line")
    check.set_defaults(func=_check)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


@dataclass(frozen=True)
class Submission:
    """One input to check: where it came from in FILE, and its record key and value."""

    where: str
    """``line N`` of a description, or ``record`` for raw Avro bytes."""
    line: int | None
    key: bytes | None
    value: bytes


@dataclass(frozen=True)
class Verdict:
    """What the scheduler would write for one submission."""

    submission: Submission
    verdict: str
    """``journal``, ``refused`` or ``deadletter``."""
    detail: dict[str, Any]


def _check(args: argparse.Namespace) -> int:
    try:
        verdicts = check_file(
            args.file,
            manifest=_manifest_path(args.manifest),
            producer_args=args,
            prefix=args.prefix,
            at_ms=args.at,
        )
    except BernsteinError as exc:
        print(f"bernstein submission check: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    for verdict in verdicts:
        print(json.dumps(as_json(verdict), sort_keys=True) if args.format == "json" else as_text(verdict))
    return EXIT_OK if all(v.verdict == "journal" for v in verdicts) else EXIT_WOULD_BE_REFUSED


def _manifest_path(given: Path | None) -> Path:
    return given or Path(os.environ.get("BERNSTEIN_ROLES") or DEFAULT_MANIFEST)


def check_file(
    path: Path, *, manifest: Path, producer_args: argparse.Namespace | None, prefix: str | None = None, at_ms: int | None = None
) -> list[Verdict]:
    """The verdict for every submission in ``path`` (see the module doc)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckUsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    now = int(time.time() * 1000) if at_ms is None else at_ms
    if not manifest.is_file():
        raise CheckUsageError(
            f"no roles manifest at {manifest}: pass --manifest FILE (the manifest `bernstein scheduler run --roles` uses)"
        )
    loaded = load_manifest(manifest)
    config = SchedulerConfig(
        roles=loaded.roles,
        signer=Ed25519Signer.generate(),
        audit_key=(audit_key := os.urandom(32)),
        audit_key_id=hmac_key_id(audit_key),
        producers=loaded.producers,
    )
    submissions = _submissions(data, path, producer_args, now)
    if not submissions:
        raise CheckUsageError(f"{path} holds no submission (no description line, no Avro record)")
    return run_offline(submissions, config, topic=_topics(prefix).submissions, timestamp_ms=now)


def _topics(prefix: str | None) -> Topics:
    return Topics(prefix or os.environ.get("BERNSTEIN_TOPIC_PREFIX") or "bernstein")


def _submissions(data: bytes, path: Path, producer_args: argparse.Namespace | None, now: int) -> list[Submission]:
    if data.startswith(codec.MAGIC):
        return [Submission("record", None, _run_key(data), data)]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckUsageError(
            f"{path} is neither JSON lines (UTF-8) nor an Avro single-object record (c3 01 ...): byte {exc.start} is not UTF-8"
        ) from None
    lines = text.splitlines()
    try:
        descriptions = list(parse_descriptions(lines, cwd=Path.cwd()))
    except DescriptionError as exc:
        raise CheckUsageError(f"{path}: {exc.message}") from None
    if not descriptions:
        return []
    producer = producer_from_args(producer_args if producer_args is not None else argparse.Namespace())
    out = []
    for description in descriptions:
        try:
            run_id, _, value = signed_value(description, producer_id=producer.name, signer=producer.signer, now_ms=now)
        except DescriptionError as exc:
            raise CheckUsageError(f"{path}: {exc.message}") from None
        out.append(Submission(f"line {description.line}", description.line, run_id.encode(), value))
    return out


def _run_key(value: bytes) -> bytes | None:
    """A raw record's key as a producer publishes it: its run id (none when it does not decode)."""
    try:
        run_id = codec.decode(value).record.get("run_id")
    except codec.DecodeError:
        return None
    return run_id.encode() if isinstance(run_id, str) else None


def run_offline(submissions: list[Submission], config: SchedulerConfig, *, topic: str, timestamp_ms: int) -> list[Verdict]:
    """Step every submission, in order, from a fresh state of partition 0."""
    core = SchedulerCore(config)
    state = initial_state(config, 0)
    verdicts = []
    for offset, submission in enumerate(submissions):
        state, outputs = core.step(state, InputRecord(topic, 0, offset, timestamp_ms, submission.key, submission.value))
        verdicts.append(_verdict(submission, outputs))
    return verdicts


def _verdict(submission: Submission, outputs: list[OutputRecord]) -> Verdict:
    by_stream = {o.stream: o for o in reversed(outputs)}  # the first output of each stream
    if Stream.REFUSALS in by_stream:
        return Verdict(submission, "refused", codec.decode(by_stream[Stream.REFUSALS].value).record)
    if Stream.DEADLETTER in by_stream:
        record = codec.decode(by_stream[Stream.DEADLETTER].value).record
        return Verdict(submission, "deadletter", {k: v for k, v in record.items() if k != "raw"})
    journal = by_stream[Stream.JOURNAL]
    envelope = codec.decode(journal.value)
    payload = codec.decode(envelope.record["payload"])
    detail = {"schema": payload.schema.name, "record": payload.record}
    if envelope.schema.name == codec.JOURNAL_RECORD:
        detail["entry_hash"] = envelope.record["entry_hash"]
    return Verdict(submission, "journal", detail)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def as_json(verdict: Verdict) -> dict[str, Any]:
    """One verdict as ``--format json`` prints it."""
    item: dict[str, Any] = {"submission": verdict.submission.where, "verdict": verdict.verdict}
    if verdict.submission.line is not None:
        item["line"] = verdict.submission.line
    if verdict.verdict == "journal":
        item["schema"] = verdict.detail["schema"]
        item["entry"] = _jsonable(verdict.detail["record"])
        if "entry_hash" in verdict.detail:
            item["entry_hash"] = verdict.detail["entry_hash"]
    elif verdict.verdict == "refused":
        item["refusal"] = _jsonable(verdict.detail)
    else:
        item["deadletter"] = _jsonable(verdict.detail)
    return item


def as_text(verdict: Verdict) -> str:
    """One verdict as ``--format text`` prints it."""
    where = verdict.submission.where
    detail = verdict.detail
    if verdict.verdict == "journal":
        record = detail["record"]
        if "entry_hash" not in detail:  # a run close: the final seal
            return f"{where}: journalled: run {record['run_id']} closed and sealed after {record['entry_count']} entries"
        return (
            f"{where}: journalled: run {record['run_id']} seq {record['seq']} stage {record.get('stage_id', record.get('session_id'))} "
            f"({record['entry_type']}, entry {detail['entry_hash']})"
        )
    if verdict.verdict == "refused":
        lines = [f"{where}: refused {detail['code']}: {detail['message']}"]
        evidence = [f"{name} {detail[name]!r}" for name in ("field", "declared", "recomputed") if detail.get(name)]
        if detail.get("earlier_stage_id"):
            evidence.append(f"earlier_stage_id {detail['earlier_stage_id']!r}")
        if evidence:
            lines.append("  evidence: " + ", ".join(evidence))
        return "\n".join(lines)
    return f"{where}: dead-lettered {detail['code']}: {detail['detail']}"
