"""The shipped Prometheus alert rules with their runbook links under one base (``bernstein audit rules``).

Every alert of ``ops/prometheus/alerts.yml`` carries ``runbook_url: "<base>#<alert name in lower case>"``,
an absolute URL: the anchor is the alert's heading in docs/operations.md. The file ships with
``DEFAULT_RUNBOOK_BASE`` (that page in the project's repository); ``rebase`` writes the same rules with
another base (where you host the docs, or a wiki page with the same headings), changing nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

DEFAULT_RUNBOOK_BASE: Final = "https://github.com/bernstein-journal/bernstein/blob/main/docs/operations.md"
"""The runbook page the shipped rules link to: docs/operations.md in the project's repository."""

RUNBOOK_LINE: Final = re.compile(r'^(?P<lead>[ \t]+runbook_url: ")(?P<base>[^"#]*)(?P<anchor>#[A-Za-z0-9_-]+)"$', re.M)
_BASE: Final = re.compile(r"https?://[^\s\"\\#?]+(\?[^\s\"\\#]*)?")


def shipped_rules() -> Path | None:
    """The shipped alert rules: ``alerts.yml`` beside this module in an installed package (the wheel carries
    ``ops/prometheus/alerts.yml`` there, pyproject.toml's force-include), else ``ops/prometheus/alerts.yml`` of
    the checkout this code runs from; None when neither exists."""
    here = Path(__file__).resolve()
    for path in (here.with_name("alerts.yml"), here.parents[2] / "ops" / "prometheus" / "alerts.yml"):
        if path.is_file():
            return path
    return None


def check_base(base: str) -> str:
    """``base`` when it is an absolute http(s) URL without a fragment; ValueError (saying why) otherwise."""
    if not _BASE.fullmatch(base):
        raise ValueError(
            f"{base!r} is not an absolute http(s) URL without a fragment (the alert's #anchor is added to it), "
            f"e.g. {DEFAULT_RUNBOOK_BASE}"
        )
    return base


def runbook_urls(text: str) -> list[tuple[str, str]]:
    """(base, anchor) of every ``runbook_url`` line of a rules file."""
    return [(m["base"], m["anchor"][1:]) for m in RUNBOOK_LINE.finditer(text)]


def rebase(text: str, base: str) -> str:
    """The rules ``text`` with every runbook URL under ``base`` (the anchors kept, nothing else changed)."""
    check_base(base)
    found = len(re.findall(r"^\s+runbook_url:", text, flags=re.M))
    if not found:
        raise ValueError("no runbook_url annotation in the rules")
    rebased, count = RUNBOOK_LINE.subn(lambda m: f'{m["lead"]}{base}{m["anchor"]}"', text)
    if count != found:
        raise ValueError(f'{found - count} runbook_url line(s) are not of the form runbook_url: "<base>#<anchor>"')
    return rebased
