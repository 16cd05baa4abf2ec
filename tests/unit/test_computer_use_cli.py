"""``bernstein browser run|replay``: exit codes and output, with a fake driver and an in-memory journal."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from bernstein.cli import build_parser
from bernstein.commands.browser import EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_OK, EXIT_REFUSED, execute_replay, execute_run
from bernstein.producers.computer_use import ComputerUseDriverError, DriverFault, Frame
from bernstein.schemas import codec
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import ProducerKeys, init_producer_keys
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, InMemoryScheduler, RecordingPublisher

FLOW = [
    {"kind": "navigate", "target": "{url}/signup.html"},
    {"kind": "type", "target": "#password", "value_env": "CLI_TEST_PASSWORD"},
    {"kind": "submit", "target": "#submit"},
]


def frames() -> list[Frame]:
    return [Frame(b"\x89PNG" + f"f{i}".encode() * 20, f'- heading "{i}"\n') for i in range(4)]


@pytest.fixture
def keys(tmp_path: Path) -> ProducerKeys:
    return init_producer_keys(tmp_path / "producer-keys", "navigator@test")


def run_args(tmp_path: Path, **changes: object) -> argparse.Namespace:
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(FLOW), encoding="utf-8")
    values: dict[str, object] = {
        "adapter": "playwright",
        "flow": flow,
        "url": "http://127.0.0.1:1",
        "allow_origin": ["http://127.0.0.1:1"],  # a loopback origin must be allowed explicitly
        "run_id": "run-cli",
        "session_id": "browser-0",
        "role": "navigator",
        "worktree": tmp_path / "w",
        "byte_cap": 1 << 20,
        "max_actions": 50,
        "timeout": None,
        "json": False,
    }
    values.update(changes)
    return argparse.Namespace(**values)


def run(
    tmp_path: Path, keys: ProducerKeys, driver: FakeDriver, publisher: RecordingPublisher, **changes: object
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = execute_run(
        run_args(tmp_path, **changes),
        store=DirBlobStore(tmp_path / "cas"),
        publisher=publisher,
        keys=keys,
        driver_factory=FakeDriverFactory(driver),
        out=out,
        err=err,
    )
    return code, out.getvalue(), err.getvalue()


def test_the_commands_are_registered() -> None:
    parser = build_parser()
    args = parser.parse_args(["browser", "run", "--flow", "f.json", "--url", "u", "--run", "r", "--session", "s"])
    assert (args.role, args.adapter, args.byte_cap) == ("navigator", "playwright", 64 * 1024 * 1024)
    args = parser.parse_args(["browser", "replay", "r", "--from", "dump", "--session", "s"])
    assert (args.run_id, args.source, args.session_id) == ("r", "dump", "s")


def test_run_publishes_and_exits_0(tmp_path: Path, keys: ProducerKeys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLI_TEST_PASSWORD", "pw-cli-0123456789")
    publisher = RecordingPublisher(keys)
    code, out, err = run(tmp_path, keys, FakeDriver(frames()), publisher)
    assert code == EXIT_OK, err
    assert out.startswith("published browser session: run=run-cli session=browser-0 [browser]")
    assert "3 actions, head sha256:" in out and "completed/ok" in out
    assert "pw-cli-0123456789" not in out + err
    code, out, _ = run(tmp_path, keys, FakeDriver(frames()), RecordingPublisher(keys), json=True, session_id="browser-1")
    summary = json.loads(out)
    assert (summary["actions"], summary["terminal_state"], summary["reason_code"]) == (3, "completed", "ok")


def test_allow_origin_is_parsed_and_repeatable() -> None:
    parser = build_parser()
    argv = ["browser", "run", "--flow", "f.json", "--url", "https://example.org/", "--run", "r", "--session", "s"]
    assert parser.parse_args(argv).allow_origin == []
    args = parser.parse_args([*argv, "--allow-origin", "http://127.0.0.1:8000", "--allow-origin", "http://10.0.0.7:80"])
    assert args.allow_origin == ["http://127.0.0.1:8000", "http://10.0.0.7:80"]


def test_a_loopback_url_not_allowed_explicitly_is_refused_at_the_navigate_step(
    tmp_path: Path, keys: ProducerKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLI_TEST_PASSWORD", "pw")
    publisher = RecordingPublisher(keys)
    driver = FakeDriver(frames())
    code, out, err = run(tmp_path, keys, driver, publisher, allow_origin=[], json=True)
    assert code == EXIT_REFUSED
    assert "browser session stopped: NAVIGATION_REFUSED: navigate action 0:" in err
    assert (
        "non-public address 127.0.0.1; only an origin allowed explicitly may be private (--allow-origin http://127.0.0.1:1)"
        in err
    )
    summary = json.loads(out)
    assert (summary["actions"], summary["terminal_state"], summary["reason_code"]) == (0, "refused", "navigation_refused")
    assert driver.performed == [] and publisher.actions == [] and len(publisher.results) == 1


def test_a_non_http_allowed_origin_is_refused_before_anything_starts(
    tmp_path: Path, keys: ProducerKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLI_TEST_PASSWORD", "pw")
    publisher = RecordingPublisher(keys)
    driver = FakeDriver(frames())
    code, _, err = run(tmp_path, keys, driver, publisher, allow_origin=["file:///etc"])
    assert code == EXIT_REFUSED
    assert "browser refused: SCHEME_NOT_ALLOWED:" in err and "(nothing published)" in err
    assert publisher.results == [] and driver.performed == []


def test_a_driver_fault_is_published_and_exits_3(tmp_path: Path, keys: ProducerKeys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLI_TEST_PASSWORD", "pw")
    publisher = RecordingPublisher(keys)
    driver = FakeDriver(frames(), faults={1: ComputerUseDriverError("Timeout 5000ms exceeded.", fault=DriverFault.ACTION_FAILED)})
    code, out, err = run(tmp_path, keys, driver, publisher)
    assert code == EXIT_REFUSED
    assert "browser session stopped: DRIVER_FAILURE: Timeout 5000ms exceeded." in err
    assert "published driver_failure browser session" in out and len(publisher.results) == 1


def test_a_bad_flow_is_refused_and_nothing_is_published(
    tmp_path: Path, keys: ProducerKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLI_TEST_PASSWORD", raising=False)
    publisher = RecordingPublisher(keys)
    driver = FakeDriver(frames())
    code, _, err = run(tmp_path, keys, driver, publisher)
    assert code == EXIT_REFUSED and "E_FLOW" in err and "$CLI_TEST_PASSWORD" in err
    assert publisher.actions == [] and publisher.results == [] and driver.performed == []
    code, _, err = run(tmp_path, keys, driver, publisher, session_id="bad id!")
    assert code == EXIT_REFUSED


def test_a_producer_id_other_than_the_keys_name_is_refused_before_anything_runs(
    tmp_path: Path, keys: ProducerKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLI_TEST_PASSWORD", "pw")
    publisher = RecordingPublisher(keys)
    driver = FakeDriver(frames())
    code, _, err = run(tmp_path, keys, driver, publisher, producer_id="someone-else@test")
    assert code == EXIT_REFUSED
    assert "E_PRODUCER_ID" in err and "'someone-else@test' is not the name of the producer key ('navigator@test'" in err
    assert publisher.actions == [] and publisher.results == [] and driver.performed == []
    # the key's own name is accepted
    assert run(tmp_path, keys, FakeDriver(frames()), RecordingPublisher(keys), producer_id="navigator@test")[0] == EXIT_OK


def test_replay_exit_codes(tmp_path: Path, keys: ProducerKeys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLI_TEST_PASSWORD", "pw-replay")
    publisher = RecordingPublisher(keys)
    assert run(tmp_path, keys, FakeDriver(frames()), publisher)[0] == EXIT_OK
    scheduler = InMemoryScheduler(keys)
    scheduler.feed_all(publisher)
    store, trusted = DirBlobStore(tmp_path / "cas"), scheduler.trusted()

    def replay(run_id: str = "run-cli", cas: DirBlobStore = store, as_json: bool = False) -> tuple[int, str]:
        out = io.StringIO()
        args = argparse.Namespace(run_id=run_id, session_id=None, json=as_json)
        return execute_replay(args, source=scheduler.source, cas=cas, trusted=trusted, out=out), out.getvalue()

    code, out = replay()
    assert code == EXIT_OK
    assert out.splitlines()[:4] == [
        "replay run run-cli session browser-0",
        "  step OK index=0 navigate",
        "  step OK index=1 type",
        "  step OK index=2 submit",
    ]
    assert "replayed -- 3 actions reconstruct the signed head" in out
    code, out = replay(as_json=True)
    assert code == EXIT_OK and json.loads(out)["sessions"][0]["action_count"] == 3

    assert replay("no-such-run")[0] == EXIT_NOT_FOUND

    # flip one byte of action 1's screenshot
    publisher_record = publisher.actions[1][2]
    screenshot = codec.decode(publisher_record).record["screenshot_hash"]
    path = store.path_of(screenshot)
    path.write_bytes(b"X" + path.read_bytes()[1:])
    code, out = replay()
    assert code == EXIT_MISMATCH
    assert "  DIVERGED at action 1 (screenshot_changed): screenshot bytes changed: anchor mismatch" in out
