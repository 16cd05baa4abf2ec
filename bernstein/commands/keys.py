"""``bernstein keys``: the scheduler's key ring and producer identities (docs/security.md).

    bernstein keys init [--dir D]                       scheduler: seal key + audit key
    bernstein keys init --producer NAME [--dir D]       producer host: producer, lineage, redaction keys;
                                                        prints the [[producers]] entry to register it
    bernstein keys show [--dir D] [--producer]          every key: id, purpose, lifetime, status
    bernstein keys rotate --purpose seal|audit [--dir D] [--revoke] [--at-ms T]
    bernstein keys rotate --producer [--dir D] [--revoke] [--at-ms T]
    bernstein keys trust --out F [--dir SCHED] [--manifest roles.toml] [--no-audit-key]

Without ``--dir``, scheduler commands use ``$BERNSTEIN_KEYS_DIR`` (else
``~/.local/state/bernstein/keys``) and ``--producer`` commands use
``$BERNSTEIN_PRODUCER_KEYS_DIR`` (else ``~/.local/state/bernstein/producer-keys``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bernstein.commands.common import UsageError, command_group
from bernstein.consumers.manifest import load_manifest, trusted_producer_keys
from bernstein.producers.identity import default_producer_keys_dir
from bernstein.schemas.notes import is_valid_key_name, log_verifier
from bernstein.schemas.tlog_policy import MalformedPolicy
from bernstein.substrate.exit_codes import EXIT_OK
from bernstein.substrate.keys import (
    KEYRING_FILE,
    KeyPurpose,
    KeyRing,
    KeyStatus,
    RingKey,
    TrustedKeys,
    default_keys_dir,
    init_keys,
    init_producer_keys,
    load_keys,
    load_ring,
    rotate_key,
)

_PRODUCER_PURPOSES = (KeyPurpose.PRODUCER.value, KeyPurpose.LINEAGE.value, KeyPurpose.REDACTION.value)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys_sub = command_group(sub, "keys", help="key rings: the scheduler's seal and audit keys, a producer host's own identity")

    init = keys_sub.add_parser(
        "init",
        help="create the scheduler's keys, or with --producer NAME a producer host's keys (refuses to overwrite)",
    )
    _dir_flag(init)
    init.add_argument(
        "--producer",
        metavar="NAME",
        default=None,
        help="create a producer identity NAME (the producer.id of its submissions) instead of scheduler keys",
    )
    init.set_defaults(func=_init)

    show = keys_sub.add_parser("show", help="list every key of a key directory: id, purpose, lifetime, status")
    _dir_flag(show)
    show.add_argument("--producer", action="store_true", help="the producer key directory is the default --dir")
    show.add_argument(
        "--log-origin",
        default=None,
        metavar="ORIGIN",
        help="also print each seal key's note verifier key (vkey) for the partition log ORIGIN "
        "('<log name>/<input topic>/<partition>/e<epoch>'): what a witness is started with (`witness serve --log`)",
    )
    show.set_defaults(func=_show)

    rotate = keys_sub.add_parser(
        "rotate",
        help="replace a key at a time T: the old one is kept for records before T (or destroyed with --revoke)",
    )
    _dir_flag(rotate)
    rotate.add_argument(
        "--purpose",
        choices=("seal", "audit", *_PRODUCER_PURPOSES),
        default=None,
        help="scheduler key to rotate: seal or audit (with --producer: producer (default), lineage or redaction)",
    )
    rotate.add_argument("--producer", action="store_true", help="rotate a producer host's key (default: its signing key)")
    rotate.add_argument(
        "--revoke",
        action="store_true",
        help="the old key is compromised: destroy its private part; the new key takes over its whole range",
    )
    rotate.add_argument("--at-ms", type=int, default=None, metavar="T", help="rotation time, ms since the epoch (default: now)")
    rotate.set_defaults(func=_rotate)

    trust = keys_sub.add_parser(
        "trust", help="write a trusted-keys file (v2) for verifiers: seal/audit keys and registered producer keys"
    )
    _dir_flag(trust)
    trust.add_argument("--out", type=Path, required=True, help="file to write")
    trust.add_argument(
        "--manifest",
        type=Path,
        default=None,
        metavar="ROLES_TOML",
        help="the manifest the scheduler runs with; pins every [[producers]] key (default: $BERNSTEIN_ROLES)",
    )
    trust.add_argument(
        "--no-audit-key",
        action="store_true",
        help="leave the HMAC audit keys out (then verifiers cannot check audit MACs)",
    )
    trust.add_argument(
        "--witness-policy",
        type=Path,
        default=None,
        metavar="POLICY",
        help="pin a witness policy (C2SP tlog-policy: witness lines with cosignature vkeys, groups, one quorum); "
        "`activity verify` then needs, per partition, a checkpoint the quorum cosigned (--witnessed) "
        "(docs/checkpoints.md, 'Witnesses')",
    )
    trust.add_argument(
        "--witness-max-lag",
        type=int,
        default=None,
        metavar="SECONDS",
        help="with --witness-policy: how long a journal record may stay outside the largest checkpoint the witnesses "
        "cosigned, counted at that cosignature; an older unwitnessed tail is not fully verified (exit 6)",
    )
    trust.set_defaults(func=_trust)


def _dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        "--keys-dir",
        dest="dir",
        type=Path,
        default=None,
        help="key directory (default: $BERNSTEIN_KEYS_DIR, or $BERNSTEIN_PRODUCER_KEYS_DIR with --producer)",
    )


# ---------------------------------------------------------------------------
# init
# ---------------------------------------------------------------------------


def _init(args: argparse.Namespace) -> int:
    if args.producer is not None:
        return _init_producer(args.dir or default_producer_keys_dir(), args.producer)
    directory = args.dir or default_keys_dir()
    keys = init_keys(directory)
    print(f"created keys in {directory}: the scheduler's seal and audit keys (they never leave the scheduler host)")
    print(f"  seal key   {keys.signer.key_id}  (Ed25519, install.ed25519.key, mode 0600)")
    print(f"  audit key  {keys.audit.key_id}  (HMAC-SHA256, audit.hmac.key, mode 0600)")
    print("register each producer host in the manifest ([[producers]]; `bernstein keys init --producer NAME` prints it)")
    return EXIT_OK


def _init_producer(directory: Path, name: str) -> int:
    if not name or len(name) > 256 or not name.isprintable():
        raise UsageError(f"--producer {name!r}: a producer name is 1 to 256 printable characters (its producer.id)")
    keys = init_producer_keys(directory, name)
    print(f"created the keys of producer {name!r} in {directory} (they never leave this host)")
    print(f"  producer key   {keys.signer.key_id}  (Ed25519, signs submissions, lineage entries, receipts)")
    print(f"  lineage key    {keys.lineage.key_id}  (HMAC-SHA256, envelopes lineage entries; stays here)")
    print(f"  redaction key  {keys.redaction.key_id}  (HMAC-SHA256, typed-value digests; never exported)")
    print("register it in the scheduler's manifest (roles.toml), granting the roles it may take:")
    print("")
    print(manifest_snippet(name, [_manifest_key(keys.ring.current(KeyPurpose.PRODUCER))]))
    return EXIT_OK


def manifest_snippet(
    name: str, keys: list[dict[str, Any]], *, roles: list[str] | None = None, agent_kinds: list[str] | None = None
) -> str:
    """A ``[[producers]]`` entry for ``name`` with these ``[[producers.keys]]`` (TOML).

    Without ``roles`` / ``agent_kinds`` it is a template (no role granted, comments say what to fill in).
    """
    lines = ["[[producers]]", f"name = {json.dumps(name)}"]
    if roles is None:
        lines.append('roles = []                      # e.g. ["scout"]: roles from [[roles]] it may submit under')
    else:
        lines.append(f"roles = {json.dumps(roles)}")
    if agent_kinds is None:
        lines.append('# agent_kinds = ["browser"]     # a browser worker: its computer-use actions carry no role')
        lines.append(
            f"# run_prefixes = [{json.dumps(name.split('@')[0] + '-')}]  # run ids it owns: no other producer may open, "
            "add to or close them"
        )
        lines.append("# collaborators = []            # producers that may add to its runs (a multi-agent run)")
    else:
        lines.append(f"agent_kinds = {json.dumps(agent_kinds)}")
    for key in keys:
        lines.append("  [[producers.keys]]")
        lines.append(f'  public_key = "{key["public_key"]}"   # key id {key["key_id"]}')
        lines.append(f"  valid_from_ms = {key['valid_from_ms']}")
        if key.get("valid_until_ms") is not None:
            lines.append(f"  valid_until_ms = {key['valid_until_ms']}   # {key['status']}")
    return "\n".join(lines)


def producer_manifest_keys(ring: KeyRing) -> list[dict[str, Any]]:
    """Every producer signing key of a producer's ring, as ``[[producers.keys]]`` entries take them."""
    return [_manifest_key(key) for key in ring.of(KeyPurpose.PRODUCER)]


def _manifest_key(key: RingKey) -> dict[str, Any]:
    assert key.public_key_raw is not None
    return {
        "public_key": key.public_key_raw.hex(),
        "key_id": key.key_id,
        "valid_from_ms": key.validity.valid_from_ms,
        "valid_until_ms": key.validity.valid_until_ms,
        "status": key.status.value,
    }


# ---------------------------------------------------------------------------
# show
# ---------------------------------------------------------------------------


def _show(args: argparse.Namespace) -> int:
    directory = args.dir or (default_producer_keys_dir() if args.producer else default_keys_dir())
    ring = _ring(directory)
    document: dict[str, Any] = {
        "directory": str(directory),
        "kind": "scheduler" if ring.producer is None else "producer",
        "producer": ring.producer,
        "keys": [_shown(key) for key in ring.keys],
    }
    if args.log_origin is not None:
        if not is_valid_key_name(args.log_origin) or args.log_origin.count("/") < 3:
            raise UsageError(f"--log-origin {args.log_origin!r}: a log origin is '<log name>/<input topic>/<partition>/e<epoch>'")
        document["log_vkeys"] = [
            log_verifier(args.log_origin, key.public_key_raw).vkey
            for key in ring.of(KeyPurpose.SEAL)
            if key.public_key_raw is not None and key.status != KeyStatus.REVOKED
        ]
    print(json.dumps(document, indent=2))
    return EXIT_OK


def _shown(key: RingKey) -> dict[str, Any]:
    item = key.to_json()
    item["private_part"] = key.signer is not None or key.secret is not None
    item["lifetime"] = key.validity.describe()
    return item


def _ring(directory: Path) -> KeyRing:
    """The key ring of ``directory``; a scheduler directory from before key rings reads as its two keys."""
    if (directory / KEYRING_FILE).exists():
        return load_ring(directory)
    return load_keys(directory).key_ring


# ---------------------------------------------------------------------------
# rotate
# ---------------------------------------------------------------------------


def _rotate(args: argparse.Namespace) -> int:
    now_ms = args.at_ms if args.at_ms is not None else int(time.time() * 1000)
    if now_ms < 0:
        raise UsageError(f"--at-ms {now_ms}: a time in milliseconds since the epoch is not negative")
    if args.producer:
        purpose = KeyPurpose(args.purpose or KeyPurpose.PRODUCER.value)
        if purpose.value not in _PRODUCER_PURPOSES:
            raise UsageError(f"--purpose {purpose.value} is a scheduler key; a producer host rotates producer|lineage|redaction")
        directory = args.dir or default_producer_keys_dir()
        ring = _ring(directory)
        if ring.producer is None:
            raise UsageError(f"{directory} holds a scheduler's keys; drop --producer to rotate them (--purpose seal|audit)")
    else:
        if args.purpose not in ("seal", "audit"):
            raise UsageError("say which scheduler key to rotate: --purpose seal or --purpose audit (or --producer)")
        purpose = KeyPurpose(args.purpose)
        directory = args.dir or default_keys_dir()
        ring = _ring(directory)
        if ring.producer is not None:
            raise UsageError(f"{directory} holds the keys of producer {ring.producer!r}: pass --producer to rotate them")
    old, new = rotate_key(directory, purpose, now_ms=now_ms, revoke=args.revoke)
    verb = "revoked" if args.revoke else "retired"
    print(f"rotated the {purpose.value} key in {directory} at {now_ms}")
    print(
        f"  {verb:<8} {old.key_id}  valid {old.validity.describe()}"
        + ("  (private part destroyed)" if args.revoke and old.public_key_raw else "")
    )
    print(f"  new      {new.key_id}  valid {new.validity.describe()}")
    if purpose == KeyPurpose.PRODUCER:
        assert ring.producer is not None
        print(f"update producer {ring.producer!r} in the scheduler's manifest: end the old key, add the new one")
        print("(the scheduler refuses the old key's submissions stamped at or after valid_until_ms: PRODUCER_KEY_NOT_VALID)")
        print("")
        print(manifest_snippet(ring.producer, [_manifest_key(old), _manifest_key(new)]))
        print("")
        print("then restart the scheduler and re-export trust: bernstein keys trust --manifest <roles.toml> --out <file>")
    elif purpose in (KeyPurpose.SEAL, KeyPurpose.AUDIT):
        print("restart the scheduler, then re-export trust for verifiers: bernstein keys trust --out <file>")
        print(
            "(a scheduler still running keeps its old ring: inputs stamped from the rotation time on would be signed "
            "outside the old key's lifetime. Stop it before rotating, or rotate with --at-ms a moment ahead and restart "
            "before then.)"
        )
    return EXIT_OK


# ---------------------------------------------------------------------------
# trust
# ---------------------------------------------------------------------------


def export_trust(ring: KeyRing, manifest: Path | None, *, include_audit_key: bool = True) -> TrustedKeys:
    """What ``keys trust`` writes: every seal (and audit) key of the scheduler's ``ring`` with its lifetime,
    plus every producer key ``manifest`` registers, with its owner and lifetime."""
    trusted = TrustedKeys.from_ring(ring, include_audit_key=include_audit_key)
    if manifest is not None:
        trusted = trusted.merged(trusted_producer_keys(load_manifest(manifest).producers))
    return trusted


def _trust(args: argparse.Namespace) -> int:
    directory = args.dir or default_keys_dir()
    ring = _ring(directory)
    if ring.producer is not None:
        raise UsageError(
            f"{directory} holds the keys of producer {ring.producer!r}: trust is exported from the scheduler's key "
            "directory (--dir), and producer keys from the manifest (--manifest)"
        )
    manifest_path = args.manifest or (Path(os.environ["BERNSTEIN_ROLES"]) if os.environ.get("BERNSTEIN_ROLES") else None)
    trusted = export_trust(ring, manifest_path, include_audit_key=not args.no_audit_key)
    if args.witness_policy is not None:
        try:
            policy = args.witness_policy.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--witness-policy {args.witness_policy}: cannot read it ({exc})") from None
        if args.witness_max_lag is not None and args.witness_max_lag < 0:
            raise UsageError(f"--witness-max-lag {args.witness_max_lag}: a number of seconds is not negative")
        try:
            trusted = trusted.with_witness_policy(policy, args.witness_max_lag)
        except MalformedPolicy as exc:
            raise UsageError(f"--witness-policy {args.witness_policy}: {exc}") from None
    elif args.witness_max_lag is not None:
        raise UsageError("--witness-max-lag bounds what witnesses cosigned: give it with --witness-policy")
    producers = sum(1 for entry in trusted.entries.values() if entry.purpose == KeyPurpose.PRODUCER)
    trusted.write(args.out)
    counts: dict[str, int] = {}
    for entry in trusted.entries.values():
        counts[entry.purpose.value] = counts.get(entry.purpose.value, 0) + 1
    shown = ", ".join(f"{counts.get(p, 0)} {p}" for p in ("seal", "audit", "producer"))
    print(f"wrote {args.out} ({trusted.to_json()['format']}): {shown} key(s)")
    pinned_policy = trusted.policy()
    if pinned_policy is not None:
        print(f"  witness policy: {pinned_policy.describe()} ({len(pinned_policy.witnesses)} witness key(s))")
    for entry in sorted(trusted.entries.values(), key=lambda e: (e.purpose.value, e.validity.valid_from_ms, e.key_id)):
        owner = f" {entry.producer!r}" if entry.producer else ""
        status = "" if entry.status == KeyStatus.ACTIVE else f" {entry.status.value}"
        print(f"  {entry.purpose.value:<8} {entry.key_id}{owner} valid {entry.validity.describe()}{status}")
    if manifest_path is None:
        print(
            "warning: no --manifest (nor $BERNSTEIN_ROLES): no producer key is pinned, so verifiers report every signed "
            "entry PRODUCER_KEY_NOT_PINNED",
            file=sys.stderr,
        )
    elif producers == 0:
        print(f"warning: {manifest_path} registers no producer ([[producers]])", file=sys.stderr)
    return EXIT_OK
