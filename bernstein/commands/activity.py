"""``bernstein activity verify RUN... | --all | --runs-file F``: reconstruct runs offline and name every tamper."""

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
from bernstein.substrate.cas import BlobStore, DirBlobStore
from bernstein.substrate.kafka import require_bootstrap
from bernstein.verifier.render import render_json, render_many_json, render_many_text, render_text
from bernstein.verifier.sources import DumpSource, KcatSource, RecordSource
from bernstein.verifier.verify import verify_many, verify_stream


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    activity_sub = command_group(sub, "activity", help="verify activities")
    verify = activity_sub.add_parser(
        "verify",
        help="verify runs from Kafka or an exported dump (exit 0 verified, 1 not found, 2 mismatch, "
        "3 usage error, 4 internal error, 5 open run, 6 not fully verified)",
        description="Reconstruct every activity of RUN: journal chain, seals, audit chain, evidence sets, "
        "reattached blobs and modality checks. Exit codes: 0 verified (every record authenticated with pinned keys "
        "and every evidence blob reattached and re-hashed); 1 run or activity not found; 2 mismatch (something was "
        "changed, lost or added); 3 usage error or unreadable input; 4 internal error; 5 open (the run is not sealed "
        "yet, everything else verified); 6 not fully verified (a check could not be run: no content store, "
        "--records-only, no audit key pinned, a topic not captured). A mismatch (2) beats 6, 6 beats 5. "
        "Several RUNs, --runs-file or --all verify many runs reading each partition once: one report per run and a "
        "summary line (--json: a list); the exit code is the worst run's (2, then 1, 6, 5, 0). See docs/verifier.md.",
    )
    verify.add_argument("run", nargs="*", metavar="RUN", help="run id (several: one report each)")
    verify.add_argument("--all", action="store_true", help="verify every run of the source")
    verify.add_argument(
        "--runs-file", type=Path, default=None, help="verify the runs listed in FILE (one run id a line; # comments)"
    )
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
        "--every-version",
        action="store_true",
        help="with an S3 store: also list every version at each blob's address and name those holding other bytes "
        "(CAS_VERSION_POISONED) even beneath a right newest version; one listing per blob, needs an identity that may "
        "list versions (the reader's)",
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
        from bernstein.verifier.kafka_source import KafkaSource

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


def _runs(args: argparse.Namespace) -> list[str] | None:
    """The runs to verify (None: --all); a usage error for no run, or for --all with runs."""
    runs = list(args.run)
    if args.runs_file is not None:
        runs.extend(_read_runs_file(args.runs_file))
    if args.all:
        if runs:
            raise UsageError("--all verifies every run of the source: pass no RUN and no --runs-file with it")
        return None
    if not runs:
        if args.runs_file is not None:
            raise UsageError(f"--runs-file {args.runs_file}: no run id in it")
        raise UsageError("name a run to verify (RUN, several RUNs, --runs-file FILE or --all)")
    return runs


def _read_runs_file(path: Path) -> list[str]:
    """Run ids, one a line; blank lines and lines starting with # are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--runs-file {path}: cannot read it ({exc})") from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _verify(args: argparse.Namespace) -> int:
    runs = _runs(args)
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
        # kafka without S3: None, reported as NO_CONTENT_STORE
        cas = store_from(args.cas, settings_from(args), every_version=args.every_version)
    trusted = trusted_from(args.trusted_keys, args.keys_dir, args.roles)
    if runs is not None and len(runs) == 1 and not args.runs_file:
        header, stages = verify_stream(runs[0], source, cas=cas, trusted=trusted, records_only=records_only)
        render = render_json if args.json else render_text
        return render(header, stages, sys.stdout)
    reports = verify_many(runs, source, cas=cas, trusted=trusted, records_only=records_only)
    render_many = render_many_json if args.json else render_many_text
    return render_many(((report.header, report.stages) for report in reports), sys.stdout)
