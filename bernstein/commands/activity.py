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
        help="verify a run from Kafka or an exported dump (exit 0 verified, 1 not found, 2 mismatch, "
        "3 usage error, 4 internal error, 5 open run, 6 not fully verified)",
        description="Reconstruct every activity of RUN: journal chain, seals, audit chain, evidence sets, "
        "reattached blobs and modality checks. Exit codes: 0 verified (every record authenticated with pinned keys "
        "and every evidence blob reattached and re-hashed); 1 run or activity not found; 2 mismatch (something was "
        "changed, lost or added); 3 usage error or unreadable input; 4 internal error; 5 open (the run is not sealed "
        "yet, everything else verified); 6 not fully verified (a check could not be run: no content store, "
        "--records-only, no audit key pinned, a topic not captured). A mismatch (2) beats 6, 6 beats 5. "
        "See docs/verifier.md.",
    )
    verify.add_argument("run", help="run id")
    verify.add_argument(
        "--from",
        dest="source",
        default="kafka",
        help="kafka (default), a dump directory from `bernstein topic export`, or a kcat -C -J file (repeat with commas)",
    )
    verify.add_argument(
        "--cas",
        default=None,
        help="s3, a CAS directory, or none (= --records-only) (default: <dump>/cas for dumps, s3 for kafka; a kcat capture needs one)",
    )
    verify.add_argument(
        "--records-only",
        action="store_true",
        help="check the records alone, without reattaching evidence: never exit 0 (exit 6, and the last line says so)",
    )
    verify.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        help="pinned keys file from `bernstein keys trust` (default: the local install keys and the producers of the roles manifest)",
    )
    verify.add_argument(
        "--roles",
        type=Path,
        default=None,
        help="roles manifest whose producer keys to pin without --trusted-keys (default: $BERNSTEIN_ROLES or config/roles.toml)",
    )
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
    records_only = bool(args.records_only) or args.cas == "none"
    cas: BlobStore | None
    if records_only:
        cas = None
    elif args.cas is None and dump_cas is not None:
        # A dump without cas/ gets no store: the verdict says so (CAS_MISSING when its manifest lists blobs).
        cas = DirBlobStore(dump_cas) if dump_cas.is_dir() else None
    elif args.cas is None and args.source != "kafka":
        cas = None  # a kcat capture carries no blobs: NO_CONTENT_STORE unless --cas names one
    else:
        cas = store_from(args.cas, settings_from(args))  # kafka without S3: None, reported as NO_CONTENT_STORE
    trusted = trusted_from(args.trusted_keys, args.keys_dir, args.roles)
    header, stages = verify_stream(args.run, source, cas=cas, trusted=trusted, records_only=records_only)
    render = render_json if args.json else render_text
    return render(header, stages, sys.stdout)
