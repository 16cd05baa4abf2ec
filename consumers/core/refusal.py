"""The refusal every check of the step returns, and the bounded evidence it shows.

A check of the scheduler's step (``bernstein.consumers.core.step``) answers None (passed) or a
``_Refusal``: the typed code, a message, and the field and values it names, each clipped by ``_clip`` so
that no refusal grows with its input. Its own module because every part of the step builds one: the
envelope and signature checks (``validate``), the stage rules (``rules``), the evidence cap
(``evidence``) and the refusal record (``outputs``).
"""

from __future__ import annotations

from dataclasses import dataclass

from bernstein.schemas.canonical import MAX_JSON_DEPTH
from bernstein.schemas.records import ID_RULE, RefusalCode

_MAX_EVIDENCE_CHARS = 256


@dataclass(frozen=True, slots=True)
class _Refusal:
    code: RefusalCode
    message: str
    field: str = ""
    declared: str = ""
    recomputed: str = ""
    earlier_stage_id: str | None = None
    exception: str = "ActivityRejected"
    authenticated: bool = False
    """Reached after the producer's signature verified: the refusal names a sender that provably sent it."""


def _clip(value: object, limit: int = _MAX_EVIDENCE_CHARS) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _invalid_id(code: RefusalCode, field: str, value: object) -> _Refusal:
    return _Refusal(code, f"{field} {ID_RULE}", field, _clip(value))


def _too_large(code: RefusalCode, what: str, field: str, value: bytes, limit: int) -> _Refusal:
    """``value`` (the submission's ``field``) has more bytes than ``limit``."""
    return _Refusal(code, f"{what} has {len(value)} bytes; the limit is {limit}", field, str(len(value)), str(limit))


def _too_deep(field: str) -> _Refusal:
    return _Refusal(
        RefusalCode.JSON_TOO_DEEP,
        f"{field} nests JSON arrays and objects deeper than {MAX_JSON_DEPTH} levels",
        field,
        "",
        str(MAX_JSON_DEPTH),
    )


def _malformed_digest(field: str, value: object) -> _Refusal:
    return _Refusal(
        RefusalCode.MALFORMED_DIGEST,
        f"{field} is not of the form sha256:<64 lowercase hex>",
        field,
        _clip(value),
    )
