"""``bernstein demo``: the whole pipeline on this machine, ending in an offline verify."""

from __future__ import annotations

import argparse
from pathlib import Path

from bernstein.commands.common import add_prefix_flag, settings_from


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    demo = sub.add_parser(
        "demo",
        help="publish activities of every kind, schedule, seal, export and verify offline (needs infra/up)",
    )
    add_prefix_flag(demo)
    demo.add_argument(
        "--keys-dir", type=Path, default=Path(".bernstein") / "keys", help="the scheduler's keys (created if missing)"
    )
    demo.add_argument(
        "--producer-keys",
        type=Path,
        default=None,
        help="the agents' producer keys, producer 'demo-agents' (created if missing; default: producer-keys next to --keys-dir)",
    )
    demo.add_argument("--out", type=Path, default=Path("out") / "demo", help="where dumps and trust files go")
    demo.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from bernstein.demo import run_demo

    return run_demo(settings=settings_from(args), keys_dir=args.keys_dir, out_dir=args.out, producer_keys_dir=args.producer_keys)
