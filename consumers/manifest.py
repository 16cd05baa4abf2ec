"""The roles manifest: which activity kind each role may submit.

A TOML file with ``[[roles]]`` entries::

    [[roles]]
    role = "scout"
    agent_kind = "research"

    [[roles]]
    role = "developer"          # agent_kind defaults to "coding"

``agent_kind`` defaults to ``coding`` so manifests written before modalities
existed keep their meaning. A role that is not declared may not submit at all
(the scheduler refuses with UNKNOWN_ROLE): the manifest is an allow-list.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Final

from schemas.errors import MalformedInput
from schemas.records import ID_RULE, KINDS, ActivityKind, is_valid_id

DEFAULT_KIND: Final = ActivityKind.CODING.value
_ROLE_KEYS: Final = frozenset({"role", "agent_kind", "description"})


class ManifestError(MalformedInput):
    """The roles manifest cannot be read or breaks a rule; the message names the entry."""

    code = "E_ROLES_MANIFEST"


def parse_roles(text: str, *, source: str = "<manifest>") -> dict[str, str]:
    """Parse manifest text into ``role -> agent_kind``."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source} is not valid TOML: {exc}") from exc
    return roles_from_document(document, source=source)


def roles_from_document(document: dict[str, Any], *, source: str = "<manifest>") -> dict[str, str]:
    entries = document.get("roles")
    if not isinstance(entries, list) or not entries:
        raise ManifestError(f"{source} needs at least one [[roles]] entry")
    roles: dict[str, str] = {}
    for index, entry in enumerate(entries):
        where = f"{source}: roles[{index}]"
        if not isinstance(entry, dict):
            raise ManifestError(f"{where} must be a table")
        unknown = set(entry) - _ROLE_KEYS
        if unknown:
            raise ManifestError(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(_ROLE_KEYS)}")
        role = entry.get("role")
        if not is_valid_id(role):
            raise ManifestError(f"{where}: role {ID_RULE} (got {role!r})")
        assert isinstance(role, str)
        kind = entry.get("agent_kind", DEFAULT_KIND)
        if kind not in KINDS:
            raise ManifestError(f"{where}: agent_kind {kind!r} is not one of: {', '.join(sorted(KINDS))}")
        if role in roles:
            raise ManifestError(f"{where}: role {role!r} is declared twice")
        roles[role] = kind
    return roles


def load_roles(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"no roles manifest at {path}; pass --roles FILE (see config/roles.toml)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read roles manifest {path}: {exc}") from exc
    return parse_roles(text, source=str(path))
