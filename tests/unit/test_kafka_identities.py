"""One Kafka principal per producer host: the manifest's kafka_principal and produce_bytes_per_second,
the ACL and quota lines `bernstein kafka acls --manifest` emits, and how quotas and logins are written. No broker."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from bernstein.cli import main
from bernstein.commands.common import without_endpoint_line
from bernstein.commands.kafka import (
    DEFAULT_PRODUCE_BYTES_PER_SECOND,
    Acl,
    Quota,
    QuotaError,
    QuotaToolMissing,
    ScramUserError,
    _producer_properties,
    acls_for,
    apply_quotas,
    config_command,
    java_client_properties,
    load_spec,
    manifest_identities,
    quotas_for,
    scram_users,
)
from bernstein.consumers.manifest import KafkaIdentity, ManifestError, parse_manifest
from bernstein.substrate.kafka import KafkaNotAuthorized, parse_client_properties
from bernstein.substrate.keys import Ed25519Signer

ROLES = '[[roles]]\nrole = "developer"\n'
PRINCIPALS = {"producer": "User:producer", "scheduler": "User:scheduler", "auditor": "User:auditor"}


def producers_toml(*entries: dict[str, Any]) -> str:
    """A manifest with ``ROLES`` and one [[producers]] entry per dict (name, then any extra keys as TOML literals)."""
    text = ROLES
    for n, entry in enumerate(entries, start=1):
        key = Ed25519Signer.from_seed(bytes([n]) * 32).public_key_raw.hex()
        extra = "".join(f"{k} = {v}\n" for k, v in entry.items() if k != "name")
        text += f'\n[[producers]]\nname = "{entry["name"]}"\nroles = ["developer"]\n{extra}'
        text += f'  [[producers.keys]]\n  public_key = "{key}"\n'
    return text


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "roles.toml"
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- the manifest


def test_every_producer_gets_its_own_principal_by_default() -> None:
    manifest = parse_manifest(producers_toml({"name": "alice"}, {"name": "agents@host-2"}))
    assert manifest.kafka == (KafkaIdentity("alice", "User:alice"), KafkaIdentity("agents@host-2", "User:agents@host-2"))
    assert manifest.kafka[1].principal_name == "agents@host-2"
    assert manifest.kafka[1].produce_bytes_per_second is None  # the deployment's default applies
    assert set(manifest.producers.producers) == {"alice", "agents@host-2"}  # the scheduler's view is unchanged


def test_explicit_principal_and_quota() -> None:
    text = producers_toml(
        {"name": "alice", "kafka_principal": '"User:CN=alice-1,O=acme"', "produce_bytes_per_second": 65536},
        {"name": "mallory", "produce_bytes_per_second": 1024},
    )
    assert parse_manifest(text).kafka == (
        KafkaIdentity("alice", "User:CN=alice-1,O=acme", 65536),
        KafkaIdentity("mallory", "User:mallory", 1024),
    )


@pytest.mark.parametrize(
    ("entries", "fragment"),
    [
        ([{"name": "a", "kafka_principal": '"alice"'}], "producers[0]: kafka_principal must be TYPE:NAME"),
        ([{"name": "a", "kafka_principal": '"User:al ice"'}], "kafka_principal must be TYPE:NAME"),
        ([{"name": "a", "kafka_principal": '":alice"'}], "kafka_principal must be TYPE:NAME"),
        ([{"name": "a", "kafka_principal": "7"}], "kafka_principal must be TYPE:NAME"),
        ([{"name": "a", "produce_bytes_per_second": 0}], "produce_bytes_per_second must be a whole number"),
        ([{"name": "a", "produce_bytes_per_second": -5}], "produce_bytes_per_second must be"),
        ([{"name": "a", "produce_bytes_per_second": 1.5}], "produce_bytes_per_second must be"),
        ([{"name": "a", "produce_bytes_per_second": "true"}], "produce_bytes_per_second must be"),
        ([{"name": "a", "produce_bytes_per_second": '"1MB"'}], "produce_bytes_per_second must be"),
        ([{"name": "a", "produce_bytes_per_second": 2**53 + 1}], "produce_bytes_per_second must be"),
        ([{"name": "a", "kafka_quota": 5}], "unknown keys ['kafka_quota']"),
        (
            [{"name": "alice"}, {"name": "mallory", "kafka_principal": '"User:alice"'}],
            "producers[1]: Kafka principal 'User:alice' of 'mallory' is also 'alice''s",
        ),
        (
            [{"name": "a", "kafka_principal": '"User:shared"'}, {"name": "b", "kafka_principal": '"User:shared"'}],
            "each producer host needs its own",
        ),
    ],
)
def test_bad_kafka_fields_name_the_entry(entries: list[dict[str, Any]], fragment: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(producers_toml(*entries), source="team.toml")
    assert fragment in str(info.value)
    assert "team.toml" in str(info.value)


def test_a_name_that_is_no_principal_needs_an_explicit_one(tmp_path: Path) -> None:
    path = write(tmp_path, producers_toml({"name": "research worker"}))
    assert parse_manifest(path.read_text()).kafka[0].principal == "User:research worker"  # the scheduler does not care
    with pytest.raises(
        ManifestError, match=r"'research worker' has no usable default Kafka principal .* set its kafka_principal"
    ):
        manifest_identities(path)
    path.write_text(producers_toml({"name": "research worker", "kafka_principal": '"User:research-worker"'}))
    assert [i.principal for i in manifest_identities(path)] == ["User:research-worker"]


def test_a_manifest_without_producers_grants_nobody(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no \\[\\[producers\\]\\]"):
        manifest_identities(write(tmp_path, ROLES))
    with pytest.raises(ManifestError, match="--manifest .*none.toml: no such file"):
        manifest_identities(tmp_path / "none.toml")


# ---------------------------------------------------------------- ACL and quota lines


def test_the_producer_role_is_granted_to_each_producer_principal() -> None:
    acls = acls_for("acme", {**PRINCIPALS, "producer": ["User:alice", "User:mallory"]}, load_spec())
    producers = {a for a in acls if a.name == "acme.activity.submissions" and a.principal != "User:scheduler"}
    assert {(a.principal, a.operation) for a in producers} == {
        ("User:alice", "write"),
        ("User:alice", "describe"),
        ("User:mallory", "write"),
        ("User:mallory", "describe"),
    }
    assert not [a for a in acls if a.principal == "User:producer"]
    # everything else is what the role-per-principal spec gives
    single = acls_for("acme", PRINCIPALS, load_spec())
    assert [a for a in acls if a.principal not in ("User:alice", "User:mallory")] == [
        a for a in single if a.principal != "User:producer"
    ]
    assert acls == sorted(acls)


def test_a_bad_principal_in_a_list_is_a_usage_error() -> None:
    with pytest.raises(Exception, match="--producer-principal 'alice': expected TYPE:NAME"):
        acls_for("acme", {**PRINCIPALS, "producer": ["User:bob", "alice"]}, load_spec())


def test_quotas_take_the_manifest_value_else_the_default() -> None:
    identities = [KafkaIdentity("mallory", "User:mallory", 1024), KafkaIdentity("alice", "User:alice")]
    assert quotas_for(identities) == [
        Quota("User:alice", DEFAULT_PRODUCE_BYTES_PER_SECOND),
        Quota("User:mallory", 1024),
    ]
    assert DEFAULT_PRODUCE_BYTES_PER_SECOND == 1048576
    assert quotas_for(identities, 4096)[0] == Quota("User:alice", 4096)
    assert Quota("User:CN=a,O=b", 7).line() == "QUOTA User:CN=a,O=b producer_byte_rate=7"
    assert Quota("User:CN=a,O=b", 7).user == "CN=a,O=b"
    with pytest.raises(Exception, match="--produce-bytes-per-second 0"):
        quotas_for(identities, 0)


def test_cli_emits_acls_and_quotas_per_producer_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path, producers_toml({"name": "alice"}, {"name": "mallory", "produce_bytes_per_second": 1024}))
    assert main(["kafka", "acls", "--prefix", "acme", "--manifest", str(manifest)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "ALLOW User:alice WRITE TOPIC LITERAL acme.activity.submissions" in lines
    assert "ALLOW User:mallory WRITE TOPIC LITERAL acme.activity.submissions" in lines
    assert not [line for line in lines if "User:producer" in line]
    assert lines[-2:] == ["QUOTA User:alice producer_byte_rate=1048576", "QUOTA User:mallory producer_byte_rate=1024"]
    # 41 bindings for one principal per role: the producer's 2 once more for the second host
    assert len(lines) == len(set(lines)) == 41 + 2 + 2


def test_cli_default_quota_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path, producers_toml({"name": "alice"}))
    assert main(["kafka", "acls", "--prefix", "acme", "--manifest", str(manifest), "--produce-bytes-per-second", "512"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "QUOTA User:alice producer_byte_rate=512"


def test_cli_without_manifest_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kafka", "acls", "--prefix", "acme"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "ALLOW User:producer WRITE TOPIC LITERAL acme.activity.submissions" in lines
    assert not [line for line in lines if line.startswith("QUOTA")]


@pytest.mark.parametrize(
    ("argv", "rate", "fragment"),
    [
        (["acls", "--prefix", "acme", "--producer-principal", "User:x"], 5, "--producer-principal and --manifest"),
        (["acls", "--prefix", "acme"], 0, "produce_bytes_per_second must be"),
        (["users", "--apply"], 5, "--apply needs --out DIR"),
    ],
)
def test_cli_mistakes_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], rate: int, fragment: str
) -> None:
    manifest = write(tmp_path, producers_toml({"name": "alice", "produce_bytes_per_second": rate}))
    assert main(["kafka", *argv, "--manifest", str(manifest)]) == 3
    err = without_endpoint_line(capsys.readouterr().err)  # `users --apply` names its broker first
    assert fragment in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_users_lists_the_logins_it_would_make(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path, producers_toml({"name": "alice"}, {"name": "bob", "kafka_principal": '"Svc:bob"'}))
    assert main(["kafka", "users", "--manifest", str(manifest)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "USER User:alice producer='alice' SCRAM SCRAM-SHA-512",
        "USER Svc:bob producer='bob' not a SCRAM login (skipped)",
    ]


# ---------------------------------------------------------------- logins


def test_scram_logins_need_plain_names() -> None:
    assert scram_users([KafkaIdentity("a", "User:a.b@c-1"), KafkaIdentity("x", "Svc:x")]) == [KafkaIdentity("a", "User:a.b@c-1")]
    for name in ("User:a,b", "User:a=b", "User:.hidden", "User:a/b", "User:" + "x" * 129):
        with pytest.raises(ScramUserError, match="cannot be a SCRAM login"):
            scram_users([KafkaIdentity("a", name)])


def test_a_producer_properties_file_is_what_clients_read() -> None:
    admin = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
        "ssl.ca.location": "/etc/kafka/ca.pem",
    }
    text = _producer_properties(KafkaIdentity("alice", "User:alice"), "SCRAM-SHA-256", "pw-1", admin)
    assert parse_client_properties(text, source="alice.properties") == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "pw-1",
        "ssl.ca.location": "/etc/kafka/ca.pem",
    }
    assert "admin-secret" not in text


# ---------------------------------------------------------------- quotas through Kafka's ConfigCommand


def test_java_properties_of_a_scram_admin() -> None:
    text = java_client_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": 'p"w\\1',
            "ssl.ca.location": "/tls/ca.pem",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert text.splitlines() == [
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-512",
        # JAAS quotes the password (\" and \\), and the properties file escapes each backslash again
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
        'password="p\\\\"w\\\\\\\\1";',
        "ssl.truststore.type=PEM",
        "ssl.truststore.location=/tls/ca.pem",
        "ssl.endpoint.identification.algorithm=",
    ]
    assert java_client_properties({}) == "security.protocol=PLAINTEXT\n"


@pytest.mark.parametrize(
    "security",
    [
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
        {"security.protocol": "SSL", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"},
    ],
)
def test_admin_logins_without_a_java_form_ask_for_one(security: dict[str, str]) -> None:
    with pytest.raises(QuotaError, match="--kafka-configs-properties FILE"):
        java_client_properties(security)


def test_a_missing_tool_is_named(tmp_path: Path) -> None:
    with pytest.raises(QuotaToolMissing, match="not an executable file"):
        config_command(tmp_path / "kafka-configs.sh")


def fake_kafka_configs(tmp_path: Path, body: str) -> Path:
    """A stand-in for bin/kafka-configs.sh: records its arguments and its --command-config file (mode and text)."""
    script = tmp_path / "kafka-configs.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {tmp_path}/calls\n'
        'while [ $# -gt 0 ]; do if [ "$1" = --command-config ]; then '
        f'stat -c %a "$2" > {tmp_path}/mode; cat "$2" > {tmp_path}/config; fi; shift; done\n' + body
    )
    script.chmod(0o755)
    return script


def test_apply_quotas_runs_config_command_once_per_principal(tmp_path: Path) -> None:
    admin = tmp_path / "admin.properties"
    admin.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password=s3cret\n")
    tool = fake_kafka_configs(tmp_path, "echo Completed updating config\n")
    apply_quotas(
        "b1:9093,b2:9093",
        [Quota("User:alice", 1048576), Quota("User:CN=m,O=x", 1024)],
        config_file=admin,
        kafka_configs=tool,
    )
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"--bootstrap-server b1:9093,b2:9093 --command-config {_config_path(tmp_path)} --alter --entity-type users "
        f"--entity-name {name} --add-config producer_byte_rate={rate}"
        for name, rate in (("alice", 1048576), ("CN=m,O=x", 1024))
    ]
    assert (tmp_path / "mode").read_text().strip() == "600"
    assert 'username="admin" password="s3cret";' in (tmp_path / "config").read_text()
    assert not Path(_config_path(tmp_path)).exists()  # the admin's password does not outlive the command


def _config_path(tmp_path: Path) -> str:
    """The --command-config path the fake tool was given (a private temporary file)."""
    first = (tmp_path / "calls").read_text().split()
    return first[first.index("--command-config") + 1]


@pytest.mark.parametrize(
    ("output", "error", "fragment"),
    [
        (
            "Error while executing config command with args '--alter'\\n"
            "org.apache.kafka.common.errors.ClusterAuthorizationException: Cluster authorization failed.",
            KafkaNotAuthorized,
            "alter client quotas",
        ),
        (
            "Error while executing config command with args '--alter'\\n"
            "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.TimeoutException: timed out",
            QuotaError,
            "could not set the quota of user 'alice' (exit 1): java.util.concurrent.ExecutionException",
        ),
    ],
)
def test_config_command_failures_are_typed(tmp_path: Path, output: str, error: type[Exception], fragment: str) -> None:
    admin = tmp_path / "admin.properties"
    admin.write_text("security.protocol=PLAINTEXT\n")
    tool = fake_kafka_configs(tmp_path, f'printf "{output}\\n" >&2\nexit 1\n')
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        apply_quotas("b:9092", [Quota("User:alice", 1)], config_file=admin, kafka_configs=tool)


def test_infra_jars_run_on_java_when_no_tool_is_named() -> None:
    from bernstein.commands.kafka import KAFKA_LIBS

    if not any(KAFKA_LIBS.glob("kafka_2.13-*.jar")):
        pytest.skip("infra/up has not fetched the Kafka jars here")
    command = config_command()
    assert command[-1] == "kafka.admin.ConfigCommand" and command[-2] == f"{KAFKA_LIBS}/*"


def test_acl_lines_stay_stable() -> None:
    assert Acl("User:alice", "topic", "literal", "p.activity.submissions", "write").line() == (
        "ALLOW User:alice WRITE TOPIC LITERAL p.activity.submissions"
    )


def test_properties_written_by_users_are_private(tmp_path: Path) -> None:
    from bernstein.commands.kafka import _write_private

    target = tmp_path / "alice.properties"
    target.write_text("old")
    target.chmod(0o644)
    _write_private(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
