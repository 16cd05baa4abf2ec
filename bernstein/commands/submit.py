"""``bernstein submit``: publish activities described as JSON lines on stdin (any program can produce).

Each line is a stage or a run close (``bernstein.producers.description``; docs/producing.md). Lines are
handled one at a time, in order: the description is checked and signed with the producer key
(``--producer-keys``), every blob it names (the observations' bytes and the artifact) is stored in
S3, then the ActivitySubmission.v3 or RunClose.v2 is produced (idempotent, acks=all, keyed by the
run id) and acknowledged, and one JSON line says where it landed::

    {"run_id": "run-42", "submission_id": "...", "topic": "bernstein.activity.submissions", "partition": 0, "offset": 7}

The first line that fails stops the command (lines before it were published and printed;
nothing of the failing line was published). Exit codes (``bernstein.substrate.exit_codes``): 0 every
line published; 2 a bad description (the message names the line and the field) or unusable
producer keys; 3 Kafka or S3 unavailable or refusing (not authorized, not acknowledged, or the
submissions topic missing: ``E_TOPIC_MISSING``, which names the prefix and ``bernstein topic
create``; a producer never creates topics), and flags that do not parse (as for every bernstein
command). Never a traceback. Whether the scheduler journals or refuses a published submission is its verdict,
on the journal and refusals topics; ``bernstein submission check`` predicts it offline.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO

from bernstein.commands.common import add_prefix_flag, positive_seconds, settings_from
from bernstein.producers.description import DescriptionError, StageDescription, parse_description, signed_value
from bernstein.producers.emitter import EmitError, Emitter, Published
from bernstein.producers.identity import add_producer_flags, producer_from_args
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.cas import CasError, S3BlobStore
from bernstein.substrate.config import Settings
from bernstein.substrate.exit_codes import EXIT_BAD_DESCRIPTION, EXIT_OK, EXIT_UNAVAILABLE
from bernstein.substrate.kafka import KafkaError, require_bootstrap
from bernstein.substrate.keys import ProducerKeys


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    submit = sub.add_parser(
        "submit",
        help="publish activities described as JSON lines on stdin (stages and run closes)",
        description="Read one activity description per line from stdin (JSON Lines, docs/producing.md): a stage "
        '{"run_id", "stage_id", "role", "kind", one of "artifact" (any JSON, published as its canonical JSON bytes) / '
        '"artifact_file" / "artifact_base64", "observations": [{"kind", "ref", one of "file" / "text" / "base64"}], '
        '"terminal_state" (completed), "reason_code" (ok), "submission_id" (fresh), "occurred_at_ms" (now)} or a run '
        'close {"close_run": RUN_ID, "submission_id"}. Files are relative to the current directory. For each line: '
        "store every blob in S3, publish the signed submission, wait for the acknowledgement, print one JSON line "
        '{"run_id", "submission_id", "topic", "partition", "offset"}. TESTING ONLY: a stage\'s "artifact_hash" is '
        "published as given instead of the computed hash, so the scheduler refuses it (ARTIFACT_HASH_MISMATCH): it "
        "exists to test refusals. Stops at the first failing line. Exit 0 all published, 2 bad description (line and "
        "field named) or unusable producer keys, 3 Kafka or S3 unavailable or refusing, the submissions topic missing "
        "(producers never create topics: `bernstein topic create --prefix P`), or bad flags.",
    )
    add_prefix_flag(submit)
    add_producer_flags(submit)
    submit.add_argument(
        "--timeout",
        type=positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="wait at most this long for Kafka (the submissions topic's check, each acknowledgement); default 30",
    )
    submit.set_defaults(func=_submit)


def _submit(args: argparse.Namespace) -> int:
    try:
        producer = producer_from_args(args)
        settings = settings_from(args)
    except BernsteinError as exc:
        return _fail(f"{exc.message}", EXIT_BAD_DESCRIPTION)
    return submit_lines(sys.stdin, producer=producer, settings=settings, timeout=args.timeout, out=sys.stdout)


def submit_lines(lines: IO[str], *, producer: ProducerKeys, settings: Settings, timeout: float, out: IO[str]) -> int:
    """Publish every description of ``lines`` (see the module doc); the exit code."""
    emitter: Emitter | None = None
    try:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                description = parse_description(text, line=number)
                run_id, submission_id, value = signed_value(description, producer_id=producer.name, signer=producer.signer)
            except DescriptionError as exc:
                return _fail(exc.message, EXIT_BAD_DESCRIPTION)
            try:
                if emitter is None:
                    emitter = _emitter(settings, producer, timeout)
                if isinstance(description, StageDescription):
                    emitter.store_blobs(description.blobs)  # blobs first: the submission names them
                published = emitter.publish_raw(run_id, value, submission_id=submission_id)
            except (EmitError, CasError, KafkaError) as exc:
                return _fail(f"line {number}: nothing published for this line: {exc.message}", EXIT_UNAVAILABLE)
            print(json.dumps(_landed(published)), file=out, flush=True)
    except UnicodeDecodeError as exc:
        return _fail(f"stdin is not UTF-8 text: {exc.reason}", EXIT_BAD_DESCRIPTION)
    finally:
        if emitter is not None:
            try:
                emitter.close()
            except EmitError:
                pass  # every line printed was acknowledged already
    return EXIT_OK


def _emitter(settings: Settings, producer: ProducerKeys, timeout: float) -> Emitter:
    from confluent_kafka import KafkaException

    if settings.s3 is None:
        raise EmitError("no S3 endpoint: set BERNSTEIN_S3_ENDPOINT (and BERNSTEIN_S3_ACCESS_KEY / _SECRET_KEY) or run `infra/up`")
    try:
        emitter = Emitter(
            bootstrap=require_bootstrap(settings.kafka_bootstrap),
            store=S3BlobStore(settings.s3),
            topics=settings.topics,
            producer=producer,
            delivery_timeout=timeout,
        )
    except KafkaException as exc:  # librdkafka refused the client configuration
        raise EmitError(f"cannot create a Kafka producer: {exc}") from exc
    emitter.require_topic()  # before the first blob is stored: a mistyped prefix stores nothing (TopicMissing)
    return emitter


def _landed(published: Published) -> dict[str, object]:
    return {
        "run_id": published.run_id,
        "submission_id": published.submission_id,
        "topic": published.topic,
        "partition": published.partition,
        "offset": published.offset,
    }


def _fail(message: str, code: int) -> int:
    print(f"bernstein submit: error: {message}", file=sys.stderr)
    return code
