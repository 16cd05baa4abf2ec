"""``bernstein init``'s files, without Kafka: keys kept, the manifest written once and extended, refusals that say
what to do. (``tests/integration/test_quickstart.py`` runs it against the services, topics included.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from bernstein.cli import ENDPOINTS, build_parser
from bernstein.commands.common import UsageError, Uses
from bernstein.commands.init import CHECKOUT_ROLES, _producer_keys, _register, _scheduler_keys
from bernstein.consumers.manifest import load_manifest, load_roles
from bernstein.substrate.keys import KeyPurpose, init_producer_keys


def test_init_is_a_command_that_talks_to_kafka() -> None:
    args = build_parser().parse_args(["init", "--producer", "me"])
    assert args.command_path == ("init",)
    assert ENDPOINTS[("init",)] == Uses(kafka=True)
    assert args.dir == Path(".bernstein") and args.partitions == 1


def test_keys_are_made_once_then_kept(tmp_path: Path) -> None:
    scheduler, made = _scheduler_keys(tmp_path / "keys")
    assert made == "created"
    again, made = _scheduler_keys(tmp_path / "keys")
    assert made == "kept" and again.signer.key_id == scheduler.signer.key_id

    producer, made = _producer_keys(tmp_path / "producers" / "me", "me")
    assert made == "created" and producer.name == "me"
    same, made = _producer_keys(tmp_path / "producers" / "me", "me")
    assert made == "kept" and same.signer.key_id == producer.signer.key_id
    with pytest.raises(UsageError, match="holds the keys of producer 'me', not 'you'"):
        _producer_keys(tmp_path / "producers" / "me", "you")


def test_the_manifest_grants_every_role_and_is_extended_not_rewritten(tmp_path: Path) -> None:
    manifest = tmp_path / "roles.toml"
    me = init_producer_keys(tmp_path / "me", "me")
    roles, made = _register(manifest, me, None)
    assert made == "created" and roles == list(load_roles(CHECKOUT_ROLES))
    registered = load_manifest(manifest).producers.producers["me"]
    assert registered.roles == frozenset(roles) and "browser" in registered.agent_kinds
    assert {key.key_id for key in registered.keys} == {me.ring.current(KeyPurpose.PRODUCER).key_id}

    text = manifest.read_text(encoding="utf-8")
    assert _register(manifest, me, None) == (sorted(roles), "kept")
    assert manifest.read_text(encoding="utf-8") == text

    other = init_producer_keys(tmp_path / "other", "other")
    _, made = _register(manifest, other, None)
    assert made == "producer added" and manifest.read_text(encoding="utf-8").startswith(text)
    assert set(load_manifest(manifest).producers.producers) == {"me", "other"}

    impostor = init_producer_keys(tmp_path / "impostor", "me")
    with pytest.raises(UsageError, match="registers producer 'me' with other keys"):
        _register(manifest, impostor, None)


def test_no_roles_to_start_from_is_a_usage_error(tmp_path: Path) -> None:
    me = init_producer_keys(tmp_path / "me", "me")
    with pytest.raises(UsageError, match="pass --roles-from"):
        _register(tmp_path / "roles.toml", me, tmp_path / "absent.toml")
