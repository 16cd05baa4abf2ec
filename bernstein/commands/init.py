"""``bernstein init --producer NAME``: a local deployment in one directory, ready to publish and verify.

    bernstein init --producer NAME [--dir D] [--producer-keys DIR] [--roles-from roles.toml] [--partitions N] [--prefix P]

Against the running services (``infra/up`` writes ``.infra/env``), it does what an operator and a
producer host do by hand, with the same code as the commands it stands for:

1. the scheduler's seal and audit keys in ``D/keys`` (``bernstein keys init``), kept when present;
2. producer NAME's keys in ``D/producers/NAME`` (``bernstein keys init --producer NAME``), kept when
   present;
3. the manifest ``D/roles.toml``: the roles of ``--roles-from`` (default: the checkout's
   ``config/roles.toml``) and a ``[[producers]]`` entry for NAME granting every one of them and the
   agent kind ``browser``; an existing manifest keeps its text and gets the entry appended when NAME is
   not registered yet;
4. the trusted-keys file ``D/trusted-keys.json`` (``bernstein keys trust --manifest D/roles.toml``);
5. the prefix's topics (``bernstein topic create``), which needs the Kafka admin's rights on a
   secured cluster.

``D`` defaults to ``.bernstein``, where ``bernstein demo`` keeps the scheduler's keys too: on the same
topic prefix both must use the same scheduler keys, or the scheduler cannot vouch for the other's
records when it rebuilds its state. Every step is idempotent: run it again to add a second producer
(another NAME) or to re-export trust. It prints the commands that use what it made.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Final

from bernstein.commands.common import UsageError, add_prefix_flag, settings_from
from bernstein.commands.keys import export_trust, manifest_snippet, producer_manifest_keys
from bernstein.consumers.manifest import load_manifest, load_roles
from bernstein.substrate.exit_codes import EXIT_OK
from bernstein.substrate.kafka import ensure_topics, require_bootstrap
from bernstein.substrate.keys import (
    InstallKeys,
    KeyFileMissing,
    KeyPurpose,
    ProducerKeys,
    init_keys,
    init_producer_keys,
    load_keys,
    load_producer_keys,
)

DEFAULT_DIR: Final = Path(".bernstein")
CHECKOUT_ROLES: Final = Path(__file__).resolve().parents[2] / "config" / "roles.toml"
"""The roles manifest of a checkout (not part of an installed package: pass ``--roles-from`` there)."""
_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    init = sub.add_parser(
        "init",
        help="set up a local deployment: scheduler and producer keys, a manifest entry, trusted keys, the topics",
        description="Make everything a local deployment needs to publish as producer NAME and verify the result: the "
        "scheduler's keys (DIR/keys), the producer's keys (DIR/producers/NAME), a roles manifest that registers it "
        "(DIR/roles.toml), a trusted-keys file (DIR/trusted-keys.json) and the topic prefix's topics. Existing keys "
        "and manifest entries are kept; run it again to add another producer.",
    )
    init.add_argument("--producer", metavar="NAME", required=True, help="the producer identity to create (its producer.id)")
    init.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help=f"the deployment directory (default {DEFAULT_DIR}, as `bernstein demo`)"
    )
    init.add_argument(
        "--producer-keys",
        type=Path,
        default=None,
        metavar="DIR",
        help="the producer's key directory (default DIR/producers/NAME)",
    )
    init.add_argument(
        "--roles-from",
        type=Path,
        default=None,
        metavar="ROLES_TOML",
        help="the [[roles]] to start the manifest from (default: the checkout's config/roles.toml)",
    )
    init.add_argument(
        "--partitions", type=int, default=1, help="partitions of new topics (default 1; existing topics keep theirs)"
    )
    add_prefix_flag(init)
    init.set_defaults(func=_init)


def _init(args: argparse.Namespace) -> int:
    name = args.producer
    if not name or len(name) > 256 or not name.isprintable():
        raise UsageError(f"--producer {name!r}: a producer name is 1 to 256 printable characters (its producer.id)")
    if args.partitions < 1:
        raise UsageError("--partitions must be at least 1")
    if args.producer_keys is None and not _PLAIN_NAME.fullmatch(name):
        raise UsageError(f"--producer {name!r} is not a plain directory name: pass --producer-keys DIR as well")
    settings = settings_from(args)
    bootstrap = require_bootstrap(settings.kafka_bootstrap)
    directory: Path = args.dir
    producer_dir: Path = args.producer_keys or directory / "producers" / name

    scheduler, made = _scheduler_keys(directory / "keys")
    print(f"scheduler keys  {directory / 'keys'}  ({made}; seal {scheduler.signer.key_id}, audit {scheduler.audit.key_id})")
    producer, made = _producer_keys(producer_dir, name)
    print(f"producer {name!r}  {producer_dir}  ({made}; producer key {producer.signer.key_id})")

    manifest = directory / "roles.toml"
    roles, made = _register(manifest, producer, args.roles_from)
    print(f"manifest        {manifest}  ({made}; {name!r} may submit as {', '.join(roles)} and act as a browser)")

    trust = directory / "trusted-keys.json"
    export_trust(scheduler.key_ring, manifest).write(trust)
    print(f"trusted keys    {trust}  (the scheduler's seal and audit keys, every producer key of the manifest)")

    partitions = ensure_topics(bootstrap, settings.topics, partitions=args.partitions)
    print(f"topics          {settings.topics.prefix}.* on {bootstrap} ({partitions} partition(s))")

    print("next: publish as this producer, run the scheduler, verify the run:")
    print(f"  ... | bernstein submit --producer-keys {producer_dir}")
    print(f"  bernstein scheduler run --keys-dir {directory / 'keys'} --roles {manifest}")
    print(f"  bernstein activity verify RUN --trusted-keys {trust}")
    return EXIT_OK


def _scheduler_keys(directory: Path) -> tuple[InstallKeys, str]:
    try:
        return load_keys(directory), "kept"
    except KeyFileMissing:
        if directory.exists() and any(directory.iterdir()):
            raise
        return init_keys(directory), "created"


def _producer_keys(directory: Path, name: str) -> tuple[ProducerKeys, str]:
    try:
        keys = load_producer_keys(directory)
    except KeyFileMissing:
        if directory.exists() and any(directory.iterdir()):
            raise
        return init_producer_keys(directory, name), "created"
    if keys.name != name:
        raise UsageError(
            f"{directory} holds the keys of producer {keys.name!r}, not {name!r}: pass another --producer-keys directory"
        )
    return keys, "kept"


def _register(manifest: Path, producer: ProducerKeys, roles_from: Path | None) -> tuple[list[str], str]:
    """Register ``producer`` in ``manifest`` (written from ``roles_from``'s roles when absent); its roles and what
    was done. A producer already registered with its current key is left as it is."""
    keys = producer_manifest_keys(producer.ring)
    if manifest.exists():
        registry = load_manifest(manifest)
        registered = registry.producers.producers.get(producer.name)
        if registered is not None:
            current = producer.ring.current(KeyPurpose.PRODUCER).key_id
            if current not in {key.key_id for key in registered.keys}:
                raise UsageError(
                    f"{manifest} registers producer {producer.name!r} with other keys than {producer.directory}'s: "
                    "edit its [[producers]] entry (`bernstein keys show --producer --dir DIR` prints the key)"
                )
            return sorted(registered.roles), "kept"
        roles = list(registry.roles)
        text = manifest.read_text(encoding="utf-8").rstrip() + "\n"
        made = "producer added"
    else:
        source = roles_from or CHECKOUT_ROLES
        if not source.is_file():
            raise UsageError(f"no roles manifest to start from at {source}: pass --roles-from ROLES_TOML")
        roles = list(load_roles(source))
        text = f"# written by `bernstein init` from {source}\n" + source.read_text(encoding="utf-8").rstrip() + "\n"
        made = "created"
    entry = manifest_snippet(producer.name, keys, roles=roles, agent_kinds=["browser"])
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(
        f"{text}\n# producer {producer.name} (bernstein init --producer {producer.name})\n{entry}\n", encoding="utf-8"
    )
    load_manifest(manifest)  # what the scheduler will read: fail here, not there
    return roles, made
