"""``bernstein activity verify RUN... | --all | --runs-file F``: reconstruct runs offline and name every tamper;
``bernstein activity report RUN --out FILE.html``: the same verdict as one self-contained HTML page."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

from bernstein.commands.common import (
    UsageError,
    add_keys_flag,
    add_prefix_flag,
    command_group,
    record_source,
    settings_from,
    store_from,
    trusted_from,
)
from bernstein.commands.proofs import register as register_proofs
from bernstein.commands.rewriting import register as register_rewriting
from bernstein.substrate.cas import BlobStore, DirBlobStore
from bernstein.substrate.exit_codes import EXIT_NOT_FOUND
from bernstein.verifier.render import render_json, render_many_json, render_many_text, render_text
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
    _add_source_flags(verify)
    verify.add_argument("--json", action="store_true", help="print a JSON report instead of text")
    verify.add_argument(
        "--wacz",
        type=Path,
        default=None,
        metavar="FILE",
        help="also check FILE, the run's research pages as a WACZ (`topic export --wacz`), against its journal: every "
        "page there with the journal's bytes, nothing else; a problem makes the verdict a mismatch (exit 2). One RUN; "
        "needs the archive extra",
    )
    add_prefix_flag(verify)
    add_keys_flag(verify)
    verify.set_defaults(func=_verify)
    _register_report(activity_sub)
    register_proofs(activity_sub)
    register_rewriting(activity_sub)


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
    if args.wacz is not None and (runs is None or len(runs) != 1 or args.runs_file is not None):
        raise UsageError("--wacz checks one run's archive: name exactly one RUN (no --all, no --runs-file)")
    source, dump_cas = record_source(args)
    records_only = bool(args.records_only) or args.cas == "none"
    cas = _store(args, dump_cas, records_only)
    trusted = trusted_from(args.trusted_keys, args.keys_dir, args.roles)
    if args.wacz is not None and runs is not None:
        from bernstein.verifier.archive import verify_with_archive

        return verify_with_archive(
            runs[0], source, args.wacz, sys.stdout, cas=cas, trusted=trusted, records_only=records_only, as_json=args.json
        )
    if runs is not None and len(runs) == 1 and not args.runs_file:
        header, stages = verify_stream(runs[0], source, cas=cas, trusted=trusted, records_only=records_only)
        render = render_json if args.json else render_text
        return render(header, stages, sys.stdout)
    reports = verify_many(runs, source, cas=cas, trusted=trusted, records_only=records_only)
    render_many = render_many_json if args.json else render_many_text
    return render_many(((report.header, report.stages) for report in reports), sys.stdout)


def _store(args: argparse.Namespace, dump_cas: Path | None, records_only: bool) -> BlobStore | None:
    """The content store the verdict reattaches evidence from (None: none, and the verdict says so)."""
    if records_only:
        return None
    if args.cas is None and dump_cas is not None:
        # A dump without cas/ gets no store: the verdict says so (CAS_MISSING when its manifest lists blobs).
        return DirBlobStore(dump_cas) if dump_cas.is_dir() else None
    if args.cas is None and args.source != "kafka":
        return None  # a kcat capture carries no blobs: NO_CONTENT_STORE unless --cas names one
    # kafka without S3: None, reported as NO_CONTENT_STORE
    return store_from(args.cas, settings_from(args), every_version=args.every_version)


def _add_source_flags(parser: argparse.ArgumentParser) -> None:
    """The inputs, store and keys ``activity verify`` and ``activity report`` share."""
    parser.add_argument(
        "--from",
        dest="source",
        default="kafka",
        help="kafka (default), a dump directory from `bernstein topic export`, or a kcat -C -J file (repeat with commas)",
    )
    parser.add_argument(
        "--cas",
        default=None,
        help="s3, a CAS directory, or none (= --records-only) (default: <dump>/cas for dumps, s3 for kafka; a kcat capture needs one)",
    )
    parser.add_argument(
        "--every-version",
        action="store_true",
        help="with an S3 store: also list every version at each blob's address and name those holding other bytes "
        "(CAS_VERSION_POISONED) even beneath a right newest version; one listing per blob, needs an identity that may "
        "list versions (the reader's)",
    )
    parser.add_argument(
        "--records-only",
        action="store_true",
        help="check the records alone, without reattaching evidence: never exit 0 (exit 6, and the last line says so)",
    )
    parser.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        help="pinned keys file from `bernstein keys trust` (default: the local install keys and the producers of the roles manifest)",
    )
    parser.add_argument(
        "--roles",
        type=Path,
        default=None,
        help="roles manifest whose producer keys to pin without --trusted-keys (default: $BERNSTEIN_ROLES or config/roles.toml)",
    )
    parser.add_argument(
        "--witnessed",
        type=Path,
        action="append",
        default=[],
        metavar="CHECKPOINT",
        help="a signed checkpoint of a partition's log held outside the deployment, e.g. cosigned by witnesses (a "
        "witness serves its latest at <prefix>/<sha256(origin)>/checkpoint); repeat for more. The journal must "
        "reproduce it: a history cut back behind it is a mismatch. With a witness policy pinned, each partition needs "
        "one its quorum cosigned (docs/checkpoints.md, 'Witnesses')",
    )


def _register_report(activity_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    report = activity_sub.add_parser(
        "report",
        help="write one run's verdict and evidence as a self-contained HTML page (exit codes as for verify)",
        description="Verify RUN exactly as `activity verify` does (same inputs, store and pinned keys), once, and write "
        "the verdict with the run's timeline, research claims in their pages, browser filmstrip, data/ops receipts, "
        "chain, seal, audit and keys as one static HTML file that opens offline (no script, no request). Exit codes are "
        "the verdict's, as for verify (0 verified, 1 not found, 2 mismatch, 5 open, 6 not fully verified); the page is "
        "written for every verdict. 3: usage error, unreadable input or an --out that cannot be written (nothing "
        'written). See docs/verifier.md, "The HTML report".',
    )
    report.add_argument("run", metavar="RUN", help="run id")
    _add_source_flags(report)
    report.add_argument("--out", type=Path, required=True, help="the HTML file to write (replaced atomically)")
    add_prefix_flag(report)
    add_keys_flag(report)
    report.set_defaults(func=_report)


def verify_command(args: argparse.Namespace) -> list[str]:
    """The ``bernstein activity verify`` line that reaches the report's verdict: the same run, source, store, keys and
    options, every path absolute, so it re-runs from any directory."""

    def absolute(value: str) -> str:
        return str(Path(value).absolute())

    command = ["bernstein", "activity", "verify", args.run]
    if args.source == "kafka":
        command += ["--from", "kafka"]
    else:
        command += ["--from", ",".join(absolute(p) for p in args.source.split(","))]
    if args.cas is not None:
        command += ["--cas", args.cas if args.cas in ("s3", "none") else absolute(args.cas)]
    if args.records_only:
        command.append("--records-only")
    if args.every_version:
        command.append("--every-version")
    if args.trusted_keys is not None:
        command += ["--trusted-keys", absolute(str(args.trusted_keys))]
    else:
        if args.roles is not None:
            command += ["--roles", absolute(str(args.roles))]
        if args.keys_dir is not None:
            command += ["--keys-dir", absolute(str(args.keys_dir))]
    for path in args.witnessed:
        command += ["--witnessed", absolute(str(path))]
    if args.prefix:
        command += ["--prefix", args.prefix]
    return command


def _writable(out: Path) -> None:
    """A usage error now, before anything is verified, when ``out`` cannot be written."""
    if out.is_dir():
        raise UsageError(f"--out {out}: is a directory; name the HTML file to write")
    parent = out.absolute().parent
    if not parent.is_dir():
        raise UsageError(f"--out {out}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UsageError(f"--out {out}: cannot write there (permission denied)")


def write_atomically(out: Path, text: str) -> None:
    """``text`` into ``out`` (UTF-8) through a temporary file in the same directory, renamed over it."""
    parent = out.absolute().parent
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(text)
            os.chmod(temporary, 0o644)
            os.replace(temporary, out)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write it ({exc.strerror or exc})") from None


def _report(args: argparse.Namespace) -> int:
    from bernstein.verifier.html import build_report

    _writable(args.out)
    source, dump_cas = record_source(args)
    records_only = bool(args.records_only) or args.cas == "none"
    cas = _store(args, dump_cas, records_only)
    trusted = trusted_from(args.trusted_keys, args.keys_dir, args.roles)
    command = verify_command(args)
    rendered = build_report(args.run, source, cas=cas, trusted=trusted, command=command, records_only=records_only)
    write_atomically(args.out, rendered.html)
    size = len(rendered.html.encode("utf-8"))
    if rendered.exit_code == EXIT_NOT_FOUND and rendered.verdict == "not_found":
        print(
            f"bernstein: run {args.run!r} not found in {source.describe()}; the report at {args.out} says so (exit 1)",
            file=sys.stderr,
        )
    print(
        f"wrote {args.out} ({size} bytes, {rendered.stages} stages, {rendered.images} images): verdict "
        f"{rendered.verdict.replace('_', ' ')}, exit {rendered.exit_code}; re-run: {shlex.join(command)}"
    )
    return rendered.exit_code
