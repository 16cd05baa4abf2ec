"""Capability gating: an incapable adapter is refused before any process starts."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from bernstein.commands.browser import EXIT_REFUSED, execute_run
from bernstein.producers.computer_use import (
    CapabilityRefusal,
    ComputerUseRefusal,
    ComputerUseSession,
    Frame,
    ProposedAction,
    ScriptedAgent,
    is_computer_use_capable,
    require_computer_use_capable,
    suggested_adapters,
)
from bernstein.producers.computer_use.profiles import isolated_profile_dir
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import init_producer_keys
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, RecordingPublisher


@pytest.mark.parametrize(
    ("name", "capable"),
    [("playwright", True), ("Playwright ", True), ("claude-code", False), ("codex", False), ("", False), ("computer-use", False)],
)
def test_is_computer_use_capable(name: str, capable: bool) -> None:
    assert is_computer_use_capable(name) is capable


def test_the_refusal_is_structured() -> None:
    with pytest.raises(ComputerUseRefusal) as caught:
        require_computer_use_capable("claude-code")
    refusal = caught.value
    assert isinstance(refusal, CapabilityRefusal)
    assert refusal.code == "COMPUTER_USE_NOT_SUPPORTED"
    assert refusal.adapter_name == "claude-code"
    assert refusal.suggested_adapters == suggested_adapters() == ("playwright",)
    assert refusal.evidence == {"adapter_name": "claude-code", "suggested_adapters": "playwright"}


def test_an_incapable_adapter_starts_nothing(tmp_path: Path) -> None:
    factory = FakeDriverFactory(FakeDriver([Frame(b"png", "- a\n")]))
    keys = init_producer_keys(tmp_path / "producer-keys", "coder@test")
    publisher = RecordingPublisher(keys)
    session = ComputerUseSession(
        "run-1",
        "browser-0",
        keys=keys,
        store=DirBlobStore(tmp_path / "cas"),
        publisher=publisher,
        worker_id="coder@test",
        worktree=tmp_path / "w",
        adapter="claude-code",
    )
    with pytest.raises(ComputerUseRefusal) as caught:
        session.run(ScriptedAgent([ProposedAction("navigate", "http://x/")]), factory)
    assert caught.value.suggested_adapters == ("playwright",)
    assert factory.launches == []  # the driver factory (which starts Chromium) was never called
    assert not isolated_profile_dir("browser-0", worktree=tmp_path / "w", run_id="run-1").exists()
    assert publisher.actions == [] and publisher.results == []


def test_the_cli_refuses_before_reading_the_flow(tmp_path: Path) -> None:
    factory = FakeDriverFactory(FakeDriver([Frame(b"png", "- a\n")]))
    err = io.StringIO()
    keys = init_producer_keys(tmp_path / "producer-keys", "p@test")
    args = argparse.Namespace(
        adapter="aider",
        flow=tmp_path / "missing.json",
        url="",
        run_id="r",
        session_id="s",
        role="navigator",
        worktree=tmp_path,
        byte_cap=1000,
        max_actions=10,
        timeout=None,
        json=False,
        producer_id="p@test",
    )
    code = execute_run(
        args,
        store=DirBlobStore(tmp_path / "cas"),
        publisher=RecordingPublisher(keys),
        keys=keys,
        driver_factory=factory,
        out=io.StringIO(),
        err=err,
    )
    assert code == EXIT_REFUSED and factory.launches == []
    assert "COMPUTER_USE_NOT_SUPPORTED" in err.getvalue() and "suggested adapters: playwright" in err.getvalue()
