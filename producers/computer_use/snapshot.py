"""Normalising and redacting accessibility snapshots before they are hashed or stored.

The DOM digest of an action is sha256 of the normalised snapshot bytes, and
those bytes are what the CAS keeps. Normalisation makes the text stable:
newlines become ``\\n``, trailing spaces go, Playwright's volatile
``[ref=eN]`` / ``[cursor=...]`` tokens go, and the text ends with one newline.

Redaction keeps typed values out of the store. Playwright's ARIA snapshot
prints an input's current value, including a password field's
(``- textbox "Password": hunter2``). So:

1. the value of every value-bearing role (textbox, searchbox, combobox,
   spinbutton) is replaced by ``[redacted hmac-sha256:<hex>]``, the same keyed
   digest an action's value gets (for an unquoted or JSON-quoted scalar the two
   digests are equal, so an auditor can match a field to the action that
   filled it);
2. any verbatim occurrence of a value the agent typed in this session (at
   least ``MIN_SCRUB_CHARS`` long) is replaced the same way, wherever the
   page echoes it (``Welcome, Ada``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Final

from bernstein.schemas.canonical import typed_value_digest

MIN_SCRUB_CHARS: Final = 4
"""Shorter typed values are not scrubbed from free text (they would match everywhere); fields are always redacted."""

_VOLATILE: Final = re.compile(r"\s*\[(?:ref|cursor)=[^\]]*\]")
_VALUE_LINE: Final = re.compile(
    r'^(?P<head>\s*- (?:textbox|searchbox|combobox|spinbutton)(?: "(?:[^"\\]|\\.)*")?(?: \[[^\]]*\])*): (?P<value>.+)$'
)


def normalise_snapshot(raw: str, *, key: bytes, typed_values: Iterable[str] = ()) -> str:
    """The normalised, redacted snapshot text (see the module docstring)."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    lines = [_redact_field(_VOLATILE.sub("", line).rstrip(), key) for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    out = "\n".join(lines) + "\n"
    for value in sorted({v for v in typed_values if len(v) >= MIN_SCRUB_CHARS}, key=len, reverse=True):
        if value in out:
            out = out.replace(value, _marker(key, value))
    return out


def _redact_field(line: str, key: bytes) -> str:
    match = _VALUE_LINE.match(line)
    if match is None:
        return line
    return f"{match.group('head')}: {_marker(key, _scalar(match.group('value')))}"


def _scalar(text: str) -> str:
    """The value a YAML scalar stands for: JSON-style double-quoted strings are unquoted."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if isinstance(value, str):
            return value
    return text


def _marker(key: bytes, value: str) -> str:
    return f"[redacted {typed_value_digest(key, value)}]"
