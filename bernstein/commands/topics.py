"""``bernstein topic``: create the topics, export them into an offline dump."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bernstein.commands.common import UsageError, add_keys_flag, add_prefix_flag, command_group, settings_from, store_from
from bernstein.substrate.exit_codes import EXIT_OK
from bernstein.substrate.kafka import ensure_topics, require_bootstrap
from bernstein.substrate.keys import TrustedKeys, default_keys_dir, load_keys
from bernstein.substrate.text import plural
from bernstein.verifier.export import export_dump
from bernstein.verifier.kafka_source import KafkaSource


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    topic_sub = command_group(sub, "topic", help="create or export the journal's topics")

    create = topic_sub.add_parser("create", help="create the topics with explicit settings (idempotent)")
    add_prefix_flag(create)
    create.add_argument("--partitions", type=int, default=1, help="partitions of every topic (default 1)")
    create.set_defaults(func=_create)

    export = topic_sub.add_parser("export", help="write a self-contained dump directory for offline verification")
    add_prefix_flag(export)
    add_keys_flag(export)
    which = export.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", action="append", dest="runs", metavar="RUN", help="a run to export (repeatable)")
    which.add_argument("--all", action="store_true", help="export every record of every topic")
    export.add_argument("--out", type=Path, required=True, help="dump directory to create (must be new or empty)")
    export.add_argument("--cas", default="s3", help="where blobs come from: s3 (default), none, or a CAS directory")
    export.add_argument(
        "--wacz",
        action="store_true",
        help="also write each exported run's research pages as a WACZ web archive, DIR/wacz/<run>.wacz (needs the "
        "archive extra; see docs/research.md, 'Pages as a web archive')",
    )
    export.set_defaults(func=_export)


def _create(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.partitions < 1:
        raise UsageError("--partitions must be at least 1")
    count = ensure_topics(require_bootstrap(settings.kafka_bootstrap), settings.topics, partitions=args.partitions)
    print(f"topics of prefix {settings.topics.prefix!r} ready with {count} partition(s)")
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    if args.wacz:
        from bernstein.verifier.archive import require

        require()  # without the archive extra: say which to install, before anything is exported
        if args.cas == "none":
            raise UsageError("--wacz archives the pages' bytes: export them too (--cas s3 or a CAS directory, not none)")
    settings = settings_from(args)
    source = KafkaSource(require_bootstrap(settings.kafka_bootstrap), settings.topics)
    cas = store_from(args.cas, settings)
    directory = args.keys_dir or default_keys_dir()
    trusted = TrustedKeys.from_install(load_keys(directory), include_audit_key=False) if directory.exists() else None
    summary = export_dump(
        source,
        args.out,
        cas=cas,
        runs=None if args.all else args.runs,
        trusted=trusted,
        progress=lambda text: print(f"export: {text}", file=sys.stderr),
    )
    records = ", ".join(f"{n} {stream}" for stream, n in sorted(summary.records.items())) or "no records"
    print(f"exported {records} and {summary.blobs} blobs to {summary.directory}")
    if summary.missing_blobs:
        print(f"warning: {len(summary.missing_blobs)} referenced blobs were missing from the store", file=sys.stderr)
    if args.wacz:
        from bernstein.verifier.archive import export_wacz

        archives = export_wacz(summary.directory, summary.runs, progress=lambda text: print(f"export: {text}", file=sys.stderr))
        pages = plural(sum(a.pages for a in archives), "research page")
        print(f"archived {pages} of {plural(len(archives), 'run')} as WACZ in {summary.directory / 'wacz'}")
    return EXIT_OK
