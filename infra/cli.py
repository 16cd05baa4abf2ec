"""The command line's parser and ``main``: arguments to a ``Ctx`` and a subcommand, an ``InfraError`` to its
message and exit 1 (infra/infra.py runs it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.base import CLUSTER_NODES, EXTERNAL_READY_TIMEOUT_S, READY_TIMEOUT_S, REPO, InfraError, warn
from infra.commands import cmd_down, cmd_node, cmd_prepare, cmd_reset, cmd_restart_kafka, cmd_status, cmd_up
from infra.context import Ctx

COMMANDS = {
    "up": cmd_up,
    "prepare": cmd_prepare,
    "down": cmd_down,
    "status": cmd_status,
    "restart-kafka": cmd_restart_kafka,
    "node": cmd_node,
    "reset": cmd_reset,
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root",
        type=Path,
        default=argparse.SUPPRESS,
        help="project root; state lives in ROOT/.infra (default: the repository root)",
    )
    common.add_argument(
        "--timeout",
        type=float,
        default=argparse.SUPPRESS,
        help=f"readiness deadline in seconds (default {READY_TIMEOUT_S:.0f}; "
        f"{EXTERNAL_READY_TIMEOUT_S:.0f} for external services)",
    )
    ap = argparse.ArgumentParser(
        prog="infra.py",
        parents=[common],
        description="Local Kafka (KRaft) + MinIO for bernstein.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, func in COMMANDS.items():
        parser = sub.add_parser(name, parents=[common], help=(func.__doc__ or "").strip() or None)
        if name == "up":
            parser.add_argument(
                "--secure",
                action="store_true",
                help="broker with a SASL_SSL listener (SCRAM-SHA-512 users admin, scheduler, producer, auditor), "
                "the KRaft authorizer and no access without an ACL; without it the broker is plaintext. "
                "A running broker of the other mode is restarted (each mode has its own data dir)",
            )
            parser.add_argument(
                "--keep-mode",
                action="store_true",
                help="a running broker keeps its mode and its number of brokers (--secure and --brokers then only "
                "apply when Kafka is started)",
            )
            parser.add_argument(
                "--brokers",
                type=int,
                choices=(1, len(CLUSTER_NODES)),
                default=1,
                help="1 (default): one broker; 3: a local three-node KRaft cluster (each node broker and controller), "
                "topics with replication factor 3 and min.insync.replicas 2. A running Kafka of the other kind is "
                "stopped (each keeps its own data dirs)",
            )
        if name == "node":
            parser.add_argument("action", choices=("stop", "start"), help="stop (SIGTERM, clean shutdown) or start the node")
            parser.add_argument("number", type=int, choices=CLUSTER_NODES, help="the node: 1, 2 or 3")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    root = Path(getattr(args, "root", REPO)).expanduser().resolve()
    try:
        ctx = Ctx(
            root,
            getattr(args, "timeout", None),
            getattr(args, "secure", False),
            getattr(args, "keep_mode", False),
            getattr(args, "brokers", 1),
            getattr(args, "number", 0),
            getattr(args, "action", ""),
        )
        return COMMANDS[args.command](ctx)
    except InfraError as e:
        warn(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        warn("interrupted; processes already started keep running (`infra/down` stops them)")
        return 130
