"""infra/up --secure's generated material, without starting a broker: certificates, client files, modes 0600."""

from __future__ import annotations

import ipaddress
import json
import stat
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

import infra
from bernstein.substrate.kafka import load_client_properties


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_creates_secrets_0600_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "env"
    infra.atomic_write(target, "A=1\n", mode=0o600)
    assert target.read_text() == "A=1\n" and mode(target) == 0o600
    infra.atomic_write(target, "A=2\n", mode=0o600)
    assert target.read_text() == "A=2\n" and mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env"]


def test_env_file_is_0600_and_names_the_admin_file_in_secure_mode(tmp_path: Path) -> None:
    ctx = infra.Ctx(tmp_path, None, secure=True)
    ctx.write_env("127.0.0.1:1", "http://127.0.0.1:2", "ak", "sk", "b", "/x/admin.properties")
    assert mode(ctx.p.env) == 0o600
    lines = ctx.p.env.read_text().splitlines()
    assert lines[:2] == ["BERNSTEIN_KAFKA_BOOTSTRAP=127.0.0.1:1", "BERNSTEIN_KAFKA_CONFIG_FILE=/x/admin.properties"]
    ctx.write_env("127.0.0.1:1", "http://127.0.0.1:2", "ak", "sk", "b", None)
    assert not [line for line in ctx.p.env.read_text().splitlines() if "CONFIG_FILE" in line]


def test_certificates_chain_to_the_local_ca_and_name_the_loopback(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    infra.ensure_tls(paths)
    ca = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
    pem = paths.broker_pem.read_bytes()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8, unencrypted: Kafka's PEM key store
    chain = x509.load_pem_x509_certificates(pem)
    assert [c.subject.rfc4514_string() for c in chain] == ["CN=bernstein-broker", "CN=bernstein local CA"]
    chain[0].verify_directly_issued_by(ca)
    san = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    usages = chain[0].extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usages)
    assert mode(paths.broker_pem) == 0o600 and mode(paths.ca_key) == 0o600
    before = paths.broker_pem.read_bytes()
    infra.ensure_tls(paths)  # kept, not regenerated
    assert paths.broker_pem.read_bytes() == before


def test_scram_passwords_are_random_kept_and_client_files_parse(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    passwords = infra.ensure_scram_passwords(paths)
    assert sorted(passwords) == ["admin", "auditor", "producer", "scheduler"]
    assert len(set(passwords.values())) == 4 and all(len(pw) >= 32 for pw in passwords.values())
    assert infra.ensure_scram_passwords(paths) == passwords
    assert json.loads(paths.scram.read_text()) == passwords and mode(paths.scram) == 0o600
    infra.write_client_properties(paths, passwords)
    for user in passwords:
        file = paths.clients / f"{user}.properties"
        assert mode(file) == 0o600
        assert load_client_properties(file) == {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": passwords[user],
            "ssl.ca.location": str(paths.ca_cert),
        }


def test_secure_server_properties(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    passwords = {u: f"pw-{u}" for u in infra.SCRAM_USERS}
    infra.write_kafka_configs(paths, 9092, 9093, passwords)
    props = dict(
        line.split("=", 1) for line in paths.server_props.read_text().splitlines() if "=" in line and not line.startswith("#")
    )
    assert mode(paths.server_props) == 0o600
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["listener.security.protocol.map"] == "CONTROLLER:SSL,SASL_SSL:SASL_SSL"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert props["sasl.enabled.mechanisms"] == props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["super.users"] == "User:admin;User:CN=bernstein-broker"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert 'username="admin" password="pw-admin"' in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert props["log.dirs"] == str(paths.kafka_data_secure)
    infra.write_kafka_configs(paths, 9092, 9093)
    plain = paths.server_props.read_text()
    assert "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in plain and "SASL" not in plain
    assert f"log.dirs={paths.kafka_data}\n" in plain


def test_ports_are_recovered_from_a_secure_config(tmp_path: Path) -> None:
    paths = infra.Paths(tmp_path)
    infra.write_kafka_configs(paths, 4001, 4002, {u: "x" for u in infra.SCRAM_USERS})
    assert infra.load_ports(paths) == {"kafka": 4001, "controller": 4002}


def test_up_parses_secure_and_keep_mode() -> None:
    args = infra.parse_args(["up", "--secure", "--keep-mode"])
    assert (args.command, args.secure, args.keep_mode) == ("up", True, True)
    assert infra.parse_args(["up"]).secure is False
