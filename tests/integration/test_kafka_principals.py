"""Every producer host has its own Kafka principal, its ACLs and a produce quota, on the secured broker.

A roles manifest with two producers, alice and mallory (mallory with a produce quota of 1 KiB/s):
``bernstein kafka users --apply`` makes their SCRAM logins and client properties files, ``bernstein
kafka acls --manifest --apply`` grants each one Write on the deployment's submissions topic and sets
each one's quota. Then each writes under its own login, the shared ``producer`` login that the
manifest does not name is refused, and the same load that the broker throttles for mallory passes
alice untouched: the broker meters each host on its own. Skipped when the local broker runs plaintext.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from bernstein.cli import main
from bernstein.commands.kafka import remove_quotas
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import KafkaNotAuthorized, client_config, client_config_as, delivery_error, ensure_topics
from bernstein.substrate.keys import Ed25519Signer
from tests.conftest import Services

MALLORY_QUOTA = 1024
LOAD = [bytes([n]) * 1024 for n in range(64)]
"""64 KiB in one go: 60 times mallory's quota over the broker's 11 s quota window, 1/16 of alice's (1 MiB/s) per second."""


@pytest.fixture
def secured(services: Services) -> Services:
    if not services.secure:
        pytest.skip("the local broker runs plaintext (`infra/up`); `infra/up --secure` (make test) runs these")
    return services


def manifest(path: Path, alice: str, mallory: str) -> Path:
    """Two producer hosts, each with its own principal (fresh names: SCRAM logins outlive a test's topics)."""
    entries = []
    for n, (name, principal, extra) in enumerate(
        [("alice", alice, ""), ("mallory", mallory, f"produce_bytes_per_second = {MALLORY_QUOTA}\n")], start=1
    ):
        key = Ed25519Signer.from_seed(bytes([0x40 + n]) * 32).public_key_raw.hex()
        entries.append(
            f'[[producers]]\nname = "{name}"\nroles = ["developer"]\nkafka_principal = "{principal}"\n{extra}'
            f'  [[producers.keys]]\n  public_key = "{key}"\n'
        )
    path.write_text('[[roles]]\nrole = "developer"\n\n' + "\n".join(entries), encoding="utf-8")
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out.splitlines()


def produce(config: dict[str, Any], topic: str, values: list[bytes]) -> tuple[list[Any], list[float]]:
    """Produce ``values`` in one batch; the delivery errors (None: stored) and every throttle time the broker reported (s)."""
    throttled: list[float] = []
    producer = Producer(
        {
            **config,
            "acks": "all",
            "linger.ms": 50,
            "message.timeout.ms": 20000,
            "throttle_cb": lambda event: throttled.append(event.throttle_time),
        }
    )
    outcome: list[Any] = []
    for value in values:
        producer.produce(topic, key=b"k", value=value, on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(30) == 0, "no delivery report within 30 s"
    producer.poll(0.5)  # the throttle report of the produce response
    return outcome, throttled


@pytest.fixture
def logins(secured: Services, prefix: str) -> Iterator[tuple[str, str]]:
    """alice's and mallory's principals; their SCRAM logins and quotas are removed afterwards."""
    from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion  # type: ignore[attr-defined]

    names = (f"alice.{prefix}", f"mallory.{prefix}")
    yield names
    admin = AdminClient(client_config(secured.bootstrap))
    futures = admin.alter_user_scram_credentials([UserScramCredentialDeletion(n, ScramMechanism.SCRAM_SHA_512) for n in names])
    for future in futures.values():
        try:
            future.result(15)
        except Exception:  # noqa: BLE001 - housekeeping: a login the test never made
            pass
    remove_quotas(secured.bootstrap, [f"User:{n}" for n in names])


def test_each_producer_host_writes_under_its_own_principal_and_quota(
    secured: Services,
    prefix: str,
    logins: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", secured.bootstrap)
    alice, mallory = logins
    topics = Topics(prefix)
    ensure_topics(secured.bootstrap, topics)  # the admin creates the deployment's topics
    roles = manifest(tmp_path / "roles.toml", f"User:{alice}", f"User:{mallory}")
    out = tmp_path / "clients"

    # the logins: created once, with a random password each, in a private file each
    made = cli(capsys, "kafka", "users", "--manifest", str(roles), "--apply", "--out", str(out))
    files = {name: out / f"{name}.properties" for name in (alice, mallory)}
    assert made == [f"created User:{name} -> {files[name]} (0600)" for name in (alice, mallory)]
    for path in files.values():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    before = {name: path.read_text() for name, path in files.items()}
    again = cli(capsys, "kafka", "users", "--manifest", str(roles), "--apply", "--out", str(out))
    assert again == [
        f"kept User:{name}: the login exists, its password is unchanged (its file: {files[name]}); --rotate sets a new one"
        for name in (alice, mallory)
    ]
    assert {name: path.read_text() for name, path in files.items()} == before  # applying twice changes no password
    rotated = cli(capsys, "kafka", "users", "--manifest", str(roles), "--apply", "--out", str(out), "--rotate")
    assert rotated == [f"rotated User:{name} -> {files[name]} (0600)" for name in (alice, mallory)]
    assert all(path.read_text() != before[name] for name, path in files.items())  # the logins below use the new ones

    # the ACLs and quotas: the producer role once per producer principal, and no shared producer login
    applied = cli(capsys, "kafka", "acls", "--prefix", prefix, "--manifest", str(roles), "--apply")
    assert f"ALLOW User:{alice} WRITE TOPIC LITERAL {topics.submissions}" in applied
    assert f"ALLOW User:{mallory} WRITE TOPIC LITERAL {topics.submissions}" in applied
    assert not [line for line in applied if "User:producer" in line]
    assert f"QUOTA User:{alice} producer_byte_rate=1048576" in applied
    assert f"QUOTA User:{mallory} producer_byte_rate={MALLORY_QUOTA}" in applied
    assert applied[-1] == "set 2 produce quotas"

    # (a) each producer host writes its deployment's submissions under its own login
    as_alice = client_config_as(files[alice], secured.bootstrap)
    as_mallory = client_config_as(files[mallory], secured.bootstrap)
    for config in (as_alice, as_mallory):
        errors, _ = produce(config, topics.submissions, [b"hello"])
        assert errors == [None]

    # (b) a principal the manifest does not name (infra's shared producer login) is refused
    shared = client_config_as(secured.principal_file("producer"), secured.bootstrap)
    (error,), _ = produce(shared, topics.submissions, [b"hello"])
    refused = delivery_error(error, topics.submissions)
    assert isinstance(refused, KafkaNotAuthorized)
    assert f"write to topic {topics.submissions} (TOPIC_AUTHORIZATION_FAILED)" in str(refused)

    # (c) the same load: the broker throttles mallory (1 KiB/s) and not alice (1 MiB/s)
    deadline = time.monotonic() + 20
    while True:  # the broker applies a new quota from the metadata log a moment after the controller commits it
        errors, mallory_throttled = produce(as_mallory, topics.submissions, LOAD)
        assert errors == [None] * len(LOAD)  # throttled, not refused: the records are stored
        if any(t > 0 for t in mallory_throttled) or time.monotonic() > deadline:
            break
    assert any(t > 0 for t in mallory_throttled), "the broker did not throttle mallory's principal"
    errors, alice_throttled = produce(as_alice, topics.submissions, LOAD)
    assert errors == [None] * len(LOAD)
    assert not any(t > 0 for t in alice_throttled), f"alice was throttled: {alice_throttled}"
