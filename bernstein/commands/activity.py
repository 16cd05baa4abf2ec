"""``bernstein activity verify <run>``: reconstruct a run offline and name every tamper."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bernstein.commands.common import (
    UsageError,
    add_keys_flag,
    add_prefix_flag,
    command_group,
    settings_from,
    store_from,
    trusted_from,
)
from substrate.cas import BlobStore, DirBlobStore
from substrate.kafka import require_bootstrap
from verifier.render import render_json, render_text
from verifier.sources import DumpSource, KcatSource, RecordSource
from verifier.verify import verify_stream


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    activity_sub = command_group(sub, "activity", help="verify activities")
    verify = activity_sub.add_parser(
        "verify",
        help="verify a run from Kafka or an exported dump (exit 0 verified, 1 not found, 2 mismatch, 3 unreadable input)",
        description="Reconstruct every activity of RUN: journal chain, seals, audit chain, evidence sets, "
        "reattached blobs and modality checks. Exit 0 verified, 1 run or activity not found, "
        "2 mismatch, 3 usage error or unreadable input.",
    )
    verify.add_argument("run", help="run id")
    verify.add_argument(
        "--from",
        dest="source",
        default="kafka",
        help="kafka (default), a dump directory from `bernstein topic export`, or a kcat -C -J file (repeat with commas)",
    )
    verify.add_argument("--cas", default=None, help="s3, none, or a CAS directory (default: <dump>/cas for dumps, s3 for kafka)")
    verify.add_argument("--trusted-keys", type=Path, default=None, help="pinned keys file (default: the local install keys)")
    verify.add_argument("--json", action="store_true", help="print a JSON report instead of text")
    add_prefix_flag(verify)
    add_keys_flag(verify)
    verify.set_defaults(func=_verify)


def _source(args: argparse.Namespace) -> tuple[RecordSource, Path | None]:
    if args.source == "kafka":
        from verifier.kafka_source import KafkaSource

        settings = settings_from(args)
        return KafkaSource(require_bootstrap(settings.kafka_bootstrap), settings.topics), None
    paths = [Path(p) for p in args.source.split(",")]
    if len(paths) == 1 and paths[0].is_dir():
        return DumpSource(paths[0]), paths[0] / "cas"
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UsageError(f"--from {args.source}: {', '.join(missing)} not found (pass kafka, a dump directory or kcat -J files)")
    prefix = args.prefix or settings_from(args).topics.prefix
    return KcatSource(paths, prefix), None


def _verify(args: argparse.Namespace) -> int:
    source, dump_cas = _source(args)
    cas: BlobStore | None
    if args.cas is None and dump_cas is not None:
        cas = DirBlobStore(dump_cas) if dump_cas.is_dir() else None
    elif args.cas is None and args.source != "kafka":
        cas = None  # a kcat dump carries no blobs; pass --cas to reattach them
    else:
        cas = store_from(args.cas, settings_from(args))
    trusted = trusted_from(args.trusted_keys, args.keys_dir)
    header, stages = verify_stream(args.run, source, cas=cas, trusted=trusted)
    render = render_json if args.json else render_text
    return render(header, stages, sys.stdout)
