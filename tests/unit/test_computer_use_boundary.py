"""The boundary: canonical actions, snapshot normalisation and redaction, flow files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bernstein.producers.computer_use import (
    FlowError,
    InvalidAction,
    ProposedAction,
    ScriptedAgent,
    canonical_action,
    load_flow,
    normalise_snapshot,
    parse_flow,
)
from bernstein.producers.computer_use.boundary import AgentView
from bernstein.schemas.canonical import typed_value_digest

KEY = b"k" * 32
REPO = Path(__file__).resolve().parents[2]


def test_a_typed_value_leaves_the_boundary_only_as_a_keyed_digest() -> None:
    proposed = ProposedAction("type", "#password", "hunter2")
    action = canonical_action(proposed, key=KEY)
    assert action.to_record() == {"kind": "type", "target": "#password", "value_digest": typed_value_digest(KEY, "hunter2")}
    assert action.value_digest.startswith("hmac-sha256:") and "hunter2" not in repr(action)
    assert "hunter2" not in repr(proposed) and "<redacted>" in repr(proposed)
    assert canonical_action(ProposedAction("click", "#go"), key=KEY).value_digest == ""
    assert canonical_action(proposed, key=b"another key......").value_digest != action.value_digest


@pytest.mark.parametrize(
    ("proposed", "field"),
    [
        (ProposedAction("teleport", "#x"), "kind"),
        (ProposedAction("click", ""), "target"),
        (ProposedAction("click", "x" * 5000), "target"),
        (ProposedAction("navigate", "http://a/", "value"), "value"),
        (ProposedAction("type", "#a"), "value"),
    ],
)
def test_invalid_proposals_are_refused(proposed: ProposedAction, field: str) -> None:
    with pytest.raises(InvalidAction) as caught:
        canonical_action(proposed, key=KEY, index=4)
    assert (caught.value.code, caught.value.field, caught.value.index) == ("INVALID_ACTION", field, 4)


def test_snapshots_are_normalised() -> None:
    raw = '- heading "Sign up" [level=1] [ref=e3]  \r\n- link "Home" [cursor=pointer]\r- button "Go"\n\n\n'
    assert normalise_snapshot(raw, key=KEY) == '- heading "Sign up" [level=1]\n- link "Home"\n- button "Go"\n'


def test_field_values_are_redacted_with_the_action_digest() -> None:
    raw = "\n".join(
        [
            '- textbox "Password": hunter2-secret',
            '- textbox "Bio": "line1 line \\"two\\": x"',
            '- searchbox "Q": query: with colon',
            '- spinbutton: "42"',
            '- textbox "Empty"',
            "- combobox:",
            '  - option "Beta" [selected]',
            '- textbox "Locked" [disabled]: kept-out',
        ]
    )
    out = normalise_snapshot(raw, key=KEY)
    for value in ("hunter2-secret", "line1", "query: with colon", '"42"', "kept-out"):
        assert value not in out
    assert f'- textbox "Password": [redacted {typed_value_digest(KEY, "hunter2-secret")}]' in out
    bio = 'line1 line "two": x'  # a JSON-quoted scalar is unquoted before it is digested
    assert f'- textbox "Bio": [redacted {typed_value_digest(KEY, bio)}]' in out
    assert f"- spinbutton: [redacted {typed_value_digest(KEY, '42')}]" in out
    assert '- textbox "Empty"\n- combobox:\n  - option "Beta" [selected]' in out


def test_typed_values_are_scrubbed_wherever_the_page_echoes_them() -> None:
    raw = '- heading "Welcome, Ada Lovelace"\n- paragraph: "id 7"\n'
    out = normalise_snapshot(raw, key=KEY, typed_values=["Ada Lovelace", "7"])
    assert "Ada Lovelace" not in out and f"[redacted {typed_value_digest(KEY, 'Ada Lovelace')}]" in out
    assert '"id 7"' in out  # values shorter than 4 characters are not scrubbed from free text


def test_flows_read_secret_values_from_the_environment() -> None:
    data = json.dumps(
        [
            {"kind": "navigate", "target": "{url}/signup.html"},
            {"kind": "type", "target": "#password", "value_env": "PW"},
        ]
    ).encode()
    actions = parse_flow(data, base_url="http://127.0.0.1:9/", env={"PW": "from-env"})
    assert actions == (
        ProposedAction("navigate", "http://127.0.0.1:9/signup.html"),
        ProposedAction("type", "#password", "from-env"),
    )
    with pytest.raises(FlowError, match=r"\$PW, which is not set"):
        parse_flow(data, env={})


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b"not json", "not JSON"),
        (b"[]", "non-empty list"),
        (b'{"actions": []}', "format must be"),
        (b'[{"kind": "type", "target": "#a", "value": "x", "value_env": "X"}]', "both value and value_env"),
        (b'[{"kind": "type", "target": "#a", "secret": "x"}]', "unknown keys"),
        (b'[{"kind": "fly", "target": "#a"}]', "is not one of"),
        (b'[{"kind": "type", "target": "#a", "value": 3}]', "must be a string"),
    ],
)
def test_malformed_flows_are_refused_before_anything_runs(document: bytes, message: str) -> None:
    with pytest.raises(FlowError, match=message):
        parse_flow(document, env={"X": "x"})


def test_the_demo_flow_loads_and_holds_no_password() -> None:
    path = REPO / "demo" / "flows" / "signup.json"
    actions = load_flow(path, base_url="http://127.0.0.1:1", env={"BERNSTEIN_SIGNUP_PASSWORD": "pw-from-env"})
    assert [a.kind for a in actions] == ["navigate", "type", "type", "type", "check", "submit"]
    assert actions[3].value == "pw-from-env"
    password_step = json.loads(path.read_text())["actions"][3]
    assert "value" not in password_step and password_step["value_env"] == "BERNSTEIN_SIGNUP_PASSWORD"


def test_the_scripted_agent_proposes_its_flow_then_stops() -> None:
    agent = ScriptedAgent([ProposedAction("click", "#a"), ProposedAction("click", "#b")])
    views = [AgentView(i, b"", "", "") for i in range(3)]
    assert [agent.next_action(v) for v in views] == [ProposedAction("click", "#a"), ProposedAction("click", "#b"), None]
