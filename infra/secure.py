"""The secure broker's material (``up --secure``): SCRAM users and their passwords, a local CA and the broker's
certificate, one client properties file per principal, and the client settings infra's own probe uses."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys

from infra.base import CLUSTER_NODES, REPO, InfraError, atomic_write, say
from infra.paths import Paths

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USERS = ("admin", "scheduler", "producer", "auditor")
"""The secure broker's principals: admin (super user, inter-broker), then one per component."""
BROKER_CN = "bernstein-broker"
"""The broker certificate's subject; on the mTLS controller listener the broker is User:CN=bernstein-broker."""


def ensure_scram_passwords(p: Paths) -> dict[str, str]:
    """The SCRAM users' passwords: random on first use, kept in .infra/kafka/scram.json (0600)."""
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(p.scram.read_text())
        if isinstance(saved, dict) and all(isinstance(saved.get(u), str) and saved[u] for u in SCRAM_USERS):
            return {u: saved[u] for u in SCRAM_USERS}
    for data in (p.kafka_data_secure, *(p.node(n).data_secure for n in CLUSTER_NODES)):
        if (data / "meta.properties").is_file():
            raise InfraError(
                f"kafka: {data} is formatted but {p.scram} (its SCRAM passwords) is missing or damaged; "
                "`infra/infra.py reset` deletes the data and starts over"
            )
    passwords = {u: secrets.token_urlsafe(24) for u in SCRAM_USERS}
    atomic_write(p.scram, json.dumps(passwords, indent=2) + "\n", mode=0o600)
    say(f"kafka: generated SCRAM passwords for {', '.join(SCRAM_USERS)} ({p.scram}, mode 0600)")
    return passwords


def ensure_tls(p: Paths) -> None:
    """A local CA and a broker certificate (127.0.0.1 and localhost), PEM, made once with `cryptography`."""
    if p.ca_cert.is_file() and p.broker_pem.is_file():
        return
    try:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise InfraError("python package cryptography missing: run infra with .venv/bin/python (`make venv`)") from None
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=825)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = name("bernstein local CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(BROKER_CN))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()
    atomic_write(p.ca_key, ca_key.private_bytes(pem, pkcs8, plain).decode(), mode=0o600)
    # Kafka's PEM key store: the private key (PKCS#8), then the certificate chain, in one file
    atomic_write(
        p.broker_pem,
        key.private_bytes(pem, pkcs8, plain).decode() + cert.public_bytes(pem).decode() + ca.public_bytes(pem).decode(),
        mode=0o600,
    )
    atomic_write(p.ca_cert, ca.public_bytes(pem).decode())
    say(f"kafka: generated a local CA and a broker certificate in {p.tls}")


def write_client_properties(p: Paths, passwords: dict[str, str]) -> None:
    """.infra/clients/<user>.properties (0600): what BERNSTEIN_KAFKA_CONFIG_FILE names for each principal."""
    for user in SCRAM_USERS:
        atomic_write(
            p.clients / f"{user}.properties",
            f"""\
# Generated by infra/infra.py up --secure: the local broker's principal User:{user}.
security.protocol=SASL_SSL
sasl.mechanism={SCRAM_MECHANISM}
sasl.username={user}
sasl.password={passwords[user]}
ssl.ca.location={p.ca_cert}
""",
            mode=0o600,
        )


def client_security(p: Paths, mode: str) -> dict[str, str]:
    """librdkafka settings for infra's own probe: the admin's in secure mode, none in plaintext."""
    if mode != "secure":
        return {}
    try:
        passwords = json.loads(p.scram.read_text())
    except (OSError, ValueError):
        raise InfraError(f"kafka: the broker runs secured but {p.scram} (its SCRAM passwords) is unreadable") from None
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": "admin",
        "sasl.password": passwords["admin"],
        "ssl.ca.location": str(p.ca_cert),
    }


def external_security() -> dict[str, str]:
    """For an external cluster: the settings of BERNSTEIN_KAFKA_CONFIG_FILE, read as every client reads them."""
    if not os.environ.get("BERNSTEIN_KAFKA_CONFIG_FILE"):
        return {}
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bernstein.substrate.kafka import KafkaError, security_config

    try:
        return security_config()
    except KafkaError as exc:
        raise InfraError(str(exc)) from None
