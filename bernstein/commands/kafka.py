"""``bernstein kafka acls``: the ACLs a deployment needs (config/kafka-acls.toml), printed or applied.

The spec names roles (producer, scheduler, auditor); each role maps to a Kafka principal
(``User:<role>`` unless told otherwise) and every ``{prefix}`` becomes the deployment's
topic prefix. ``--apply`` creates the bindings with the admin client (run it with the Kafka
admin's client properties in ``BERNSTEIN_KAFKA_CONFIG_FILE``); creating an existing binding
is a no-op, so applying twice is harmless.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bernstein.commands.common import UsageError, command_group, settings_from
from schemas.errors import BernsteinError
from substrate.kafka import KafkaError, client_config, client_config_as, not_authorized, require_bootstrap

REPO: Final = Path(__file__).resolve().parent.parent.parent
DEFAULT_SPEC: Final = REPO / "config" / "kafka-acls.toml"
ROLES: Final = ("producer", "scheduler", "auditor")
RESOURCES: Final = ("topic", "group", "transactional_id", "cluster")
PATTERNS: Final = ("literal", "prefixed")
OPERATIONS: Final = (
    "read",
    "write",
    "create",
    "delete",
    "alter",
    "describe",
    "cluster_action",
    "describe_configs",
    "alter_configs",
    "idempotent_write",
)
_PREFIX: Final = re.compile(r"[A-Za-z0-9._-]{1,200}")
_PRINCIPAL: Final = re.compile(r"[A-Za-z][A-Za-z0-9]*:\S+")


class AclSpecError(BernsteinError):
    """The ACL spec file is malformed (names the entry and the field)."""

    code = "E_ACL_SPEC"


@dataclass(frozen=True, order=True)
class Acl:
    """One ALLOW binding for any host."""

    principal: str
    resource: str
    pattern: str
    name: str
    operation: str

    def line(self) -> str:
        return f"ALLOW {self.principal} {self.operation.upper()} {self.resource.upper()} {self.pattern.upper()} {self.name}"


def load_spec(path: Path = DEFAULT_SPEC) -> list[dict[str, Any]]:
    """The ``[[acl]]`` entries of a spec file, each checked."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AclSpecError(f"cannot read the ACL spec {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise AclSpecError(f"{path}: not TOML: {exc}") from None
    entries = data.get("acl")
    if set(data) - {"acl"} or not isinstance(entries, list) or not entries:
        raise AclSpecError(f"{path}: expected one or more [[acl]] tables and nothing else")
    for index, entry in enumerate(entries, start=1):
        where = f"{path}: acl #{index}"
        if not isinstance(entry, dict) or set(entry) != {"principal", "resource", "pattern", "name", "operations"}:
            raise AclSpecError(f"{where}: needs exactly principal, resource, pattern, name and operations")
        for field, choices in (("principal", ROLES), ("resource", RESOURCES), ("pattern", PATTERNS)):
            if entry[field] not in choices:
                raise AclSpecError(f"{where}: {field} {entry[field]!r} is not one of {', '.join(choices)}")
        operations = entry["operations"]
        if not isinstance(operations, list) or not operations or any(op not in OPERATIONS for op in operations):
            raise AclSpecError(f"{where}: operations must be a non-empty list of {', '.join(OPERATIONS)}")
        if not isinstance(entry["name"], str) or not entry["name"]:
            raise AclSpecError(f"{where}: name must be a non-empty string")
    return entries


def acls_for(prefix: str, principals: Mapping[str, str], spec: list[dict[str, Any]]) -> list[Acl]:
    """The bindings of ``spec`` for one deployment, sorted, without duplicates."""
    if not _PREFIX.fullmatch(prefix):
        raise UsageError(f"--prefix {prefix!r}: a topic prefix is 1-200 characters of A-Z a-z 0-9 . _ -")
    for role, principal in principals.items():
        if not _PRINCIPAL.fullmatch(principal):
            raise UsageError(f"--{role}-principal {principal!r}: expected TYPE:NAME, e.g. User:{role}")
    out = {
        Acl(principals[entry["principal"]], entry["resource"], entry["pattern"], entry["name"].replace("{prefix}", prefix), op)
        for entry in spec
        for op in entry["operations"]
    }
    return sorted(out)


def bindings(acls: list[Acl]) -> list[Any]:
    """confluent_kafka ``AclBinding`` objects for ``acls``."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    kinds = {
        "topic": ResourceType.TOPIC,
        "group": ResourceType.GROUP,
        "transactional_id": ResourceType.TRANSACTIONAL_ID,
        "cluster": ResourceType.BROKER,
    }
    return [
        AclBinding(
            kinds[acl.resource],
            "kafka-cluster" if acl.resource == "cluster" else acl.name,
            ResourcePatternType[acl.pattern.upper()],
            acl.principal,
            "*",
            AclOperation[acl.operation.upper()],
            AclPermissionType.ALLOW,
        )
        for acl in acls
    ]


def apply_acls(bootstrap: str, acls: list[Acl], *, config_file: Path | None = None, timeout: float = 30.0) -> None:
    """Create the bindings (as the principal of ``config_file``, else of BERNSTEIN_KAFKA_CONFIG_FILE)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config = client_config(bootstrap) if config_file is None else client_config_as(config_file, bootstrap)
    admin = AdminClient(config)
    futures = admin.create_acls(bindings(acls), request_timeout=timeout)
    for binding, future in futures.items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            if "AUTHORIZATION" in str(exc) or "SECURITY_DISABLED" in str(exc):
                if "SECURITY_DISABLED" in str(exc):
                    raise KafkaError("this cluster has no authorizer configured: ACLs cannot be created") from None
                raise not_authorized("create ACLs (run `bernstein kafka acls --apply` as the Kafka admin)") from None
            raise KafkaError(f"cannot create ACL {binding}: {exc}") from exc
    _await_visible(admin, futures, timeout)


def _await_visible(admin: Any, created: Any, timeout: float) -> None:
    """Wait until the broker answers with every new binding: the controller has committed them before
    its future returns, but the broker's authorizer applies them a moment later (a client acting on
    them at once was refused once in CI). Best effort: a broker that cannot describe ACLs is not waited for."""
    import time

    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    wanted = {str(binding) for binding in created}
    anything: Any = None  # the filter's wildcard (the stubs say str)
    everything = AclBindingFilter(
        ResourceType.ANY, anything, ResourcePatternType.ANY, anything, anything, AclOperation.ANY, AclPermissionType.ANY
    )
    deadline = time.monotonic() + min(timeout, 15.0)
    while time.monotonic() < deadline:
        try:
            seen = {str(binding) for binding in admin.describe_acls(everything, request_timeout=5).result(10)}
        except Exception:  # noqa: BLE001 - waiting is an optimisation; the bindings exist either way
            return
        if wanted <= seen:
            return
        time.sleep(0.1)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    kafka_sub = command_group(sub, "kafka", help="Kafka security: the ACLs a deployment needs")
    acls = kafka_sub.add_parser("acls", help="print (or --apply) the ACLs of a deployment's principals")
    acls.add_argument("--prefix", required=True, help="the deployment's topic prefix")
    acls.add_argument("--apply", action="store_true", help="create them (as the Kafka admin of BERNSTEIN_KAFKA_CONFIG_FILE)")
    acls.add_argument("--spec", type=Path, default=DEFAULT_SPEC, help="ACL spec file (default: config/kafka-acls.toml)")
    for role in ROLES:
        acls.add_argument(
            f"--{role}-principal", default=f"User:{role}", help=f"Kafka principal of the {role} (default User:{role})"
        )
    acls.set_defaults(func=_acls)


def _acls(args: argparse.Namespace) -> int:
    principals = {role: getattr(args, f"{role}_principal") for role in ROLES}
    acls = acls_for(args.prefix, principals, load_spec(args.spec))
    for acl in acls:
        print(acl.line())
    if args.apply:
        apply_acls(require_bootstrap(settings_from(argparse.Namespace(prefix=args.prefix)).kafka_bootstrap), acls)
        print(f"applied {len(acls)} ACL bindings for prefix {args.prefix!r}")
    return 0
