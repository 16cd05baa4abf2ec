"""``bernstein activity prove RUN STAGE --out F.tlog-proof`` and ``bernstein activity verify-proof F``: one activity's
proof of inclusion in its partition's signed Merkle log, made from the topics and checked offline (docs/verifier.md,
"A proof of one activity")."""

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
    record_source,
    settings_from,
    store_from,
    trusted_from,
)
from bernstein.substrate.exit_codes import (
    EXIT_MISMATCH,
    EXIT_NOT_FOUND,
    EXIT_NOT_FULLY_VERIFIED,
    EXIT_OK,
    EXIT_OPEN,
    EXIT_UNAVAILABLE,
)
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.proof import ProofReport, prove, verify_proof
from bernstein.verifier.proof_format import ActivityProof, ProofUnavailable, WitnessedCheckpointRefused
from bernstein.verifier.source_records import witnessed_checkpoints
from bernstein.verifier.tlog import note_keys, open_witnessed

_UNAVAILABLE = "PROOF_EVIDENCE_UNAVAILABLE"
_UNCHECKED = "PROOF_WITNESS_QUORUM_NOT_MET"
VERDICTS = {EXIT_OK: "verified", EXIT_MISMATCH: "mismatch", EXIT_UNAVAILABLE: "unavailable", EXIT_NOT_FULLY_VERIFIED: "unchecked"}
"""The --json ``verdict`` of each exit code of ``verify-proof``."""


def register(activity_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``activity prove`` and ``activity verify-proof``, in the ``activity`` group."""
    make = activity_sub.add_parser(
        "prove",
        help="write a proof of one activity: its journal entry, leaf index, inclusion path and signed checkpoint",
        description="Find STAGE of RUN in the journal (Kafka or a whole-topic dump), and write a C2SP tlog-proof "
        "(c2sp.org/tlog-proof): the stage's journal record as its extra data, its leaf index in the partition's Merkle "
        "log, the inclusion path, and the newest signed checkpoint that covers it and that the journal reproduces. "
        "With --witnessed, the checkpoint is instead a handed one (`witness submit --out`) of the stage's log "
        "that covers it, carried with its witness cosignatures: the largest its pinned witness policy's quorum cosigned, "
        "or, when none is, the largest (with a warning); every handed one of that log must be signed by a "
        "pinned seal key and reproduced by the journal. Anyone holding the scheduler's public seal key (and the "
        "witness policy) checks it with `activity verify-proof`, without the log. Exit 0 written; 1 no such stage; "
        "2 a handed checkpoint refused (named); 5 no signed (or handed) checkpoint covers the stage yet; "
        "3 usage error or unreadable input.",
    )
    make.add_argument("run", metavar="RUN")
    make.add_argument("stage", metavar="STAGE", help="the stage id of an activity result of RUN")
    make.add_argument(
        "--from", dest="source", default="kafka", help="kafka (default) or a dump directory of whole topics (`topic export`)"
    )
    make.add_argument("--out", type=Path, required=True, help="the proof file to write (by convention *.tlog-proof)")
    make.add_argument(
        "--witnessed",
        type=Path,
        action="append",
        default=None,
        metavar="CHECKPOINT",
        help="a cosigned checkpoint `witness submit --out DIR` wrote (DIR/<partition>.checkpoint); repeatable: the "
        "proof rests on the largest of the stage's log that covers it and that the policy's quorum cosigned (else the "
        "largest that covers it)",
    )
    make.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        help="with --witnessed: the pinned keys the handed checkpoints are checked with (the seal key, the witness "
        "policy; default: the local install's)",
    )
    add_keys_flag(make)
    add_prefix_flag(make)
    make.set_defaults(func=_prove)

    check = activity_sub.add_parser(
        "verify-proof",
        help="check a proof of one activity offline against the pinned keys (exit 0 verified, 2 mismatch, 6 not fully verified)",
        description="Check FILE from `activity prove` with no log at hand: the checkpoint is signed by a pinned seal key "
        "under its origin, the origin is the log of the entry's partition, the entry's leaf and path hash to the signed "
        "root, the stored entry hash is the entry's, and the producer's signature on the stage verifies with a pinned "
        "producer key. With a witness policy pinned (`keys trust --witness-policy`), the note's cosignatures by its "
        "witnesses are verified and must meet its quorum. With --cas, each observation's blob is reattached and "
        "re-hashed. Exit 0 verified; 2 mismatch (named, with the leaf index); 6 not fully verified (the policy's "
        "quorum did not cosign the checkpoint); 3 usage error, an unreadable file or a content store that does not answer.",
    )
    check.add_argument("proof", type=Path, metavar="FILE")
    check.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        help="pinned keys (`bernstein keys trust`): the scheduler's seal key, the producers' keys and any witness "
        "policy (default: the local install's, as for activity verify)",
    )
    check.add_argument(
        "--roles", type=Path, default=None, help="roles manifest whose producer keys to pin without --trusted-keys"
    )
    check.add_argument("--cas", default=None, help="s3 or a CAS directory: reattach and re-hash the stage's evidence")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    add_keys_flag(check)
    add_prefix_flag(check)
    check.set_defaults(func=_verify_proof)


def _prove(args: argparse.Namespace) -> int:
    from bernstein.commands.activity import write_atomically

    if args.out.is_dir():
        raise UsageError(f"--out {args.out}: is a directory; name the proof file to write")
    source, _ = record_source(args)
    witnessed = witnessed_checkpoints(source)
    trusted = trusted_from(args.trusted_keys, args.keys_dir) if witnessed else None
    try:
        proof = prove(source, args.run, args.stage, witnessed=witnessed, trusted=trusted)
    except ProofUnavailable as exc:
        print(f"bernstein: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND if exc.not_found else EXIT_OPEN
    except WitnessedCheckpointRefused as exc:
        print(f"bernstein: {exc.problem}: --witnessed {args.witnessed[exc.position]}: {exc}", file=sys.stderr)
        return EXIT_MISMATCH
    text = proof.encode()
    write_atomically(args.out, text)
    under = "" if trusted is None else _cosigned_words(proof, trusted)
    print(
        f"wrote {args.out} ({len(text.encode())} bytes): stage {args.stage!r} of run {args.run!r}, leaf {proof.index}, "
        f"{len(proof.path)} path hashes{under}; check it with `bernstein activity verify-proof {args.out}`"
    )
    return EXIT_OK


def _cosigned_words(proof: ActivityProof, trusted: TrustedKeys) -> str:
    """``, under the handed checkpoint of N leaves cosigned by ...``: with a witness policy pinned, the policy's witnesses
    whose cosignatures verified (and the other signature lines, not checked); without one, the note's further
    signature lines, never called cosignatures since no key checked them. With a policy whose quorum is not among the
    cosigners, a warning: verify-proof will say so."""
    policy = trusted.policy()
    head = open_witnessed(proof.note, note_keys(trusted), policy)
    if head is None:  # prove checked it: cannot happen
        return ""
    words = f", under the handed checkpoint of {head.checkpoint.size} leaves"
    unknown = ", ".join(head.unknown)
    if policy is None:
        if not unknown:
            return words + " (no witness policy pinned; it carries no further signature line)"
        return words + f"; further signature lines, not checked (no witness policy pinned): {unknown}"
    words += f" cosigned by {', '.join(head.cosigned) or 'no witness of the pinned policy'}"
    if unknown:
        words += f"; by keys the policy does not name (not checked): {unknown}"
    if not policy.satisfied(frozenset(head.cosigned)):
        print(
            f"bernstein: warning: the pinned witness policy asks for {policy.describe()}; `activity verify-proof` with "
            "it will say PROOF_WITNESS_QUORUM_NOT_MET (exit 6) until a checkpoint its quorum cosigned is handed",
            file=sys.stderr,
        )
    return words


def _verify_proof(args: argparse.Namespace) -> int:
    try:
        data = args.proof.read_bytes()
    except OSError as exc:
        raise UsageError(f"{args.proof}: cannot read it ({exc.strerror or exc})") from None
    trusted = trusted_from(args.trusted_keys, args.keys_dir, args.roles)
    cas = store_from(args.cas, settings_from(args)) if args.cas is not None else None
    report = verify_proof(data, trusted, cas)
    (_render_json if args.json else _render_text)(report, sys.stdout)
    return exit_code(report)


def exit_code(report: ProofReport) -> int:
    """0 verified; 2 any problem the bytes show; 6 only the pinned witness policy's quorum missing (with or without a
    content store that did not answer); 3 only a content store that did not answer."""
    codes = {problem.code for problem in report.problems}
    if not codes:
        return EXIT_OK
    if codes - {_UNAVAILABLE, _UNCHECKED}:
        return EXIT_MISMATCH
    return EXIT_NOT_FULLY_VERIFIED if _UNCHECKED in codes else EXIT_UNAVAILABLE


def _witness_words(report: ProofReport) -> str:
    """Which cosignatures were checked, and which signature lines were not (no key for them)."""
    unknown = ", ".join(report.unknown_signatures)
    if not report.witness_policy:
        return f"no witness policy pinned; further signatures (not checked): {unknown}" if unknown else ""
    if any(problem.code == "PROOF_COSIGNATURE_INVALID" for problem in report.problems):
        words = f"witness policy {report.witness_policy}: a pinned witness's cosignature does not verify, so none counts"
    else:
        verified = ", ".join(report.witnesses) or "no pinned witness"
        words = f"witness policy {report.witness_policy}: cosignatures checked and verified: {verified}"
    return words + (f"; by keys the policy does not name (not checked): {unknown}" if unknown else "")


def _render_text(report: ProofReport, out: TextIO) -> None:
    if report.run_id:
        print(f"activity {report.stage_id!r} ({report.kind}) of run {report.run_id!r} by {report.producer}", file=out)
        print(f"  entry {report.entry_hash}; artifact {report.artifact_hash}; evidence set {report.evidence_set_hash}", file=out)
        for kind, ref, digest, _size in report.observations:
            state = report.evidence.get(digest, "not reattached")
            print(f"  observation {kind} {ref}: {digest} ({state})", file=out)
    if report.origin:
        print(f"  leaf {report.index} of {report.tree_size} in log {report.origin}, root {report.root}", file=out)
        witnesses = _witness_words(report)
        if witnesses:
            print(f"  {witnesses}", file=out)
    for problem in report.problems:
        label = "NOT CHECKED" if problem.code in (_UNAVAILABLE, _UNCHECKED) else "MISMATCH"
        print(f"  {label} {problem.code} -- {problem.message}", file=out)
    code = exit_code(report)
    if code == EXIT_OK:
        reattached = f"; {report.evidence_checked} evidence blobs reattached" if report.evidence_checked else ""
        cosigned = f", cosigned by {', '.join(report.witnesses)}" if report.witnesses else ""
        print(f"proof verified -- included in the log's signed tree head{cosigned}{reattached}", file=out)
    elif code == EXIT_NOT_FULLY_VERIFIED:
        print(
            f"proof not fully verified -- the witness policy's quorum did not cosign the tree head; nothing that was "
            f"checked failed, but this is not a pass (exit {code})",
            file=out,
        )
    elif code == EXIT_UNAVAILABLE:
        print(f"proof not checked -- the content store did not answer; nothing was judged (exit {code})", file=out)
    else:
        print(f"proof NOT verified -- {len(report.problems)} problem(s) (exit {code})", file=out)


def _render_json(report: ProofReport, out: TextIO) -> None:
    code = exit_code(report)
    document = {
        "verdict": VERDICTS[code],
        "exit_code": code,
        "run_id": report.run_id,
        "stage_id": report.stage_id,
        "kind": report.kind,
        "producer": report.producer,
        "producer_key_id": report.producer_key_id,
        "entry_hash": report.entry_hash,
        "artifact_hash": report.artifact_hash,
        "evidence_set_hash": report.evidence_set_hash,
        "observations": [{"kind": k, "ref": r, "content_hash": d, "size": s} for k, r, d, s in report.observations],
        "evidence": report.evidence,
        "log": {"origin": report.origin, "leaf_index": report.index, "tree_size": report.tree_size, "root": report.root},
        "witness_policy": report.witness_policy or None,
        "cosigned_by": list(report.witnesses),
        "further_signatures": list(report.unknown_signatures),
        "problems": [problem.to_json() for problem in report.problems],
    }
    json.dump(document, out, indent=2, sort_keys=True)
    out.write("\n")
