"""Pure parts of the Playwright driver (no browser): error scrubbing."""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

import pytest

from bernstein.producers.computer_use.playwright_driver import _scrub

SECRET = 'p"a\\ss wörd/€'


@pytest.mark.parametrize(
    "spelling",
    [
        SECRET,
        json.dumps(SECRET)[1:-1],
        json.dumps(SECRET, ensure_ascii=False)[1:-1],
        repr(SECRET)[1:-1],
        quote(SECRET, safe=""),
        quote_plus(SECRET),
    ],
)
def test_an_error_message_never_quotes_the_value_in_any_spelling(spelling: str) -> None:
    message = f'Error: locator.fill: value "{spelling}" rejected'
    scrubbed = _scrub(message, SECRET)
    assert scrubbed == 'Error: locator.fill: value "<redacted>" rejected'


def test_no_value_leaves_the_message_alone() -> None:
    assert _scrub("Timeout 5000ms exceeded.", None) == "Timeout 5000ms exceeded."
    assert _scrub("Timeout 5000ms exceeded.", "") == "Timeout 5000ms exceeded."
