"""Recorded model computer-use transcripts (Anthropic's computer tool, OpenAI's computer_call) replayed on real parts.

No model and no network: the tool calls of ``tests/data/transcripts`` run in order through ``ComputerTool`` on
a real headless Chromium against the local task board (``demo/site/board.html``, controls at fixed pixels), each
one an anchored, signed action published to the real broker with its blobs in the real S3; the real
transactional scheduler journals both sessions of the run and the verifier replays them. Every click lands on
the element the journal names, what the journal cannot name is refused and not performed, and the access code
appears only as its keyed digest.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bernstein.producers.computer_use.session import ComputerUseSession, EmitterPublisher
from bernstein.producers.emitter import Emitter
from bernstein.producers.mcp.browser import SteppedBrowser
from bernstein.producers.mcp.computer import ComputerReply, ComputerTool, anthropic_tool_result, openai_call_output
from bernstein.producers.mcp.driver import ref_driver_factory
from bernstein.producers.netpolicy import OriginPolicy
from bernstein.schemas.canonical import typed_value_digest
from bernstein.schemas.documents.pointer import parse_pointer_target
from bernstein.schemas.records import TerminalState
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import ensure_topics
from bernstein.substrate.keys import ProducerKeys, TrustedKeys, init_keys, init_producer_keys
from bernstein.verifier.browser_replay import replay_run
from bernstein.verifier.kafka_source import KafkaSource
from bernstein.verifier.verify import verify
from demo.site_server import serve
from tests.conftest import Services
from tests.support.browser_site import SITE, RecordingStore, all_topic_records, chromium_processes, refusals, run_scheduler
from tests.support.prefixes import fresh_prefix
from tests.support.producer_setup import trust_of

pytestmark = pytest.mark.browser

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "data" / "transcripts"
TITLE = 'internal:role=textbox[name="Task title"i]'
CODE = 'internal:role=textbox[name="Access code"i]'
CARD = 'internal:role=button[name="Card: Write report"i]'
JOURNALLED = [
    "click",
    "type",
    "click",
    "type",
    "click",
    "hover",
    "double_click",
    "drag",
    "right_click",
    "press",
    "scroll",
    "wait",
]
"""The kinds both transcripts journal, in order (their screenshots anchor nothing; the unsupported call is refused)."""


def anthropic_calls(secret: str) -> list[tuple[str, dict[str, Any]]]:
    """The tool_use blocks of the Claude transcript, in order: (id, input)."""
    document = json.loads((TRANSCRIPTS / "anthropic_board.json").read_text().replace("{{access_code}}", secret))
    assert document["tools"][0]["display_width_px"] == 800 and document["tools"][0]["display_height_px"] == 600
    return [
        (block["id"], block["input"])
        for message in document["messages"]
        if message["role"] == "assistant"
        for block in message["content"]
        if block["type"] == "tool_use" and block["name"] == "computer"
    ]


def openai_calls(secret: str) -> list[tuple[str, dict[str, Any]]]:
    """The computer_call items of the OpenAI transcript, in order: (call_id, action)."""
    document = json.loads((TRANSCRIPTS / "openai_board.json").read_text().replace("{{access_code}}", secret))
    assert document["tools"][0]["display_width"] == 800 and document["tools"][0]["display_height"] == 600
    return [(item["call_id"], item["action"]) for item in document["output"] if item["type"] == "computer_call"]


@dataclass
class Replayed:
    session_id: str
    replies: list[ComputerReply]
    wire: list[dict[str, Any]]
    """What the loop would send back to the model API for each call."""
    final_snapshot: str


@dataclass
class BoardRun:
    run_id: str
    topics: Topics
    bootstrap: str
    worker: ProducerKeys
    trusted: TrustedKeys
    store: RecordingStore
    secret: str
    anthropic: Replayed
    openai: Replayed
    worktree: Path

    def source(self) -> KafkaSource:
        return KafkaSource(self.bootstrap, self.topics)


def replay(
    emitter: Emitter,
    worker: ProducerKeys,
    run_id: str,
    session_id: str,
    url: str,
    worktree: Path,
    calls: list[tuple[str, dict[str, Any]]],
    dialect: str,
) -> Replayed:
    policy = OriginPolicy.from_urls("", [url])
    session = ComputerUseSession(
        run_id, session_id, keys=worker, store=emitter.store, publisher=EmitterPublisher(emitter), worktree=worktree
    )
    browser = SteppedBrowser(session, ref_driver_factory(policy=policy))
    computer = ComputerTool(browser)
    browser.act(_navigate(url + "/board.html"))  # the task starts on the board (the transcript's first screenshot)
    run: Callable[[dict[str, Any]], ComputerReply] = computer.anthropic if dialect == "anthropic" else computer.openai
    replies, wire = [], []
    for call_id, call in calls:
        reply = run(call)
        replies.append(reply)
        wire.append(anthropic_tool_result(call_id, reply) if dialect == "anthropic" else openai_call_output(call_id, reply))
    final = browser.look().snapshot
    browser.finish("completed", "ok")
    assert browser.outcome is not None and browser.outcome.ok, browser.outcome
    return Replayed(session_id, replies, wire, final)


def status_of(snapshot: str) -> str:
    """The page's status line in a snapshot (``- status [ref=e21]: text``): what the last gesture did."""
    (line,) = [line for line in snapshot.splitlines() if line.lstrip().startswith("- status")]
    return line.split(": ", 1)[1].strip('"')  # YAML quotes a text holding ": "


def _navigate(url: str) -> Any:
    from bernstein.producers.mcp.tools import PlannedAction

    return PlannedAction("navigate", url=url)


@pytest.fixture(scope="module")
def board_run(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BoardRun]:
    root = tmp_path_factory.mktemp("model-computer-use")
    keys = init_keys(root / "keys")
    worker = init_producer_keys(root / "producer-keys", "navigator-cu")
    topics = Topics(fresh_prefix())
    ensure_topics(services.bootstrap, topics)
    store = RecordingStore(S3BlobStore(services.s3))
    secret = "code-" + secrets.token_hex(12)
    run_id = f"model-cu-{uuid.uuid4().hex[:8]}"
    worktree = root / "worktree"
    with (
        serve(SITE) as (url, _stop),
        Emitter(bootstrap=services.bootstrap, store=store, topics=topics, producer=worker) as emitter,
    ):
        claude = replay(emitter, worker, run_id, "browser-0", url, worktree, anthropic_calls(secret), "anthropic")
        gpt = replay(emitter, worker, run_id, "browser-1", url, worktree, openai_calls(secret), "openai")
        emitter.close_run(run_id)
    actions = 2 * (1 + len(JOURNALLED))  # each session: the navigate to the board, then the transcript's actions
    run_scheduler(services.bootstrap, topics, keys, expect=actions + 2 + 1, producers=[worker])
    yield BoardRun(run_id, topics, services.bootstrap, worker, trust_of(keys, worker), store, secret, claude, gpt, worktree)
    assert chromium_processes(str(root)) == []


@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
def test_each_call_lands_on_the_element_the_journal_names(board_run: BoardRun, dialect: str) -> None:
    replayed: Replayed = getattr(board_run, dialect)
    acted = [r for r in replayed.replies if r.records]
    kinds = [record.action.kind for reply in acted for record in reply.records]
    assert kinds == JOURNALLED
    records = [record for reply in acted for record in reply.records]
    targets = {
        i: parse_pointer_target(r.action.target, r.action.kind)
        for i, r in enumerate(records)
        if r.action.kind not in ("press", "wait")
    }
    assert targets[0].element == TITLE and targets[0].at == (190, 56)
    assert targets[1].element == TITLE and targets[1].focused  # typed into the field the click focused
    assert targets[2].element == CODE and targets[3].element == CODE
    assert targets[4].element == 'internal:role=button[name="Add task"i]'
    assert targets[5].element == 'internal:role=button[name="Help"i]'
    assert targets[6].element == CARD and targets[7].element == CARD
    assert (targets[7].at, targets[7].to, targets[7].to_element) == ((120, 270), (500, 340), 'internal:role=region[name="Done"i]')
    assert targets[8].element == 'internal:role=button[name="Archive"i]'
    assert records[9].action.target == "" and records[11].action.target == ""  # a key press, a wait: no point
    assert targets[10].at == (120, 380) and "Review" in targets[10].element
    assert records[3].action.value_digest == typed_value_digest(board_run.worker.redaction.secret, board_run.secret)

    # what each gesture did, as the observation after it shows (the page writes it to its status line)
    statuses = [status_of(reply.snapshot) for reply in acted]
    assert statuses[4].startswith("Added: [redacted hmac-sha256:") and statuses[4].endswith(" (with an access code)")
    assert statuses[5] == "Help shown" and 'tooltip "Drag a card to Done"' in acted[5].snapshot
    assert statuses[6:10] == ["Editing: Write report", "Moved Write report to Done", "Archive menu open", "Archive menu closed"]
    assert status_of(replayed.final_snapshot).startswith("Backlog scrolled to ")

    # each acting call is anchored to the screenshot the model was shown just before it
    shown = [reply.observation_hash for reply in replayed.replies]
    for position, reply in enumerate(replayed.replies):
        if reply.records and position > 0:
            assert reply.records[0].observation_hash == shown[position - 1]


@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
def test_what_the_journal_cannot_name_is_a_tool_error_and_not_performed(board_run: BoardRun, dialect: str) -> None:
    replayed: Replayed = getattr(board_run, dialect)
    (refused,) = [(i, r) for i, r in enumerate(replayed.replies) if r.error is not None]
    position, reply = refused
    assert reply.error is not None and reply.error.code == "UNSUPPORTED_ACTION" and not reply.records
    assert reply.screenshot is not None  # the unchanged page: the model sees nothing happened
    wire = replayed.wire[position]
    if dialect == "anthropic":
        assert wire["is_error"] is True and "UNSUPPORTED_ACTION" in wire["content"]
    else:
        assert wire["type"] == "computer_call_output" and wire["output"]["image_url"].startswith("data:image/png;base64,")
    ok = replayed.wire[0]
    assert ("content" in ok and ok["content"][-1]["type"] == "image") or ok["output"]["type"] == "computer_screenshot"


def test_both_sessions_are_journalled_and_verify(board_run: BoardRun) -> None:
    assert refusals(board_run.bootstrap, board_run.topics) == []
    for replayed in (board_run.anthropic, board_run.openai):
        result = replay_run(
            board_run.run_id,
            source=board_run.source(),
            cas=board_run.store,
            trusted=board_run.trusted,
            session_id=replayed.session_id,
        )
        assert result.ok, result.divergence
        assert result.action_count == 1 + len(JOURNALLED)
    report = verify(board_run.run_id, board_run.source(), cas=board_run.store, trusted=board_run.trusted)
    assert report.ok and report.exit_code == 0, report
    assert [(s.stage_id, s.kind, s.terminal_state) for s in report.stages] == [
        ("browser-0", "browser", TerminalState.COMPLETED.value),
        ("browser-1", "browser", TerminalState.COMPLETED.value),
    ]
    assert all(f"{1 + len(JOURNALLED)} steps replayed" in s.notes for s in report.stages)


def test_the_access_code_is_only_ever_its_digest(board_run: BoardRun) -> None:
    needle = board_run.secret.encode()
    for record in all_topic_records(board_run.bootstrap, board_run.topics):
        assert needle not in (record.value or b"") and all(needle not in v for _k, v in record.headers)
    for digest in board_run.store.digests:
        assert needle not in board_run.store.get(digest)
    for path in board_run.worktree.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes()
    for replayed in (board_run.anthropic, board_run.openai):
        assert all(board_run.secret not in reply.snapshot and board_run.secret not in reply.text for reply in replayed.replies)
