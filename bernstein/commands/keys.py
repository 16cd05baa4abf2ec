"""``bernstein keys``: create, show and export (as a trust file) the install keys."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bernstein.commands.common import add_keys_flag, command_group
from substrate.keys import TrustedKeys, default_keys_dir, init_keys, load_keys


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys_sub = command_group(sub, "keys", help="install keys: an Ed25519 signing key and an HMAC audit key")

    init = keys_sub.add_parser("init", help="create the keys (refuses to overwrite)")
    init.add_argument(
        "--dir", type=Path, default=None, help="key directory (default: $BERNSTEIN_KEYS_DIR or ~/.local/state/bernstein/keys)"
    )
    init.set_defaults(func=_init)

    show = keys_sub.add_parser("show", help="print key ids and the public key")
    add_keys_flag(show)
    show.set_defaults(func=_show)

    trust = keys_sub.add_parser("trust", help="write a trusted-keys file for verifiers")
    add_keys_flag(trust)
    trust.add_argument("--out", type=Path, required=True, help="file to write")
    trust.add_argument(
        "--no-audit-key",
        action="store_true",
        help="leave the HMAC audit key out (then verifiers cannot check audit MACs)",
    )
    trust.set_defaults(func=_trust)


def _init(args: argparse.Namespace) -> int:
    directory = args.dir or default_keys_dir()
    keys = init_keys(directory)
    print(f"created keys in {directory}")
    print(f"  signing key  {keys.signer.key_id}  (Ed25519, install.ed25519.key, mode 0600)")
    print(f"  audit key    {keys.audit.key_id}  (HMAC-SHA256, audit.hmac.key, mode 0600)")
    return 0


def _show(args: argparse.Namespace) -> int:
    directory = args.keys_dir or default_keys_dir()
    keys = load_keys(directory)
    print(
        json.dumps(
            {
                "directory": str(directory),
                "signing_key_id": keys.signer.key_id,
                "public_key": keys.signer.public_key_raw.hex(),
                "audit_key_id": keys.audit.key_id,
            },
            indent=2,
        )
    )
    return 0


def _trust(args: argparse.Namespace) -> int:
    keys = load_keys(args.keys_dir or default_keys_dir())
    trusted = TrustedKeys.from_install(keys, include_audit_key=not args.no_audit_key)
    trusted.write(args.out)
    print(
        f"wrote {args.out}: pins signing key {keys.signer.key_id}"
        + ("" if args.no_audit_key else f" and audit key {keys.audit.key_id}")
    )
    return 0
