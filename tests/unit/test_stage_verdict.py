"""``StageVerdict`` builds itself with one dict update (a pass builds one per stage); it must still behave
as the frozen dataclass it declares: every field settable by position or keyword, its defaults, no
mutation, equality and ``dataclasses.replace``."""

from __future__ import annotations

import dataclasses

import pytest

from bernstein.verifier.checks.base import DetailLine
from bernstein.verifier.report import Problem, StageVerdict


def test_defaults_and_every_field_by_keyword() -> None:
    plain = StageVerdict("fetch", "research", 3, 41, True)
    assert dataclasses.asdict(plain) == {
        "stage_id": "fetch",
        "kind": "research",
        "seq": 3,
        "offset": 41,
        "ok": True,
        "reason": "",
        "notes": (),
        "details": (),
        "evidence_reattached": False,
        "terminal_state": "",
        "data": {},
        "unchecked": "",
        "incomplete": False,
        "findings": (),
        "producer": "",
        "key_id": "",
    }
    values = {
        "stage_id": "s",
        "kind": "browser",
        "seq": 9,
        "offset": 90,
        "ok": False,
        "reason": "why",
        "notes": ("n",),
        "details": (DetailLine("d", False),),
        "evidence_reattached": True,
        "terminal_state": "completed",
        "data": {"k": 1},
        "unchecked": "u",
        "incomplete": True,
        "findings": (Problem("EVIDENCE_SIZE_MISMATCH", "m"),),
        "producer": "p@test",
        "key_id": "sha256:" + "0" * 64,
    }
    built = StageVerdict(**values)  # type: ignore[arg-type]
    assert {f.name: getattr(built, f.name) for f in dataclasses.fields(StageVerdict)} == values
    assert StageVerdict(*values.values()) == built  # type: ignore[arg-type]


def test_each_verdict_gets_its_own_data_dict() -> None:
    first, second = StageVerdict("a", "k", 0, 0, True), StageVerdict("b", "k", 1, 1, True)
    assert first.data == {} and first.data is not second.data


def test_frozen_compared_by_value_and_replaceable() -> None:
    verdict = StageVerdict("a", "k", 0, 0, False, unchecked="no content store")
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.ok = True  # type: ignore[misc]
    assert verdict == StageVerdict("a", "k", 0, 0, False, unchecked="no content store")
    assert verdict != StageVerdict("a", "k", 0, 0, False)
    replaced = dataclasses.replace(verdict, ok=True, unchecked="")
    assert (replaced.ok, replaced.unchecked, replaced.stage_id) == (True, "", "a")
    assert verdict.failed is False and StageVerdict("a", "k", 0, 0, False).failed is True
