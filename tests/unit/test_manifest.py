"""Roles manifest: [[roles]] with agent_kind defaulting to coding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bernstein.consumers.core.model import Lifetime
from bernstein.consumers.manifest import ManifestError, load_roles, parse_manifest, parse_roles, trusted_producer_keys
from bernstein.schemas.canonical import public_key_id
from bernstein.substrate.keys import Ed25519Signer

REPO = Path(__file__).resolve().parents[2]


def test_agent_kind_defaults_to_coding() -> None:
    roles = parse_roles('[[roles]]\nrole = "dev"\n\n[[roles]]\nagent_kind = "research"\nrole = "scout"\n')
    assert roles == {"dev": "coding", "scout": "research"}


def test_shipped_manifest_declares_every_kind() -> None:
    roles = load_roles(REPO / "config" / "roles.toml")
    assert set(roles.values()) == {"coding", "research", "browser", "data", "ops"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            '[[roles]]\nrole = "x"\nagent_kind = "poetry"\n',
            "agent_kind 'poetry' is not one of: browser, coding, data, ops, research",
        ),
        ('[[roles]]\nrole = "x"\nmodel = "y"\n', "unknown keys ['model']"),
        ('[[roles]]\nrole = "x"\n[[roles]]\nrole = "x"\n', "declared twice"),
        ('[[roles]]\nagent_kind = "ops"\n', "role must be"),
        ("roles = 3\n", "at least one [[roles]] entry"),
        ("[[roles]\n", "not valid TOML"),
    ],
)
def test_bad_manifests_name_the_entry(text: str, fragment: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_roles(text, source="team.toml")
    assert fragment in str(info.value)
    assert "team.toml" in str(info.value)


def test_missing_manifest_points_at_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="--roles"):
        load_roles(tmp_path / "none.toml")


KEY_A = Ed25519Signer.from_seed(b"\x11" * 32).public_key_raw.hex()
KEY_B = Ed25519Signer.from_seed(b"\x22" * 32).public_key_raw.hex()
MIXED_ORDER_KEY = next(
    case["public_key_hex"]
    for case in json.loads((Path(__file__).resolve().parents[2] / "schemas/vectors/ed25519.json").read_text())["cases"]
    if case["name"] == "mixed_order_key"
)
"""A key with a small-order component (``schemas/vectors/ed25519.json``): no ``[a]B`` is this."""
ROLES = '[[roles]]\nrole = "scout"\nagent_kind = "research"\n\n[[roles]]\nrole = "dev"\n\n'


def test_producers_are_pinned_with_their_roles_kinds_and_key_lifetimes() -> None:
    manifest = parse_manifest(
        ROLES
        + '[[producers]]\nname = "worker@a"\nroles = ["scout"]\nagent_kinds = ["browser"]\n'
        + f'  [[producers.keys]]\n  public_key = "{KEY_A}"\n  valid_until_ms = 5000\n'
        + f'  [[producers.keys]]\n  public_key = "{KEY_B}"\n  valid_from_ms = 4000\n'
    )
    assert manifest.roles == {"scout": "research", "dev": "coding"}
    producer = manifest.producers.producers["worker@a"]
    assert producer.roles == {"scout"} and producer.agent_kinds == {"research", "browser"}
    found = manifest.producers.lookup(public_key_id(bytes.fromhex(KEY_A)))
    assert found is not None and found[0] is producer
    assert found[1].lifetime == Lifetime(0, 5000) and not found[1].lifetime.contains(5000)
    later = manifest.producers.lookup(public_key_id(bytes.fromhex(KEY_B)))
    assert later is not None and later[1].lifetime == Lifetime(4000, None)
    trusted = trusted_producer_keys(manifest.producers)
    entry = trusted.entry(public_key_id(bytes.fromhex(KEY_A)))
    assert entry is not None and entry.producer == "worker@a" and entry.validity.valid_until_ms == 5000


@pytest.mark.parametrize(
    ("producers", "fragment"),
    [
        (
            f'[[producers]]\nname = "w"\nroles = ["ghost"]\n[[producers.keys]]\npublic_key = "{KEY_A}"\n',
            "role 'ghost' is not declared",
        ),
        ('[[producers]]\nname = "w"\nroles = ["scout"]\n', "at least one [[producers.keys]]"),
        ('[[producers]]\nname = "w"\n[[producers.keys]]\npublic_key = "abc"\n', "public_key must be 64 hex characters"),
        (f'[[producers]]\nname = "w"\n[[producers.keys]]\npublic_key = "{"01" + "00" * 31}"\n', "has small order"),
        (f'[[producers]]\nname = "w"\n[[producers.keys]]\npublic_key = "{"ee" + "ff" * 30 + "7f"}"\n', "not the canonical"),
        (f'[[producers]]\nname = "w"\n[[producers.keys]]\npublic_key = "{"02" + "00" * 31}"\n', "names no point"),
        (f'[[producers]]\nname = "w"\n[[producers.keys]]\npublic_key = "{MIXED_ORDER_KEY}"\n', "small-order component"),
        (
            f'[[producers]]\nname = "w"\n[[producers.keys]]\npublic_key = "{KEY_A}"\nvalid_from_ms = 9\nvalid_until_ms = 9\n',
            "valid_until_ms must be an integer after valid_from_ms",
        ),
        (
            f'[[producers]]\nname = "w"\n[[producers.keys]]\npublic_key = "{KEY_A}"\n'
            f'[[producers]]\nname = "v"\n[[producers.keys]]\npublic_key = "{KEY_A}"\n',
            "is registered to both 'w' and 'v'",
        ),
        (
            f'[[producers]]\nname = "w"\n[[producers.keys]]\npublic_key = "{KEY_A}"\n'
            f'[[producers]]\nname = "w"\n[[producers.keys]]\npublic_key = "{KEY_B}"\n',
            "producer 'w' is declared twice",
        ),
        (
            f'[[producers]]\nname = "w"\nagent_kinds = ["poetry"]\n[[producers.keys]]\npublic_key = "{KEY_A}"\n',
            "agent kind 'poetry'",
        ),
    ],
)
def test_bad_producer_entries_name_the_entry(producers: str, fragment: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(ROLES + producers, source="m.toml")
    assert fragment in str(info.value) and "m.toml" in str(info.value)
