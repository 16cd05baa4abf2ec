"""Kafka client security settings: the properties file every client merges, and the topic durability settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from bernstein.substrate import kafka
from bernstein.substrate.kafka import (
    KafkaConfigError,
    client_config,
    client_config_as,
    parse_client_properties,
    redacted,
    replication_settings,
    security_config,
)

SCRAM = """\
# the scheduler's principal
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=scheduler
sasl.password=s3cr=t with spaces
ssl.ca.location=/etc/bernstein/ca.pem
"""


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No BERNSTEIN_* from the caller's shell, and no .infra/env above the working directory."""
    for name in ("BERNSTEIN_KAFKA_CONFIG_FILE", "BERNSTEIN_TOPIC_REPLICATION_FACTOR", "BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def test_scram_file_parses_to_librdkafka_keys_and_keeps_the_password_whole() -> None:
    assert parse_client_properties(SCRAM, source="scheduler.properties") == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "scheduler",
        "sasl.password": "s3cr=t with spaces",
        "ssl.ca.location": "/etc/bernstein/ca.pem",
    }


def test_mtls_file_resolves_relative_paths_against_the_files_directory(tmp_path: Path) -> None:
    text = "security.protocol=ssl\nssl.ca.location=ca.pem\nssl.certificate.location=certs/me.pem\nssl.key.location=/abs/me.key\n"
    values = parse_client_properties(text, source="x", base=tmp_path)
    assert values == {
        "security.protocol": "SSL",
        "ssl.ca.location": str(tmp_path / "ca.pem"),
        "ssl.certificate.location": str(tmp_path / "certs" / "me.pem"),
        "ssl.key.location": "/abs/me.key",
    }


def test_unknown_key_is_a_typed_error_naming_the_key_and_line() -> None:
    with pytest.raises(KafkaConfigError, match=r"^f\.properties:2: unknown key 'enable\.idempotence'") as caught:
        parse_client_properties("security.protocol=SSL\nenable.idempotence=false\n", source="f.properties")
    assert caught.value.code == "E_KAFKA_CONFIG"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("security.protocol SASL_SSL\n", r"f:1: expected key=value"),
        ("security.protocol=SASL_SSL\nsecurity.protocol=SSL\n", r"f:2: security\.protocol is set twice"),
        ("security.protocol=\n", r"f:1: security\.protocol has no value"),
        ("security.protocol=TLS\n", r"f: security\.protocol must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=MD5\n", r"f: sasl\.mechanism must be one of"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.mechanisms=PLAIN\n", r"not both"),
        ("security.protocol=SASL_SSL\nsasl.username=u\n", r"sasl\.username is set but sasl\.password is not"),
        ("security.protocol=SSL\nsasl.username=u\nsasl.password=hunter2\n", r"sasl\.\* settings need"),
        ("ssl.endpoint.identification.algorithm=maybe\n", r"must be one of https, none"),
    ],
)
def test_malformed_files_are_typed_errors(text: str, message: str) -> None:
    with pytest.raises(KafkaConfigError, match=message):
        parse_client_properties(text, source="f")


@pytest.mark.parametrize(
    "text",
    [
        "security.protocol=SASL_SSL\nsasl.password=hunter2-secret\nbogus.key=hunter2-secret\n",
        "security.protocol=SSL\nsasl.password=hunter2-secret\n",
        "security.protocol=SASL_SSL\nsasl.password=hunter2-secret\nsasl.password=hunter2-secret\n",
        "sasl.password=hunter2-secret\nsasl.mechanism=hunter2-secret\n",
    ],
)
def test_a_password_never_appears_in_an_error(text: str) -> None:
    with pytest.raises(KafkaConfigError) as caught:
        parse_client_properties(text, source="f")
    assert "hunter2" not in str(caught.value)


def test_redacted_hides_both_secrets() -> None:
    config = client_config("b:1", **{"sasl.password": "hunter2", "ssl.key.password": "k3y", "sasl.username": "u"})
    shown = redacted(config)
    assert shown["sasl.password"] == "***" and shown["ssl.key.password"] == "***"
    assert shown["sasl.username"] == "u" and "logger" not in shown
    assert "hunter2" not in repr(shown) and "k3y" not in repr(shown)


def test_client_config_merges_the_file_named_by_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "scheduler.properties"
    path.write_text(SCRAM)
    monkeypatch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(path))
    config = client_config("127.0.0.1:9092", **{"group.id": "g"})
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.username"] == "scheduler"
    assert config["group.id"] == "g" and config["bootstrap.servers"] == "127.0.0.1:9092"
    # explicit settings win over the file (a test's deliberately plaintext client)
    assert client_config("b:1", **{"security.protocol": "PLAINTEXT"})["security.protocol"] == "PLAINTEXT"


def test_client_config_reads_the_setting_from_dot_infra_env(tmp_path: Path) -> None:
    (tmp_path / "clients").mkdir()
    (tmp_path / "clients" / "admin.properties").write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n")
    (tmp_path / ".infra").mkdir()
    (tmp_path / ".infra" / "env").write_text(f"BERNSTEIN_KAFKA_CONFIG_FILE={tmp_path / 'clients' / 'admin.properties'}\n")
    assert security_config() == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}


def test_explicit_config_file_wins_over_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    named, explicit = tmp_path / "a.properties", tmp_path / "b.properties"
    named.write_text("security.protocol=SSL\n")
    explicit.write_text("security.protocol=SASL_SSL\n")
    monkeypatch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(named))
    assert client_config_as(explicit, "b:1")["security.protocol"] == "SASL_SSL"
    assert client_config("b:1")["security.protocol"] == "SSL"


def test_no_setting_means_no_security_keys() -> None:
    assert not kafka.SECURITY_KEYS & client_config("b:1").keys()


def test_missing_file_is_a_typed_error_naming_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(tmp_path / "nope.properties"))
    with pytest.raises(KafkaConfigError, match=r"nope\.properties \(BERNSTEIN_KAFKA_CONFIG_FILE\): No such file"):
        client_config("b:1")


def test_replication_defaults_to_one_and_one() -> None:
    assert replication_settings() == (1, 1)


def test_replication_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERNSTEIN_TOPIC_REPLICATION_FACTOR", "3")
    monkeypatch.setenv("BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS", "2")
    assert replication_settings() == (3, 2)


@pytest.mark.parametrize(
    ("factor", "min_insync", "message"),
    [
        ("three", "1", r"BERNSTEIN_TOPIC_REPLICATION_FACTOR='three' is not a whole number"),
        ("0", "1", r"BERNSTEIN_TOPIC_REPLICATION_FACTOR=0 must be at least 1"),
        ("2", "3", r"BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS=3 exceeds BERNSTEIN_TOPIC_REPLICATION_FACTOR=2"),
    ],
)
def test_bad_replication_settings_are_typed_errors(
    monkeypatch: pytest.MonkeyPatch, factor: str, min_insync: str, message: str
) -> None:
    monkeypatch.setenv("BERNSTEIN_TOPIC_REPLICATION_FACTOR", factor)
    monkeypatch.setenv("BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS", min_insync)
    with pytest.raises(KafkaConfigError, match=message):
        replication_settings()
