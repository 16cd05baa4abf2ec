"""Pointer targets: one canonical spelling per action, the shapes each kind takes, and the boundary refusing the rest."""

from __future__ import annotations

import pytest

from bernstein.producers.computer_use.boundary import ProposedAction, canonical_action, validate_proposal
from bernstein.producers.computer_use.errors import InvalidAction
from bernstein.schemas.documents.pointer import (
    MAX_COORDINATE,
    MalformedPointerTarget,
    PointerTarget,
    is_pointer_target,
    parse_pointer_target,
)

BUTTON = 'internal:role=button[name="Add task"i]'


def test_the_text_is_canonical_json_with_sorted_keys() -> None:
    assert (
        PointerTarget(BUTTON, at=(100, 180)).text() == '{"at":[100,180],"element":"internal:role=button[name=\\"Add task\\"i]"}'
    )
    drag = PointerTarget("a", at=(1, 2), to=(3, 4), to_element="b")
    assert drag.text() == '{"at":[1,2],"element":"a","to":[3,4],"to_element":"b"}'
    assert PointerTarget("f", focused=True).text() == '{"element":"f","focused":true}'
    assert PointerTarget("", at=(0, 0)).text() == '{"at":[0,0],"element":""}'


@pytest.mark.parametrize(
    ("kind", "target"),
    [
        ("click", PointerTarget(BUTTON, at=(100, 180))),
        ("double_click", PointerTarget("", at=(MAX_COORDINATE, 0))),
        ("right_click", PointerTarget("x", at=(1, 1))),
        ("hover", PointerTarget("x", at=(1, 1))),
        ("scroll", PointerTarget("x", at=(1, 1))),
        ("drag", PointerTarget("a", at=(1, 2), to=(3, 4), to_element="b")),
        ("drag", PointerTarget("a", to_element="b")),
        ("type", PointerTarget("f", focused=True)),
    ],
)
def test_each_kind_parses_back_what_it_wrote(kind: str, target: PointerTarget) -> None:
    text = target.text()
    assert is_pointer_target(text) and parse_pointer_target(text, kind) == target
    validate_proposal(ProposedAction(kind, text, "x" if kind in ("type", "scroll") else None))


@pytest.mark.parametrize(
    ("kind", "text", "says"),
    [
        ("click", '{"at": [1, 2], "element": "x"}', "canonical"),
        ("click", '{"element":"x","at":[1,2]}', "canonical"),
        ("click", '{"at":[1,2],"element":"x","extra":1}', "no field 'extra'"),
        ("click", '{"at":[1,2]}', "'element' must be a string"),
        ("click", '{"at":[1.5,2],"element":"x"}', "integers"),
        ("click", '{"at":[-1,2],"element":"x"}', "integers"),
        ("click", f'{{"at":[{MAX_COORDINATE + 1},2],"element":"x"}}', "integers"),
        ("click", '{"at":[true,2],"element":"x"}', "integers"),
        ("click", '{"element":"x"}', '{"at": [x, y], "element": ...}'),
        ("click", '{"element":"x","focused":true}', "focused element"),
        ("click", '{"at":[1,2],"element":"x","to":[3,4],"to_element":"y"}', '{"at": [x, y], "element": ...}'),
        ("drag", '{"at":[1,2],"element":"x"}', "both ends"),
        ("drag", '{"at":[1,2],"element":"x","to_element":"y"}', "both ends"),
        ("type", '{"at":[1,2],"element":"x"}', '"focused": true'),
        ("type", '{"element":"x","focused":false}', "only as true"),
        ("navigate", '{"at":[1,2],"element":"x"}', "takes no pointer target"),
        ("select", '{"at":[1,2],"element":"x"}', "takes no pointer target"),
        ("click", "{not json", "JSON object"),
        ("click", "{}", "'element' must be a string"),
        ("click", '{"at":null,"element":"x"}', "not null"),
        ("click", '{"at":[1,2],"element":"\\ud800"}', "valid Unicode"),
        ("click", '{"at":' + "[" * 2000, "JSON object"),
    ],
)
def test_a_malformed_pointer_target_names_what_is_wrong(kind: str, text: str, says: str) -> None:
    with pytest.raises(MalformedPointerTarget) as caught:
        parse_pointer_target(text, kind)
    assert says in caught.value.message and caught.value.code == "E_MALFORMED_POINTER_TARGET"
    with pytest.raises(InvalidAction) as refused:
        validate_proposal(ProposedAction(kind, text, "v" if kind in ("type", "select") else None), index=3)
    assert refused.value.evidence() == {"code": "INVALID_ACTION", "field": "target", "at_action": 3}


def test_a_drag_needs_a_pointer_target_and_the_new_kinds_take_no_value() -> None:
    with pytest.raises(InvalidAction, match="both ends"):
        validate_proposal(ProposedAction("drag", "#card"))
    for kind in ("double_click", "right_click", "hover"):
        validate_proposal(ProposedAction(kind, "#card"))
        with pytest.raises(InvalidAction, match="takes no value"):
            validate_proposal(ProposedAction(kind, "#card", "v"))
        with pytest.raises(InvalidAction, match="needs a target"):
            validate_proposal(ProposedAction(kind, " "))


def test_a_typed_value_at_the_focus_is_digested_like_any_other() -> None:
    focus = PointerTarget("f", focused=True).text()
    action = canonical_action(ProposedAction("type", focus, "hunter2"), key=b"k" * 32)
    assert action.target == focus and action.value_digest.startswith("hmac-sha256:") and "hunter2" not in action.value_digest
