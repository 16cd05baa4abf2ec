"""``bernstein kafka acls|users``: the ACLs, produce quotas and producer logins a deployment needs.

``acls``: the spec (config/kafka-acls.toml) names roles (producer, scheduler, auditor); each role
maps to a Kafka principal (``User:<role>`` unless told otherwise) and every ``{prefix}`` becomes the
deployment's topic prefix. With ``--manifest`` (the roles manifest), the producer role's bindings
are emitted once per producer of the manifest, each under its own principal (``kafka_principal``,
default ``User:<name>``), together with each one's produce quota (``produce_bytes_per_second``,
default ``--produce-bytes-per-second``, 1 MiB/s): the broker then meters and throttles every
producer host on its own, and names the host of a flood. ``--apply`` creates the bindings with the
admin client and sets the quotas (run it with the Kafka admin's client properties in
``BERNSTEIN_KAFKA_CONFIG_FILE``); creating an existing binding and setting a quota to the value it
has are no-ops, so applying twice is harmless.

How quotas are set: confluent-kafka-python (2.16, pinned in uv.lock) has no client-quota admin
API (KIP-546's AlterClientQuotas is missing from librdkafka; confluentinc/librdkafka#5227, and
confluent-kafka-python#2321 is an open draft), and user quotas are not configs that
``alter_configs`` reaches. So ``--apply`` runs Kafka's own ``kafka.admin.ConfigCommand``
(``kafka-configs --alter --entity-type users --entity-name NAME --add-config producer_byte_rate=N``,
one JVM per quota, about 2 s each): ``--kafka-configs`` names a ``kafka-configs.sh`` of a Kafka
distribution, else the jars ``infra/up`` fetched (``.infra/kafka/libs``) run on ``java``. It logs in
with the admin's librdkafka properties translated to the Java client's (SASL PLAIN/SCRAM and a CA
file; anything else: ``--kafka-configs-properties`` with a Java client properties file), written to
a private temporary file that is deleted afterwards.

``users``: a SCRAM login for each producer of the manifest (``AdminClient.alter_user_scram_credentials``,
confluent-kafka >= 2.2), with a random password, and the producer host's client properties file
(``<out>/<name>.properties``, mode 0600). A login that exists keeps its password unless ``--rotate``.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bernstein.commands.common import UsageError, command_group, settings_from
from bernstein.consumers.manifest import MAX_PRODUCE_BYTES_PER_SECOND, PRINCIPAL_RULE, KafkaIdentity, ManifestError, load_manifest
from bernstein.schemas.errors import BernsteinError
from bernstein.substrate.exit_codes import EXIT_OK
from bernstein.substrate.kafka import (
    KafkaError,
    client_config,
    client_config_as,
    not_authorized,
    require_bootstrap,
    security_config,
)

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
_PRINCIPAL: Final = PRINCIPAL_RULE
DEFAULT_PRODUCE_BYTES_PER_SECOND: Final = 1024 * 1024
"""A producer's produce quota when the manifest gives none: 1 MiB/s per broker. Submissions are small
(evidence goes to the CAS; a value is at most 2 MiB), so an honest host stays far below it."""
KAFKA_LIBS: Final = REPO / ".infra" / "kafka" / "libs"
"""The Kafka jars ``infra/up`` (or ``infra/infra.py prepare``) fetches: they hold ``kafka.admin.ConfigCommand``."""
SCRAM_MECHANISMS: Final = ("SCRAM-SHA-512", "SCRAM-SHA-256")
SCRAM_ITERATIONS: Final = 8192
_SCRAM_USER: Final = re.compile(r"[A-Za-z0-9_@+-][A-Za-z0-9._@+-]{0,127}")
"""A SCRAM login this command creates: its name is a file name too, and needs no SCRAM escaping (no ``,`` or ``=``)."""


class AclSpecError(BernsteinError):
    """The ACL spec file is malformed (names the entry and the field)."""

    code = "E_ACL_SPEC"


class QuotaToolMissing(KafkaError):
    """No way to set a client quota here: neither ``--kafka-configs`` nor java with infra's Kafka jars."""

    code = "E_KAFKA_QUOTA_TOOL"


class QuotaError(KafkaError):
    """Kafka's ConfigCommand did not set a produce quota (names the principal, never a password)."""

    code = "E_KAFKA_QUOTA"


class ScramUserError(KafkaError):
    """A producer's SCRAM login cannot be created or its client properties file cannot be written."""

    code = "E_KAFKA_SCRAM_USER"


@dataclass(frozen=True, order=True)
class Quota:
    """One producer principal's produce quota, in bytes per second (per broker, as Kafka meters it)."""

    principal: str
    producer_byte_rate: int

    @property
    def user(self) -> str:
        """The quota's Kafka entity: the principal's name (Kafka keys user quotas by it)."""
        return self.principal.partition(":")[2]

    def line(self) -> str:
        return f"QUOTA {self.principal} producer_byte_rate={self.producer_byte_rate}"


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


def acls_for(prefix: str, principals: Mapping[str, str | Sequence[str]], spec: list[dict[str, Any]]) -> list[Acl]:
    """The bindings of ``spec`` for one deployment, sorted, without duplicates.

    A role maps to one principal, or to several (the producers of a manifest): each gets the role's bindings.
    """
    if not _PREFIX.fullmatch(prefix):
        raise UsageError(f"--prefix {prefix!r}: a topic prefix is 1-200 characters of A-Z a-z 0-9 . _ -")
    holders = {role: [named] if isinstance(named, str) else list(named) for role, named in principals.items()}
    for role, names in holders.items():
        for principal in names:
            if not _PRINCIPAL.fullmatch(principal):
                raise UsageError(f"--{role}-principal {principal!r}: expected TYPE:NAME, e.g. User:{role}")
    out = {
        Acl(principal, entry["resource"], entry["pattern"], entry["name"].replace("{prefix}", prefix), op)
        for entry in spec
        for principal in holders[entry["principal"]]
        for op in entry["operations"]
    }
    return sorted(out)


def manifest_identities(path: Path) -> tuple[KafkaIdentity, ...]:
    """The producers' Kafka identities of a roles manifest, each principal checked."""
    if not path.is_file():
        raise ManifestError(f"--manifest {path}: no such file (the roles manifest the scheduler runs with)")
    identities = load_manifest(path).kafka
    if not identities:
        raise ManifestError(f"{path}: no [[producers]]: there is no producer principal to grant")
    for identity in identities:
        if not _PRINCIPAL.fullmatch(identity.principal):
            raise ManifestError(
                f"{path}: producer {identity.producer!r} has no usable default Kafka principal ({identity.principal!r}): "
                "set its kafka_principal to TYPE:NAME without spaces"
            )
    return identities


def quotas_for(identities: Sequence[KafkaIdentity], default: int = DEFAULT_PRODUCE_BYTES_PER_SECOND) -> list[Quota]:
    """Each producer principal's produce quota: the manifest's, else ``default``."""
    if not 0 < default <= MAX_PRODUCE_BYTES_PER_SECOND:
        raise UsageError(f"--produce-bytes-per-second {default}: must be a whole number of bytes from 1 to 2^53")
    return sorted(Quota(i.principal, i.produce_bytes_per_second or default) for i in identities)


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


def config_command(kafka_configs: Path | None = None) -> list[str]:
    """How to run Kafka's ConfigCommand: ``kafka_configs`` (a ``kafka-configs.sh``), else infra's jars on java."""
    if kafka_configs is not None:
        if not (kafka_configs.is_file() and os.access(kafka_configs, os.X_OK)):
            raise QuotaToolMissing(f"--kafka-configs {kafka_configs}: not an executable file (Kafka's bin/kafka-configs.sh)")
        return [str(kafka_configs)]
    java = shutil.which("java")
    if java is not None and any(KAFKA_LIBS.glob("kafka_2.13-*.jar")):
        # a small, quickly started JVM: the command sends one request
        return [
            java,
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{KAFKA_LIBS}/*",
            "kafka.admin.ConfigCommand",
        ]
    raise QuotaToolMissing(
        "setting produce quotas needs Kafka's ConfigCommand (confluent-kafka has no client-quota API): pass "
        "--kafka-configs /path/to/kafka/bin/kafka-configs.sh, or fetch the jars with `infra/infra.py prepare` (needs java 17+)"
    )


def java_client_properties(security: Mapping[str, str]) -> str:
    """The Java client's properties for a librdkafka security config (``bernstein.substrate.kafka.security_config``).

    Covers what ``infra/up --secure`` and most deployments use: PLAINTEXT/SSL/SASL_*, SASL PLAIN or
    SCRAM with a username and password, a CA file, and switching off the host name check. A client
    certificate, GSSAPI or OAUTHBEARER has no one-line Java form: pass ``--kafka-configs-properties``.
    """
    protocol = security.get("security.protocol", "PLAINTEXT")
    lines = [f"security.protocol={protocol}"]
    if protocol.startswith("SASL_"):
        mechanism = security.get("sasl.mechanism") or security.get("sasl.mechanisms") or "GSSAPI"
        if mechanism not in ("PLAIN", *SCRAM_MECHANISMS) or "sasl.username" not in security:
            how = "without a username" if mechanism in ("PLAIN", *SCRAM_MECHANISMS) else "(no username and password)"
            raise QuotaError(
                f"the admin's client properties log in with SASL {mechanism} {how}; pass the Java client properties for "
                "Kafka's ConfigCommand with --kafka-configs-properties FILE"
            )
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        user, password = (_jaas_quoted(security[key]) for key in ("sasl.username", "sasl.password"))
        jaas = f"org.apache.kafka.common.security.{module} required username={user} password={password};"
        lines += [f"sasl.mechanism={mechanism}", f"sasl.jaas.config={_property_value(jaas)}"]
    if "ssl.certificate.location" in security or "ssl.key.location" in security:
        raise QuotaError(
            "the admin's client properties log in with a client certificate; pass the Java client properties for Kafka's "
            "ConfigCommand (ssl.keystore.*) with --kafka-configs-properties FILE"
        )
    if "ssl.ca.location" in security:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={_property_value(security['ssl.ca.location'])}"]
    if security.get("ssl.endpoint.identification.algorithm") == "none":
        lines.append("ssl.endpoint.identification.algorithm=")
    return "\n".join(lines) + "\n"


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _property_value(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + escaped if escaped.startswith((" ", "\t")) else escaped


def apply_quotas(
    bootstrap: str,
    quotas: Sequence[Quota],
    *,
    config_file: Path | None = None,
    kafka_configs: Path | None = None,
    java_properties: Path | None = None,
    timeout: float = 120.0,
) -> None:
    """Set each principal's ``producer_byte_rate`` with Kafka's ConfigCommand (see the module docstring)."""
    _config_quotas(
        bootstrap,
        [(q.user, ["--add-config", f"producer_byte_rate={q.producer_byte_rate}"]) for q in quotas],
        config_file=config_file,
        kafka_configs=kafka_configs,
        java_properties=java_properties,
        timeout=timeout,
    )


def remove_quotas(
    bootstrap: str,
    principals: Sequence[str],
    *,
    config_file: Path | None = None,
    kafka_configs: Path | None = None,
    timeout: float = 120.0,
) -> None:
    """Delete the ``producer_byte_rate`` of each principal (it falls back to the cluster's default: none)."""
    users = [principal.partition(":")[2] for principal in principals]
    _config_quotas(
        bootstrap,
        [(user, ["--delete-config", "producer_byte_rate"]) for user in users],
        config_file=config_file,
        kafka_configs=kafka_configs,
        java_properties=None,
        timeout=timeout,
    )


def _config_quotas(
    bootstrap: str,
    changes: Sequence[tuple[str, list[str]]],
    *,
    config_file: Path | None,
    kafka_configs: Path | None,
    java_properties: Path | None,
    timeout: float,
) -> None:
    if not changes:
        return
    command = config_command(kafka_configs)
    with tempfile.TemporaryDirectory(prefix="bernstein-quotas-") as private:  # 0700
        if java_properties is None:
            java_properties = Path(private) / "admin.properties"
            descriptor = os.open(java_properties, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(java_client_properties(security_config(config_file)))
        for user, change in changes:
            argv = [
                *command,
                "--bootstrap-server",
                bootstrap,
                "--command-config",
                str(java_properties),
                "--alter",
                "--entity-type",
                "users",
                "--entity-name",
                user,
                *change,
            ]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                raise QuotaError(f"Kafka's ConfigCommand did not set the quota of user {user!r} within {timeout:.0f}s") from None
            except OSError as exc:
                raise QuotaToolMissing(f"cannot run {command[0]}: {exc.strerror}") from None
            if done.returncode != 0:
                said = (done.stderr.strip() or done.stdout.strip()).splitlines()
                if any("AuthorizationException" in line for line in said):
                    raise not_authorized("alter client quotas (run `bernstein kafka acls --apply` as the Kafka admin)")
                reason = next((line for line in said if "Exception" in line), said[-1] if said else "no output")
                raise QuotaError(
                    f"Kafka's ConfigCommand could not set the quota of user {user!r} (exit {done.returncode}): {reason[:400]}"
                )


@dataclass(frozen=True)
class UserOutcome:
    """What ``ensure_scram_users`` did for one producer."""

    identity: KafkaIdentity
    action: str
    """created, rotated, kept (an existing login, its password unchanged) or skipped (not a SCRAM principal)."""
    properties: Path | None = None

    def line(self) -> str:
        where = f" -> {self.properties} (0600)" if self.properties is not None else ""
        if self.action == "skipped":
            return f"skipped {self.identity.principal} of {self.identity.producer!r}: only User: principals have SCRAM logins"
        if self.action == "kept":
            held = f" (its file: {self.properties})" if self.properties is not None else ""
            return f"kept {self.identity.principal}: the login exists, its password is unchanged{held}; --rotate sets a new one"
        return f"{self.action} {self.identity.principal}{where}"


def scram_users(identities: Sequence[KafkaIdentity]) -> list[KafkaIdentity]:
    """The identities that get a SCRAM login (``User:`` principals), each name checked."""
    users = [i for i in identities if i.principal_type == "User"]
    for identity in users:
        if not _SCRAM_USER.fullmatch(identity.principal_name):
            raise ScramUserError(
                f"producer {identity.producer!r}: {identity.principal!r} cannot be a SCRAM login made here (1-128 characters "
                "of A-Z a-z 0-9 . _ @ + -, not starting with a dot); set its kafka_principal"
            )
    return users


def ensure_scram_users(
    bootstrap: str,
    identities: Sequence[KafkaIdentity],
    out: Path,
    *,
    rotate: bool = False,
    mechanism: str = "SCRAM-SHA-512",
    config_file: Path | None = None,
    timeout: float = 30.0,
) -> list[UserOutcome]:
    """Create (or with ``rotate`` reset) a SCRAM login per ``User:`` identity and write its client properties to ``out``.

    A login that exists keeps its password (its host keeps the file it has); a new password is random
    (32 bytes, URL-safe) and written only to ``out/<name>.properties`` (0600, in a 0700 directory
    created if needed): the file is staged first, renamed into place once the broker holds the credential.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialAlteration,
        UserScramCredentialUpsertion,
    )

    users = scram_users(identities)
    outcomes = [UserOutcome(i, "skipped") for i in identities if i not in users]
    if not users:
        return outcomes
    admin_security = security_config(config_file)
    admin = AdminClient(client_config(bootstrap) if config_file is None else client_config_as(config_file, bootstrap))
    wanted = ScramMechanism[mechanism.replace("-", "_")]
    existing: set[str] = set()
    described: Any = admin.describe_user_scram_credentials([i.principal_name for i in users], request_timeout=timeout)
    for name, future in described.items():  # with a list of users: one future per user
        try:
            description = future.result(timeout)
        except KafkaException as exc:
            if "RESOURCE_NOT_FOUND" in str(exc):
                continue
            raise _admin_error(exc, "describe SCRAM logins") from None
        if any(info.mechanism == wanted for info in description.scram_credential_infos):
            existing.add(name)
    try:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ScramUserError(f"cannot create {out}: {exc.strerror}") from None
    staged: dict[str, tuple[KafkaIdentity, Path, Path, str]] = {}
    try:
        for identity in users:
            name = identity.principal_name
            target = out / f"{name}.properties"
            if name in existing and not rotate:
                outcomes.append(UserOutcome(identity, "kept", target if target.is_file() else None))
                continue
            password = secrets.token_urlsafe(32)
            stage = out / f".{name}.properties.new"
            _write_private(stage, _producer_properties(identity, mechanism, password, admin_security))
            staged[name] = (identity, stage, target, password)
        if staged:
            alterations: list[UserScramCredentialAlteration] = [
                UserScramCredentialUpsertion(name, ScramCredentialInfo(wanted, SCRAM_ITERATIONS), password.encode())
                for name, (_, _, _, password) in staged.items()
            ]
            failed: list[KafkaError] = []
            for name, future in admin.alter_user_scram_credentials(alterations, request_timeout=timeout).items():
                try:
                    future.result(timeout)
                except KafkaException as exc:
                    failed.append(_admin_error(exc, f"set the SCRAM login of {name!r}"))
                    continue
                identity, stage, target, _ = staged[name]
                stage.replace(target)  # every login the broker took gets its file, whatever happened to the others
                outcomes.append(UserOutcome(identity, "rotated" if name in existing else "created", target))
            if failed:
                raise failed[0]
    finally:
        for _, stage, _, _ in staged.values():
            stage.unlink(missing_ok=True)
    order = {identity.principal: n for n, identity in enumerate(identities)}
    return sorted(outcomes, key=lambda o: order[o.identity.principal])


def _admin_error(exc: Exception, action: str) -> KafkaError:
    if "AUTHORIZATION" in str(exc):
        return not_authorized(f"{action} (run `bernstein kafka users --apply` as the Kafka admin)")
    return ScramUserError(f"Kafka could not {action}: {exc}")


def _producer_properties(identity: KafkaIdentity, mechanism: str, password: str, admin: Mapping[str, str]) -> str:
    """A producer host's client properties: its SCRAM login, and the admin's TLS trust (the same brokers)."""
    protocol = admin.get("security.protocol", "SASL_SSL")
    lines = [
        f"# Generated by `bernstein kafka users`: the Kafka login of producer {identity.producer!r} ({identity.principal}).",
        f"security.protocol={protocol if protocol.startswith('SASL_') else 'SASL_SSL'}",
        f"sasl.mechanism={mechanism}",
        f"sasl.username={identity.principal_name}",
        f"sasl.password={password}",
    ]
    lines += [f"{key}={admin[key]}" for key in ("ssl.ca.location", "ssl.endpoint.identification.algorithm") if key in admin]
    return "\n".join(lines) + "\n"


def _write_private(path: Path, text: str) -> None:
    try:
        path.unlink(missing_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise ScramUserError(f"cannot write {path}: {exc.strerror}") from None


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    kafka_sub = command_group(sub, "kafka", help="Kafka security: the ACLs, quotas and producer logins of a deployment")
    acls = kafka_sub.add_parser("acls", help="print (or --apply) the ACLs of a deployment's principals and producer quotas")
    acls.add_argument("--prefix", required=True, help="the deployment's topic prefix")
    acls.add_argument(
        "--apply", action="store_true", help="create them and set the quotas (as the Kafka admin of BERNSTEIN_KAFKA_CONFIG_FILE)"
    )
    acls.add_argument("--spec", type=Path, default=DEFAULT_SPEC, help="ACL spec file (default: config/kafka-acls.toml)")
    acls.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help="roles manifest: the producer role's ACLs and a produce quota for each producer's own Kafka principal",
    )
    acls.add_argument(
        "--produce-bytes-per-second",
        type=int,
        default=DEFAULT_PRODUCE_BYTES_PER_SECOND,
        help=f"produce quota of a manifest producer that sets none (default {DEFAULT_PRODUCE_BYTES_PER_SECOND}: 1 MiB/s)",
    )
    _add_quota_tool_flags(acls)
    for role in ROLES:
        acls.add_argument(f"--{role}-principal", default=None, help=f"Kafka principal of the {role} (default User:{role})")
    acls.set_defaults(func=_acls)

    users = kafka_sub.add_parser("users", help="print (or --apply) a SCRAM login per producer of a roles manifest")
    users.add_argument("--manifest", type=Path, required=True, help="roles manifest: one login per [[producers]] entry")
    users.add_argument("--apply", action="store_true", help="create the logins (as the Kafka admin) and write --out")
    users.add_argument("--out", type=Path, default=None, help="directory for each new login's <name>.properties (0600)")
    users.add_argument("--rotate", action="store_true", help="give existing logins a new password too")
    users.add_argument("--mechanism", choices=SCRAM_MECHANISMS, default="SCRAM-SHA-512", help="SCRAM mechanism")
    users.set_defaults(func=_users)


def _add_quota_tool_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kafka-configs",
        type=Path,
        default=None,
        help="Kafka's bin/kafka-configs.sh, which sets the quotas (default: infra's Kafka jars on java)",
    )
    parser.add_argument(
        "--kafka-configs-properties",
        type=Path,
        default=None,
        help="Java client properties for it (default: translated from BERNSTEIN_KAFKA_CONFIG_FILE)",
    )


def _acls(args: argparse.Namespace) -> int:
    principals: dict[str, str | Sequence[str]] = {role: getattr(args, f"{role}_principal") or f"User:{role}" for role in ROLES}
    quotas: list[Quota] = []
    if args.manifest is not None:
        if args.producer_principal is not None:
            raise UsageError("--producer-principal and --manifest: the manifest names every producer's principal; pass one")
        identities = manifest_identities(args.manifest)
        principals["producer"] = [identity.principal for identity in identities]
        quotas = quotas_for(identities, args.produce_bytes_per_second)
    acls = acls_for(args.prefix, principals, load_spec(args.spec))
    for acl in acls:
        print(acl.line())
    for quota in quotas:
        print(quota.line())
    if args.apply:
        bootstrap = require_bootstrap(settings_from(argparse.Namespace(prefix=args.prefix)).kafka_bootstrap)
        apply_acls(bootstrap, acls)
        print(f"applied {len(acls)} ACL bindings for prefix {args.prefix!r}")
        if quotas:
            apply_quotas(bootstrap, quotas, kafka_configs=args.kafka_configs, java_properties=args.kafka_configs_properties)
            print(f"set {len(quotas)} produce quotas")
    return EXIT_OK


def _users(args: argparse.Namespace) -> int:
    identities = manifest_identities(args.manifest)
    users = scram_users(identities)
    if not args.apply:
        for identity in identities:
            kind = f"SCRAM {args.mechanism}" if identity in users else "not a SCRAM login (skipped)"
            print(f"USER {identity.principal} producer={identity.producer!r} {kind}")
        return EXIT_OK
    if args.out is None:
        raise UsageError("--apply needs --out DIR: each new login's password is written there, and nowhere else")
    bootstrap = require_bootstrap(settings_from(argparse.Namespace(prefix=None)).kafka_bootstrap)
    for outcome in ensure_scram_users(bootstrap, identities, args.out, rotate=args.rotate, mechanism=args.mechanism):
        print(outcome.line())
    return EXIT_OK
