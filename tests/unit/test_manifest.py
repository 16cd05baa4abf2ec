"""Roles manifest: [[roles]] with agent_kind defaulting to coding."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumers.manifest import ManifestError, load_roles, parse_roles

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
