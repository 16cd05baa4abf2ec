"""``McpRun`` with in-memory fakes: one anchored action per call, typed errors, the results published at the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bernstein.producers.computer_use.boundary import Frame, ProposedAction
from bernstein.producers.computer_use.session import ComputerUseSession
from bernstein.producers.mcp.browser import SteppedBrowser
from bernstein.producers.mcp.errors import ToolCode, ToolError
from bernstein.producers.mcp.research import ResearchDesk
from bernstein.producers.mcp.run import McpRun, ToolReply
from bernstein.producers.netpolicy import OriginPolicy
from bernstein.producers.research.budget import ResearchBudget
from bernstein.producers.research.fetch import FetchedPage
from bernstein.schemas.canonical import canonical_json, typed_value_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import ProducerKeys, init_producer_keys
from tests.support.browser_fakes import FakeDriver, RecordingPublisher

SITE = "http://127.0.0.1:8000"
PAGE = b"<html><body><p>Quill 2.0 makes the parser free-threaded. It ships in May.</p></body></html>"


class RefFakeDriver(FakeDriver):
    """A fake driver with refs: ``e1`` is the only known element."""

    def resolve(self, ref: str) -> str:
        if ref != "e1":
            raise ToolError(ToolCode.UNKNOWN_REF, f"no {ref}", evidence={"ref": ref})
        return 'internal:role=textbox[name="Password"i]'

    def element_at(self, x: int, y: int) -> str:
        """The password field fills the top 100 pixels; below it, nothing."""
        return 'internal:role=textbox[name="Password"i]' if y < 100 else ""

    def focused_element(self) -> str:
        return 'internal:role=textbox[name="Password"i]'

    def title(self) -> str:
        return "Sign up"


def frames(n: int) -> list[Frame]:
    return [
        Frame(f"png-{i}".encode(), f'- textbox "Password" [ref=e1]: typed-{i}\n- button "Go" [ref=e2]', SITE) for i in range(n)
    ]


@pytest.fixture
def keys(tmp_path: Path) -> ProducerKeys:
    return init_producer_keys(tmp_path / "keys", "agents@test")


def make_run(
    tmp_path: Path, keys: ProducerKeys, *, max_actions: int = 10, budget: ResearchBudget | None = None
) -> tuple[McpRun, RefFakeDriver, RecordingPublisher]:
    publisher = RecordingPublisher(keys)
    store = DirBlobStore(tmp_path / "cas")
    session = ComputerUseSession(
        "run-1",
        "browser-0",
        keys=keys,
        store=store,
        publisher=publisher,
        worktree=tmp_path / "w",
        max_actions=max_actions,
        navigation=OriginPolicy.from_urls("", [SITE]),
    )
    driver = RefFakeDriver(frames(6))

    def fetch(url: str, *, max_bytes: int | None = None) -> FetchedPage:
        return FetchedPage(source_ref=url, content=PAGE, status=200, content_type="text/html")

    desk = ResearchDesk(
        "run-1", "research-0", store=store, publisher=publisher, budget=budget or ResearchBudget(max_fetches=2), fetch_fn=fetch
    )
    return McpRun(browser=SteppedBrowser(session, lambda _profile: driver), research=desk), driver, publisher


def error_of(reply: ToolReply) -> dict[str, Any]:
    assert reply.is_error, reply.text
    return reply.structured


def test_each_acting_call_is_anchored_to_what_the_agent_was_shown_before_it_runs(tmp_path: Path, keys: ProducerKeys) -> None:
    run, driver, publisher = make_run(tmp_path, keys)
    shown = run.call("browser_snapshot", {})
    assert not shown.is_error and "[ref=e1]" in shown.text
    assert "typed-0" not in shown.text and "[redacted hmac-sha256:" in shown.text  # the field's value: its digest
    typed = run.call("browser_type", {"target": "e1", "text": "hunter2-secret"})
    (action,) = typed.structured["actions"]
    assert action["observation_hash"] == shown.structured["observation_hash"]  # the observation the agent saw
    assert action["action"] == {
        "kind": "type",
        "target": 'internal:role=textbox[name="Password"i]',
        "value_digest": typed_value_digest(keys.redaction.secret, "hunter2-secret"),
    }
    assert driver.performed == [ProposedAction("type", 'internal:role=textbox[name="Password"i]', "hunter2-secret")]
    assert len(publisher.actions) == 1 and all(b"hunter2-secret" not in value for _, _, value in publisher.actions)
    assert typed.structured["next_action_index"] == 1 and "Page Snapshot" in typed.text


def test_a_bad_ref_or_argument_changes_nothing(tmp_path: Path, keys: ProducerKeys) -> None:
    run, driver, publisher = make_run(tmp_path, keys)
    assert error_of(run.call("browser_click", {"target": "e9"}))["error"] == ToolCode.UNKNOWN_REF
    assert error_of(run.call("browser_click", {"target": "e1", "button": "middle"}))["error"] == ToolCode.UNSUPPORTED_ACTION
    assert error_of(run.call("browser_navigate_back", {}))["error"] == ToolCode.NO_PREVIOUS_PAGE
    assert driver.performed == [] and publisher.actions == [] and publisher.results == []
    assert not run.call("browser_click", {"target": "e1"}).is_error


def test_a_refused_navigation_ends_the_session_journalled(tmp_path: Path, keys: ProducerKeys) -> None:
    run, driver, publisher = make_run(tmp_path, keys)
    assert not run.call("browser_navigate", {"url": f"{SITE}/a.html"}).is_error
    error = error_of(run.call("browser_navigate", {"url": "http://10.0.0.1/admin"}))
    assert error["error"] == "NAVIGATION_REFUSED" and error["journalled"] is True
    assert error["evidence"]["policy"] == "PRIVATE_ADDRESS" and error["evidence"]["at_action"] == 1
    (result,) = publisher.results
    assert (result.stage_id, result.result.terminal_state.value, result.result.reason_code) == (
        "browser-0",
        "refused",
        "navigation_refused",
    )
    assert len(driver.performed) == 1 and driver.closed
    assert error_of(run.call("browser_snapshot", {}))["error"] == ToolCode.SESSION_ENDED
    run.end()
    assert len(publisher.results) == 1  # nothing published twice


def test_the_action_budget_is_a_journalled_stop(tmp_path: Path, keys: ProducerKeys) -> None:
    run, _driver, publisher = make_run(tmp_path, keys, max_actions=1)
    assert not run.call("browser_press_key", {"key": "Tab"}).is_error
    error = error_of(run.call("browser_press_key", {"key": "Tab"}))
    assert error["error"] == "ACTION_LIMIT_EXCEEDED" and error["evidence"]["reason_code"] == "action_limit_exceeded"
    assert [r.result.terminal_state.value for r in publisher.results] == ["refused"]


def test_finish_publishes_both_results_and_a_disconnect_is_its_own_end(tmp_path: Path, keys: ProducerKeys) -> None:
    run, _driver, publisher = make_run(tmp_path, keys)
    run.call("browser_click", {"target": "e1"})
    finished = run.call("finish", {"state": "failed", "reason": "captcha_blocked"})
    assert finished.structured["browser"]["reason_code"] == "captcha_blocked" and finished.structured["research"] is None
    assert [(r.result.terminal_state.value, r.result.reason_code) for r in publisher.results] == [("failed", "captcha_blocked")]

    other, _driver, published = make_run(tmp_path / "2", keys)
    other.call("browser_snapshot", {})
    outcome, research = other.end()
    assert outcome is not None and outcome.reason_code == "agent_disconnected" and research is None
    assert [r.result.terminal_state.value for r in published.results] == ["failed"]


def test_research_refusals_carry_their_code_and_the_repaired_report_is_published(tmp_path: Path, keys: ProducerKeys) -> None:
    run, _driver, publisher = make_run(tmp_path, keys)
    fetched = run.call("fetch", {"url": "https://quill.example/notes"})
    assert "free-threaded" in fetched.structured["text"] and fetched.structured["page_content_hash"].startswith("sha256:")
    cited = {"source": "https://quill.example/notes", "quote": "makes the parser free-threaded"}
    claims: list[dict[str, Any]] = [{"statement": "Free-threaded.", "citations": [cited]}, {"statement": "Uncited."}]
    refusal = error_of(run.call("submit_report", {"query": "what changed", "claims": claims}))
    assert refusal["error"] == "UNCITED_CLAIM" and refusal["evidence"]["claim_id"] == "c2" and not refusal["journalled"]
    wrong = {"source": "https://quill.example/notes", "quote": "ships in June"}
    claims[1]["citations"] = [wrong]
    assert error_of(run.call("submit_report", {"query": "what changed", "claims": claims}))["error"] == "QUOTE_NOT_IN_PAGE"
    assert publisher.results == []
    claims[1]["citations"] = [{"source": "https://quill.example/notes", "quote": "It ships in May."}]
    accepted = run.call("submit_report", {"query": "what changed", "claims": claims})
    assert not accepted.is_error and accepted.structured["claims"] == 2
    assert [(r.stage_id, r.result.terminal_state.value) for r in publisher.results] == [("research-0", "completed")]
    assert error_of(run.call("fetch", {"url": "https://quill.example/other"}))["error"] == ToolCode.RESEARCH_ENDED


def test_the_fetch_budget_is_checked_before_fetching_and_its_stop_is_journalled(tmp_path: Path, keys: ProducerKeys) -> None:
    run, _driver, publisher = make_run(tmp_path, keys, budget=ResearchBudget(max_fetches=1))
    assert not run.call("fetch", {"url": "https://quill.example/a"}).is_error
    assert not run.call("fetch", {"url": "https://quill.example/a"}).is_error  # the same source: no second fetch
    stop = error_of(run.call("fetch", {"url": "https://quill.example/b"}))
    assert stop["error"] == "BUDGET_EXCEEDED" and stop["evidence"]["cap"] == "max_fetches" and stop["evidence"]["attempted"] == 2
    _outcome, research = run.end()
    assert research is not None and (research.result.terminal_state.value, research.result.reason_code) == (
        "refused",
        "budget_exhausted",
    )
    assert [r.stage_id for r in publisher.results] == ["research-0"]


def test_the_computer_tool_journals_a_point_with_the_element_under_it_and_types_into_the_focus(
    tmp_path: Path, keys: ProducerKeys
) -> None:
    run, driver, publisher = make_run(tmp_path, keys)
    shot = run.call("computer", {"action": "screenshot"})
    assert not shot.is_error and shot.image == b"png-0" and shot.structured["actions"] == []
    clicked = run.call("computer", {"action": "double_click", "coordinate": [120, 40]})
    (action,) = clicked.structured["actions"]
    field = 'internal:role=textbox[name="Password"i]'
    assert action["action"]["target"] == canonical_json({"at": [120, 40], "element": field}).decode()
    assert action["action"]["kind"] == "double_click" and action["observation_hash"] == shot.structured["observation_hash"]
    assert clicked.image is not None and clicked.structured["cursor"] == [120, 40]
    typed = run.call("computer", {"action": "type", "text": "hunter2-secret"})
    assert typed.structured["actions"][0]["action"] == {
        "kind": "type",
        "target": canonical_json({"element": field, "focused": True}).decode(),
        "value_digest": typed_value_digest(keys.redaction.secret, "hunter2-secret"),
    }
    below = run.call("computer", {"action": "left_click"})  # at the pointer's last point
    assert json.loads(below.structured["actions"][0]["action"]["target"]) == {"at": [120, 40], "element": field}
    empty = run.call("computer", {"action": "mouse_move", "coordinate": [5, 300]})
    assert json.loads(empty.structured["actions"][0]["action"]["target"]) == {"at": [5, 300], "element": ""}
    assert [a.kind for a in driver.performed] == ["double_click", "type", "click", "hover"]
    assert all(b"hunter2-secret" not in value for _, _, value in publisher.actions)


def test_a_computer_action_the_journal_cannot_name_is_refused_and_nothing_is_anchored(tmp_path: Path, keys: ProducerKeys) -> None:
    run, driver, publisher = make_run(tmp_path, keys)
    assert (
        error_of(run.call("computer", {"action": "triple_click", "coordinate": [1, 1]}))["error"] == ToolCode.UNSUPPORTED_ACTION
    )
    assert error_of(run.call("computer", {"action": "left_click"}))["error"] == ToolCode.INVALID_ARGUMENT  # no point yet
    assert error_of(run.call("computer", {"action": "left_click", "coordinate": [1, -1]}))["evidence"]["argument"] == "coordinate"
    assert driver.performed == [] and publisher.actions == []
