"""The roles manifest the scheduler tests run under (unit and integration alike)."""

from __future__ import annotations

from bernstein.consumers.manifest import parse_roles

ROLES_TOML = """
[[roles]]
role = "developer"

[[roles]]
role = "scout"
agent_kind = "research"

[[roles]]
role = "navigator"
agent_kind = "browser"

[[roles]]
role = "operator"
agent_kind = "ops"
"""
ROLES = parse_roles(ROLES_TOML, source="tests")
"""developer -> coding, scout -> research, navigator -> browser, operator -> ops."""
