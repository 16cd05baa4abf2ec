"""``bernstein witness``: run a transparency-log witness for someone else's journal (C2SP tlog-witness).

    bernstein witness init --keys DIR --name NAME
    bernstein witness serve --keys DIR --state DIR --log VKEY [--log ORIGIN=VKEY ...] [--host H] [--port N] [--prefix P]

``init`` makes the witness's own Ed25519 key and prints its verifier key (what a policy pins).
``serve`` cosigns, over HTTP (``POST <prefix>/add-checkpoint``), checkpoints of the logs named by
``--log``: a log's verifier key, whose name is its checkpoints' origin, or ``ORIGIN=VKEY`` when they
differ. It cosigns a checkpoint only when a consistency proof shows it extends the last one it
cosigned for that origin, persists it first, and keeps a signed checkpoint that contradicts it as
evidence in ``<state>/evidence``. Exit 0 when stopped (SIGINT/SIGTERM); 3 for a usage error or
unusable keys. docs/checkpoints.md, "Witnesses".
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bernstein.commands.common import UsageError, add_prefix_flag, record_source
from bernstein.schemas import notes
from bernstein.substrate.cli_args import command_group, non_negative_int
from bernstein.substrate.exit_codes import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE


def register(subparsers: Any) -> None:
    commands = command_group(subparsers, "witness", help="run a transparency-log witness that cosigns checkpoints")
    init = commands.add_parser("init", help="make the witness's own key and print its verifier key")
    init.add_argument("--keys", type=Path, required=True, metavar="DIR", help="directory for the witness key (made 0700)")
    init.add_argument("--name", required=True, help="the witness's key name, e.g. witness.example.org/w1")
    init.set_defaults(func=_init)
    serve = commands.add_parser(
        "serve",
        help="cosign consistent checkpoints of the given logs over HTTP (C2SP tlog-witness add-checkpoint)",
        description="A witness in its own trust domain: its own key (witness init) and its own state directory.",
    )
    serve.add_argument("--keys", type=Path, required=True, metavar="DIR", help="the witness key's directory (witness init)")
    serve.add_argument("--state", type=Path, required=True, metavar="DIR", help="where the witness keeps what it cosigned")
    serve.add_argument(
        "--log",
        dest="logs",
        action="append",
        required=True,
        metavar="[ORIGIN=]VKEY",
        help="a log to witness: its verifier key (origin = the key's name), or ORIGIN=VKEY; repeatable",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=non_negative_int, default=7380, help="port (default: 7380; 0: any free port)")
    serve.add_argument("--prefix", default="", help="URL path prefix of add-checkpoint (default: none)")
    serve.set_defaults(func=_serve)
    submit = commands.add_parser(
        "submit",
        help="send each partition's newest signed checkpoint to witnesses and write the cosigned checkpoints",
        description="The log's side of tlog-witness, run beside the scheduler: for each partition (or --partition), the "
        "newest signed checkpoint whose root the journal reproduces is sent to every --witness with the consistency "
        "proof from the size that witness last cosigned; the cosignatures are added to the note and written to "
        "OUT/<partition>.checkpoint, what `activity verify --witnessed` takes. Exit 0 when every witness cosigned, "
        "2 when one refused (its answer is printed), 3 for a usage error or a partition with nothing to witness.",
    )
    submit.add_argument(
        "--witness",
        dest="witnesses",
        action="append",
        required=True,
        metavar="URL",
        help="a witness's submission prefix URL (http://host:port[/prefix]); repeatable, each with its --witness-key",
    )
    submit.add_argument(
        "--witness-key",
        dest="witness_keys",
        action="append",
        required=True,
        metavar="VKEY",
        help="the cosignature key (vkey) of the --witness at the same position: only lines that verify as its "
        "cosignature of the checkpoint are kept",
    )
    submit.add_argument("--from", dest="source", default="kafka", help="kafka (default) or a dump directory of whole topics")
    submit.add_argument(
        "--partition", type=non_negative_int, action="append", default=None, help="only this partition; repeatable"
    )
    submit.add_argument("--out", type=Path, required=True, metavar="DIR", help="where to write <partition>.checkpoint")
    add_prefix_flag(submit)
    submit.set_defaults(func=_submit)


def parse_logs(values: list[str]) -> dict[str, list[notes.NoteVerifier]]:
    """``--log`` values as origin -> the log's verifier keys (``MalformedVerifierKey`` names a bad one)."""
    logs: dict[str, list[notes.NoteVerifier]] = {}
    for value in values:
        origin, sep, vkey = value.partition("=") if "=" in value.split("+", 1)[0] else ("", "", value)
        verifier = notes.NoteVerifier.from_vkey(vkey)
        if verifier.sig_type != notes.SIG_ED25519:
            raise notes.MalformedVerifierKey(f"{verifier.name}: a log signs its checkpoints with an Ed25519 key (type 0x01)")
        logs.setdefault(origin if sep else verifier.name, []).append(verifier)
    return logs


def _init(args: argparse.Namespace) -> int:
    from bernstein.verifier.witness.keys import init_witness_key

    try:
        signer = init_witness_key(args.keys, args.name)
    except notes.MalformedNote as exc:
        print(f"witness init: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    print(signer.verifier.vkey)
    print(f"witness init: key in {args.keys}; pin the line above in the policies that trust this witness", file=sys.stderr)
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    from bernstein.verifier.witness.core import Witness
    from bernstein.verifier.witness.http import make_server
    from bernstein.verifier.witness.keys import load_witness_key
    from bernstein.verifier.witness.store import FileWitnessStore

    try:
        logs = parse_logs(args.logs)
    except notes.MalformedNote as exc:
        print(f"witness serve: --log: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    signer = load_witness_key(args.keys)
    witness = Witness(signer, logs, FileWitnessStore(args.state), clock=time.time)
    try:
        server = make_server(witness, args.host, args.port, prefix=args.prefix)
    except OSError as exc:
        print(f"witness serve: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    host, port = str(server.server_address[0]), int(server.server_address[1])
    prefix = args.prefix.rstrip("/")
    print(
        f"witness: serving http://{host}:{port}{prefix}/add-checkpoint as {witness.vkey} for {', '.join(sorted(logs))}",
        file=sys.stderr,
        flush=True,
    )

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print("witness: stopped", file=sys.stderr)
    return EXIT_OK


def _submit(args: argparse.Namespace) -> int:
    from bernstein.commands.activity import write_atomically
    from bernstein.verifier.witness.client import NothingToWitness, collect

    if len(args.witnesses) != len(args.witness_keys):
        raise UsageError(f"{len(args.witnesses)} --witness but {len(args.witness_keys)} --witness-key: give one key per witness")
    try:
        witnesses = [
            (url, notes.NoteVerifier.from_vkey(vkey)) for url, vkey in zip(args.witnesses, args.witness_keys, strict=True)
        ]
    except notes.MalformedNote as exc:
        raise UsageError(f"--witness-key: {exc}") from None
    source, _ = record_source(args)
    partitions = args.partition if args.partition is not None else source.partitions("checkpoints")
    if not partitions:
        raise UsageError(f"{source.describe()} holds no checkpoints: nothing to witness yet")
    args.out.mkdir(parents=True, exist_ok=True)
    refused = False
    for partition in partitions:
        try:
            collected = collect(source, partition, witnesses)
        except NothingToWitness as exc:
            raise UsageError(str(exc)) from None
        path = args.out / f"{partition}.checkpoint"
        write_atomically(path, collected.cosigned.decode("utf-8"))
        for answer in collected.answers:
            if answer.status == 200:
                names = ", ".join(sig.name for sig in answer.cosignatures)
                print(f"partition {partition}: {answer.url} cosigned {collected.origin} at size {collected.size} ({names})")
            else:
                refused = True
                status = f"HTTP {answer.status}" if answer.status else "no answer"
                print(f"partition {partition}: {answer.url} refused ({status}): {answer.detail}")
        print(f"partition {partition}: wrote {path}")
    return EXIT_MISMATCH if refused else EXIT_OK
