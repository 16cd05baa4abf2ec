"""``bernstein activity prove-rewriting --out F`` and ``bernstein activity verify-rewriting F``: a transferable proof that
a partition's log signed two checkpoints that cannot both be true, made from the topics and checked offline
(docs/verifier.md, "A proof of rewriting").

``verify-rewriting`` exits 0 when the file PROVES the rewriting (a finding against the log) and 2 when it does not:
the inverse of ``activity verify``, where 0 means nothing was found."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from bernstein.commands.common import (
    UsageError,
    add_keys_flag,
    add_prefix_flag,
    non_negative_int,
    record_source,
    trusted_from,
)
from bernstein.schemas.errors import MalformedInput
from bernstein.schemas.notes import parse_checkpoint, parse_note
from bernstein.substrate.exit_codes import EXIT_MISMATCH, EXIT_OK, EXIT_OPEN
from bernstein.verifier.rewriting import RewritingReport, prove_rewriting, verify_rewriting
from bernstein.verifier.rewriting_format import NothingToProve


def register(activity_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``activity prove-rewriting`` and ``activity verify-rewriting``, in the ``activity`` group."""
    make = activity_sub.add_parser(
        "prove-rewriting",
        help="write a proof that the log signed two inconsistent checkpoints (a rewritten history), checkable offline",
        description="Recompute each journal partition's Merkle log (Kafka or a whole-topic dump), collect the tree heads "
        "signed by a key pinned as a seal key (the checkpoints topic's and each --witnessed CHECKPOINT's), and find two "
        "that one key signed and that cannot both be true: the largest head the journal reproduces and a head no larger that it does not reproduce "
        "(or two heads of one size with different roots). Write both signed notes and the consistency path between "
        "them to OUT: anyone holding the scheduler's public seal key checks it with `activity verify-rewriting`. Exit 0 "
        "written; 5 nothing to prove (the log's signed heads are consistent, or the history was cut back behind the "
        "only disagreeing head, which leaves no leaves to prove from); 3 usage error or unreadable input.",
    )
    make.add_argument(
        "--from", dest="source", default="kafka", help="kafka (default) or a dump directory of whole topics (`topic export`)"
    )
    make.add_argument("--out", type=Path, required=True, help="the proof file to write")
    make.add_argument(
        "--witnessed",
        type=Path,
        action="append",
        default=[],
        metavar="CHECKPOINT",
        help="a signed checkpoint note held outside the deployment (e.g. a witness's cosigned one); its log signature "
        "makes it a head like the topic's, its cosignatures are kept verbatim; repeat for more",
    )
    make.add_argument(
        "--evidence",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a witness's evidence file (`witness serve`'s <state>/evidence/..., `audit follow --witness`'s "
        "<state>/witness/evidence/...): both signed checkpoints it kept become heads like --witnessed ones; repeatable",
    )
    make.add_argument("--partition", type=non_negative_int, action="append", default=None, help="only this partition; repeatable")
    make.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        help="pinned keys (`bernstein keys trust`) whose seal keys may have signed a head (default: the local install's)",
    )
    add_keys_flag(make)
    add_prefix_flag(make)
    make.set_defaults(func=_prove)

    check = activity_sub.add_parser(
        "verify-rewriting",
        help="check a proof of rewriting offline (exit 0: it PROVES the log signed two inconsistent checkpoints; 2: it does not)",
        description="Check FILE from `activity prove-rewriting` with no log at hand: both notes are signed under one "
        "origin by one and the same unrevoked key pinned as a seal key (not a v1 file's key of any purpose); for two sizes, the consistency path reproduces the larger tree's signed "
        "root, and the root it derives for the smaller size is not the one the smaller note signs; for one size, the "
        "roots differ. Mind the exit codes, the inverse of `activity verify`: exit 0 = the file PROVES the log signed "
        "two inconsistent checkpoints (a rewritten or forked history); 2 = it does not prove it (the reason named); "
        "3 usage error or an unreadable file.",
    )
    check.add_argument("proof", type=Path, metavar="FILE")
    check.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        help="pinned keys (`bernstein keys trust`): the scheduler's seal key (default: the local install's)",
    )
    check.add_argument(
        "--roles", type=Path, default=None, help="roles manifest whose producer keys to pin without --trusted-keys"
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    add_keys_flag(check)
    add_prefix_flag(check)
    check.set_defaults(func=_verify)


def _prove(args: argparse.Namespace) -> int:
    from bernstein.commands.activity import write_atomically

    if args.out.is_dir():
        raise UsageError(f"--out {args.out}: is a directory; name the proof file to write")
    source, _ = record_source(args)
    handed: tuple[bytes, ...] = getattr(source, "witnessed", ())
    for path, note in zip(args.witnessed, handed, strict=True):
        try:
            parse_checkpoint(parse_note(note).text)
        except MalformedInput as exc:
            raise UsageError(f"--witnessed {path}: no signed tlog-checkpoint note ({exc})") from None
    handed += tuple(note for path in args.evidence for note in evidence_notes(path))
    trusted = trusted_from(args.trusted_keys, args.keys_dir)
    try:
        found = prove_rewriting(source, trusted, witnessed=handed, partitions=args.partition)
    except NothingToProve as exc:
        print(f"bernstein: {exc}", file=sys.stderr)
        return EXIT_OPEN
    first = found[0]
    text = first.proof.encode()
    report = verify_rewriting(text.encode("utf-8"), trusted)
    if not report.proved:  # what was found must prove itself: anything else is a defect, never a file written
        raise AssertionError(f"the proof made does not check: {[p.code for p in report.problems]}")
    write_atomically(args.out, text)
    print(
        f"wrote {args.out} ({len(text.encode())} bytes): partition {first.partition}'s log {report.origin} signed two "
        "checkpoints that cannot both be true"
    )
    smaller, larger = _roles(report)
    print(f"  {smaller}: {report.old_size} leaves, root {report.old_root} ({first.old_label})")
    print(f"  {larger}: {report.new_size} leaves, root {report.new_root} ({first.new_label})")
    if report.old_size != report.new_size:
        print(f"  the journal's first {report.old_size} leaves of the larger tree hash to {report.derived_root}")
    print(f"check it with `bernstein activity verify-rewriting {args.out}`")
    for other in found[1:]:
        print(f"partition {other.partition}'s log was rewritten too: prove it with --partition {other.partition}")
    return EXIT_OK


def _roles(report: RewritingReport) -> tuple[str, str]:
    return ("one tree", "another tree") if report.old_size == report.new_size else ("smaller tree", "larger tree")


def evidence_notes(path: Path) -> tuple[bytes, bytes]:
    """The two signed checkpoints a witness kept as evidence (the one it had cosigned, the one presented against it)."""
    try:
        document = json.loads(path.read_bytes())
        kept = (document["cosigned"].encode("utf-8"), document["presented"].encode("utf-8"))
        for note in kept:
            parse_checkpoint(parse_note(note).text)
    except OSError as exc:
        raise UsageError(f"--evidence {path}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError, AttributeError, MalformedInput) as exc:
        raise UsageError(
            f"--evidence {path}: not a witness evidence file with two signed checkpoints ('cosigned', 'presented'): {exc}"
        ) from None
    return kept


def _verify(args: argparse.Namespace) -> int:
    try:
        data = args.proof.read_bytes()
    except OSError as exc:
        raise UsageError(f"{args.proof}: cannot read it ({exc.strerror or exc})") from None
    trusted = trusted_from(args.trusted_keys, args.keys_dir, args.roles)
    report = verify_rewriting(data, trusted)
    (_render_json if args.json else _render_text)(report, sys.stdout)
    return exit_code(report)


def exit_code(report: RewritingReport) -> int:
    """0: the file proves the log signed two inconsistent checkpoints; 2: it does not (every reason is named)."""
    return EXIT_OK if report.proved else EXIT_MISMATCH


def _render_text(report: RewritingReport, out: TextIO) -> None:
    if report.old_size >= 0:
        if report.origin:
            print(f"log {report.origin}", file=out)
        for which, size, root, key in zip(
            _roles(report),
            (report.old_size, report.new_size),
            (report.old_root, report.new_root),
            (report.old_key, report.new_key),
            strict=True,
        ):
            signer = f"signed by pinned seal key {key}" if key else "not signed by a pinned seal key"
            print(f"  {which}: {size} leaves, root {root}, {signer}", file=out)
        if report.derived_root and report.old_size != report.new_size:
            print(f"  the consistency path derives the larger tree's first {report.old_size}: {report.derived_root}", file=out)
    for problem in report.problems:
        print(f"  NOT PROVED {problem.code} -- {problem.message}", file=out)
    if report.proved:
        print("rewriting PROVED -- the log signed two checkpoints that cannot both be true (exit 0)", file=out)
    else:
        print(f"rewriting NOT proved -- {len(report.problems)} problem(s) (exit {exit_code(report)})", file=out)


def _render_json(report: RewritingReport, out: TextIO) -> None:
    document = {
        "verdict": "proved" if report.proved else "not_proved",
        "exit_code": exit_code(report),
        "origin": report.origin,
        "old": {"size": report.old_size, "root": report.old_root, "seal_key": report.old_key},
        "new": {"size": report.new_size, "root": report.new_root, "seal_key": report.new_key},
        "derived_old_root": report.derived_root,
        "problems": [problem.to_json() for problem in report.problems],
    }
    json.dump(document, out, indent=2, sort_keys=True)
    out.write("\n")
