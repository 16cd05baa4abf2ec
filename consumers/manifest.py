"""The roles manifest: which activity kind each role may submit.

A TOML file with ``[[roles]]`` entries::

    [[roles]]
    role = "scout"
    agent_kind = "research"

    [[roles]]
    role = "developer"          # agent_kind defaults to "coding"

``agent_kind`` defaults to ``coding`` so manifests written before modalities
existed keep their meaning. A role that is not declared may not submit at all
(the scheduler refuses with UNKNOWN_ROLE): the manifest is an allow-list.

Producers are pinned the same way, with ``[[producers]]`` (docs/security.md)::

    [[producers]]
    name = "research-worker"            # the producer.id of its submissions
    roles = ["scout"]                   # roles it may submit under
    agent_kinds = ["browser"]           # optional: kinds for role-less computer-use actions
    run_prefixes = ["research-"]        # optional: run ids it owns (no other producer may open or add to them)
    collaborators = ["browser-worker"]  # optional: producers that may add to its runs
    max_open_runs = 1000                # optional: runs it may have open at once (default 10000)
    kafka_principal = "User:research-1" # optional: its own Kafka principal (default User:<name>)
    produce_bytes_per_second = 1048576  # optional: its Kafka produce quota (default: `bernstein kafka acls`'s)
      [[producers.keys]]
      public_key = "<64 hex>"           # `bernstein keys show --dir <producer keys>`
      valid_from_ms = 0                 # optional
      valid_until_ms = 1767225600000    # optional: set it to retire or revoke the key

A submission signed by a key no producer holds, outside the key's lifetime, for
another producer's name, or under a role its producer was not granted, is refused.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bernstein.consumers.core.model import DEFAULT_MAX_OPEN_RUNS, Lifetime, Producer, ProducerKey, ProducerRegistry
from bernstein.schemas.canonical import public_key_id
from bernstein.schemas.ed25519 import weak_key
from bernstein.schemas.errors import MalformedInput
from bernstein.schemas.records import ID_RULE, KINDS, ActivityKind, is_valid_id
from bernstein.substrate.keys import KeyPurpose, KeyStatus, TrustedKey, TrustedKeys, Validity

DEFAULT_KIND: Final = ActivityKind.CODING.value
_ROLE_KEYS: Final = frozenset({"role", "agent_kind", "description"})
_PRODUCER_KEYS: Final = frozenset(
    {
        "name",
        "roles",
        "agent_kinds",
        "keys",
        "description",
        "run_prefixes",
        "collaborators",
        "kafka_principal",
        "produce_bytes_per_second",
        "max_open_runs",
    }
)
_KEY_KEYS: Final = frozenset({"public_key", "key_id", "valid_from_ms", "valid_until_ms", "status", "description"})


@dataclass(frozen=True)
class Manifest:
    """The whole manifest: roles and the producers that may take them."""

    roles: dict[str, str]
    producers: ProducerRegistry
    kafka: tuple[KafkaIdentity, ...] = ()
    """Each producer's Kafka principal and produce quota (``kafka_identities``), in manifest order."""


class ManifestError(MalformedInput):
    """The roles manifest cannot be read or breaks a rule; the message names the entry."""

    code = "E_ROLES_MANIFEST"


def parse_roles(text: str, *, source: str = "<manifest>") -> dict[str, str]:
    """Parse manifest text into ``role -> agent_kind``."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source} is not valid TOML: {exc}") from exc
    return roles_from_document(document, source=source)


def roles_from_document(document: dict[str, Any], *, source: str = "<manifest>") -> dict[str, str]:
    entries = document.get("roles")
    if not isinstance(entries, list) or not entries:
        raise ManifestError(f"{source} needs at least one [[roles]] entry")
    roles: dict[str, str] = {}
    for index, entry in enumerate(entries):
        where = f"{source}: roles[{index}]"
        entry = _table(entry, where, _ROLE_KEYS)
        role = entry.get("role")
        if not is_valid_id(role):
            raise ManifestError(f"{where}: role {ID_RULE} (got {role!r})")
        assert isinstance(role, str)
        kind = entry.get("agent_kind", DEFAULT_KIND)
        if kind not in KINDS:
            raise ManifestError(f"{where}: agent_kind {kind!r} is not one of: {', '.join(sorted(KINDS))}")
        if role in roles:
            raise ManifestError(f"{where}: role {role!r} is declared twice")
        roles[role] = kind
    return roles


def producers_from_document(document: dict[str, Any], roles: dict[str, str], *, source: str = "<manifest>") -> ProducerRegistry:
    """The ``[[producers]]`` entries (none is valid: then nobody may submit)."""
    entries = document.get("producers", [])
    if not isinstance(entries, list):
        raise ManifestError(f"{source}: producers must be an array of tables ([[producers]])")
    producers: list[Producer] = []
    for index, entry in enumerate(entries):
        where = f"{source}: producers[{index}]"
        entry = _table(entry, where, _PRODUCER_KEYS)
        name = entry.get("name")
        if not isinstance(name, str) or not name or len(name) > 256 or not name.isprintable():
            raise ManifestError(f"{where}: name must be the producer.id its submissions carry (1 to 256 printable characters)")
        granted = _strings(entry.get("roles", []), f"{where}: roles")
        for role in granted:
            if role not in roles:
                raise ManifestError(f"{where}: role {role!r} is not declared in [[roles]]")
        kinds = _strings(entry.get("agent_kinds", []), f"{where}: agent_kinds")
        for kind in kinds:
            if kind not in KINDS:
                raise ManifestError(f"{where}: agent kind {kind!r} is not one of: {', '.join(sorted(KINDS))}")
        keys = entry.get("keys")
        if not isinstance(keys, list) or not keys:
            raise ManifestError(f"{where}: a producer needs at least one [[producers.keys]] entry with its public_key")
        prefixes = _strings(entry.get("run_prefixes", []), f"{where}: run_prefixes")
        for prefix in prefixes:
            if not prefix or len(prefix) > 128 or not is_valid_id(prefix):
                raise ManifestError(f"{where}: run prefix {prefix!r} must be the start of a valid run id ({ID_RULE})")
        producers.append(
            Producer(
                name=name,
                roles=frozenset(granted),
                agent_kinds=frozenset(kinds) | frozenset(roles[r] for r in granted),
                keys=tuple(_producer_key(key, f"{where}.keys[{k}]") for k, key in enumerate(keys)),
                run_prefixes=tuple(prefixes),
                collaborators=frozenset(_strings(entry.get("collaborators", []), f"{where}: collaborators")),
                max_open_runs=_max_open_runs(entry.get("max_open_runs", DEFAULT_MAX_OPEN_RUNS), where),
            )
        )
    names = [p.name for p in producers]
    for name in names:
        if names.count(name) > 1:
            raise ManifestError(f"{source}: producer {name!r} is declared twice")
    claimed = [(prefix, p.name) for p in producers for prefix in p.run_prefixes]
    for prefix, owner in claimed:
        for other, other_owner in claimed:
            if (prefix, owner) != (other, other_owner) and other.startswith(prefix):
                raise ManifestError(
                    f"{source}: run prefix {other!r} of {other_owner!r} starts with {prefix!r} of {owner!r}: a run id "
                    "would have two owners"
                )
    for producer in producers:
        for name in sorted(producer.collaborators):
            if name not in names:
                raise ManifestError(f"{source}: collaborator {name!r} of {producer.name!r} is not a declared producer")
    try:
        return ProducerRegistry.of(producers)
    except ValueError as exc:
        raise ManifestError(f"{source}: {exc}") from exc


def _producer_key(entry: object, where: str) -> ProducerKey:
    entry = _table(entry, where, _KEY_KEYS)
    text = entry.get("public_key")
    try:
        raw = bytes.fromhex(text) if isinstance(text, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise ManifestError(f"{where}: public_key must be 64 hex characters (the producer's raw Ed25519 public key)")
    weak = weak_key(raw)
    if weak is not None:
        raise ManifestError(f"{where}: public_key {weak}: register the key `bernstein keys show` prints for the producer")
    key_id = public_key_id(raw)
    if entry.get("key_id", key_id) != key_id:
        raise ManifestError(f"{where}: key_id {entry['key_id']!r} does not match public_key ({key_id})")
    start = entry.get("valid_from_ms", 0)
    until = entry.get("valid_until_ms")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise ManifestError(f"{where}: valid_from_ms must be a non-negative integer (milliseconds since the epoch)")
    if until is not None and (not isinstance(until, int) or isinstance(until, bool) or until <= start):
        raise ManifestError(f"{where}: valid_until_ms must be an integer after valid_from_ms")
    return ProducerKey(key_id, raw, Lifetime(start, until))


def _strings(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"{where} must be a list of strings")
    return list(value)


MAX_OPEN_RUNS_LIMIT: Final = 1 << 31
"""The largest ``max_open_runs`` (both cores count in 64 bits; a larger bound would bound nothing)."""


def _max_open_runs(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_OPEN_RUNS_LIMIT:
        raise ManifestError(f"{where}: max_open_runs must be a whole number from 1 to {MAX_OPEN_RUNS_LIMIT} (got {value!r})")
    return value


def parse_manifest(text: str, *, source: str = "<manifest>") -> Manifest:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source} is not valid TOML: {exc}") from exc
    unknown = set(document) - {"roles", "producers"}
    if unknown:
        raise ManifestError(f"{source} has unknown top-level keys {sorted(unknown)}; allowed: roles, producers")
    roles = roles_from_document(document, source=source)
    producers = producers_from_document(document, roles, source=source)
    return Manifest(roles=roles, producers=producers, kafka=kafka_identities(document, source=source))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"no roles manifest at {path}; pass --roles FILE (see config/roles.toml)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read roles manifest {path}: {exc}") from exc


def _table(entry: object, where: str, allowed: frozenset[str]) -> dict[str, Any]:
    """A manifest entry: a TOML table with only the ``allowed`` keys."""
    if not isinstance(entry, dict):
        raise ManifestError(f"{where} must be a table")
    unknown = set(entry) - allowed
    if unknown:
        raise ManifestError(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    return entry


def load_roles(path: Path) -> dict[str, str]:
    return parse_roles(_read(path), source=str(path))


def load_manifest(path: Path) -> Manifest:
    """Roles and producers (``bernstein scheduler run --roles``, ``bernstein keys trust --manifest``)."""
    return parse_manifest(_read(path), source=str(path))


def trusted_producer_keys(registry: ProducerRegistry) -> TrustedKeys:
    """The registered producers' public keys as a verifier pins them (``bernstein keys trust --manifest``)."""
    return TrustedKeys.of(
        TrustedKey(
            key.key_id,
            KeyPurpose.PRODUCER,
            key.public_key,
            Validity(key.lifetime.valid_from_ms, key.lifetime.valid_until_ms),
            producer.name,
            KeyStatus.ACTIVE if key.lifetime.valid_until_ms is None else KeyStatus.RETIRED,
        )
        for producer, key in registry.by_key.values()
    )


# ---------------------------------------------------------------- Kafka identities

PRINCIPAL_RULE: Final = re.compile(r"[A-Za-z][A-Za-z0-9]*:\S+")
"""A Kafka principal, ``TYPE:NAME`` (``User:research-1``, ``User:CN=worker-1,O=acme``)."""
MAX_PRODUCE_BYTES_PER_SECOND: Final = 2**53
"""Kafka keeps a quota as a double: larger whole numbers would not round-trip."""


@dataclass(frozen=True)
class KafkaIdentity:
    """One producer host's Kafka identity: the principal it authenticates as, and its produce quota.

    ``produce_bytes_per_second`` is None when the manifest leaves it to the deployment's default
    (``bernstein kafka acls --produce-bytes-per-second``). Kept out of ``bernstein.consumers.core.model.Producer``:
    the scheduler never sees a Kafka principal; only ``bernstein kafka`` reads these.
    """

    producer: str
    principal: str
    produce_bytes_per_second: int | None = None

    @property
    def principal_type(self) -> str:
        return self.principal.partition(":")[0]

    @property
    def principal_name(self) -> str:
        """The principal's name: what a SCRAM login and a Kafka user quota are keyed by."""
        return self.principal.partition(":")[2]


def kafka_identities(document: dict[str, Any], *, source: str = "<manifest>") -> tuple[KafkaIdentity, ...]:
    """The ``kafka_principal`` and ``produce_bytes_per_second`` of each ``[[producers]]`` entry.

    ``kafka_principal`` defaults to ``User:<name>``: every producer host has its own principal,
    so the broker can name the host a flood or a refused write comes from. Two producers may not
    share a principal. Expects a document whose producers ``producers_from_document`` accepted.
    """
    identities: list[KafkaIdentity] = []
    owners: dict[str, str] = {}
    for index, entry in enumerate(document.get("producers", [])):
        where = f"{source}: producers[{index}]"
        name = entry["name"]
        principal = entry.get("kafka_principal", f"User:{name}")
        if "kafka_principal" in entry and (not isinstance(principal, str) or not PRINCIPAL_RULE.fullmatch(principal)):
            raise ManifestError(
                f"{where}: kafka_principal must be TYPE:NAME with no spaces, e.g. User:{name} (got {principal!r})"
            )
        rate = entry.get("produce_bytes_per_second")
        if rate is not None and (
            not isinstance(rate, int) or isinstance(rate, bool) or not 0 < rate <= MAX_PRODUCE_BYTES_PER_SECOND
        ):
            raise ManifestError(
                f"{where}: produce_bytes_per_second must be a whole number of bytes from 1 to 2^53 (got {rate!r})"
            )
        if principal in owners:
            raise ManifestError(
                f"{where}: Kafka principal {principal!r} of {name!r} is also {owners[principal]!r}'s: each producer host "
                "needs its own (set kafka_principal)"
            )
        owners[principal] = name
        identities.append(KafkaIdentity(name, principal, rate))
    return tuple(identities)
