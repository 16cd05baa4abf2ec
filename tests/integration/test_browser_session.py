"""A real headless Chromium session on the local signup page, through the real broker and S3.

The demo's scripted agent signs up (name, email, a random password, the
guidelines checkbox, submit) while the boundary anchors every action; the
real transactional scheduler journals it; ``replay_run`` and the verifier
reconstruct it. Then the record is tampered with, one thing at a time, and
each tamper is named at its action index.
"""

from __future__ import annotations

import secrets
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bernstein.producers.computer_use import SessionOutcome
from bernstein.producers.computer_use.demo import browser_demo_stage
from bernstein.producers.emitter import Emitter
from bernstein.schemas.canonical import typed_value_digest
from bernstein.schemas.records import TerminalState
from bernstein.substrate.cas import DirBlobStore, S3BlobStore
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import ensure_topics
from bernstein.substrate.keys import ProducerKeys, TrustedKeys, init_keys, init_producer_keys
from bernstein.verifier.browser_replay import DivergenceReason, replay_run
from bernstein.verifier.kafka_source import KafkaSource
from bernstein.verifier.verify import verify
from demo.site_server import serve
from tests.conftest import Services
from tests.support.browser_fakes import MemorySource
from tests.support.browser_site import (
    SITE,
    RecordingStore,
    all_topic_records,
    chromium_processes,
    edit_action,
    refusals,
    run_scheduler,
)
from tests.support.computer_use import computer_use_positions
from tests.support.prefixes import fresh_prefix
from tests.support.producer_setup import trust_of

pytestmark = pytest.mark.browser


@dataclass
class SignupRun:
    run_id: str
    topics: Topics
    bootstrap: str
    keys: ProducerKeys
    """The browser worker's producer keys (its lineage signatures, its redaction key)."""
    trusted: TrustedKeys
    outcome: SessionOutcome
    store: S3BlobStore
    digests: set[str]
    password: str
    worktree: Path
    root: Path

    def source(self) -> KafkaSource:
        return KafkaSource(self.bootstrap, self.topics)

    def journal(self) -> list:  # type: ignore[type-arg]
        source = self.source()
        return [r for p in source.partitions("journal") for r in source.records("journal", p)]

    def local_copy(self, name: str) -> DirBlobStore:
        """The run's blobs copied out of S3 into a directory (tamper without touching the shared bucket)."""
        store = DirBlobStore(self.root / name)
        for digest in self.digests:
            store.put(self.store.get(digest))
        return store


@pytest.fixture(scope="module")
def signup_run(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignupRun]:
    root = tmp_path_factory.mktemp("browser-signup")
    keys = init_keys(root / "keys")
    worker = init_producer_keys(root / "producer-keys", "navigator-it")
    topics = Topics(fresh_prefix())
    ensure_topics(services.bootstrap, topics)
    s3 = S3BlobStore(services.s3)
    store = RecordingStore(s3)
    password = "pw-" + secrets.token_hex(16)
    run_id = f"browser-it-{uuid.uuid4().hex[:8]}"
    worktree = root / "worktree"
    with (
        serve(SITE) as (url, _stop),
        Emitter(bootstrap=services.bootstrap, store=store, topics=topics, producer=worker) as emitter,
    ):
        outcome = browser_demo_stage(emitter, run_id, worker, url, worktree, password=password)
        emitter.close_run(run_id)
    run_scheduler(services.bootstrap, topics, keys, expect=outcome.action_count + 2, producers=[worker])
    yield SignupRun(
        run_id,
        topics,
        services.bootstrap,
        worker,
        trust_of(keys, worker),
        outcome,
        s3,
        store.digests,
        password,
        worktree,
        root,
    )
    assert chromium_processes(str(root)) == []


def test_the_signup_flow_is_journalled_and_replays(signup_run: SignupRun) -> None:
    outcome = signup_run.outcome
    assert outcome.ok, outcome.error
    assert [r.action.kind for r in outcome.records] == ["navigate", "type", "type", "type", "check", "submit"]
    assert outcome.records[3].action.value_digest == typed_value_digest(signup_run.keys.redaction.secret, signup_run.password)
    assert refusals(signup_run.bootstrap, signup_run.topics) == []

    # the agent got to the welcome page: the final observation shows it, with the typed name scrubbed
    final = outcome.document["final_observation"]
    snapshot = signup_run.store.get(final["dom_digest"]).decode()
    assert "Welcome aboard" in snapshot and "Welcome, [redacted hmac-sha256:" in snapshot and "Ada Lovelace" not in snapshot

    result = replay_run(signup_run.run_id, source=signup_run.source(), cas=signup_run.store, trusted=signup_run.trusted)
    assert result.ok, result.divergence
    assert (result.action_count, result.head_anchor) == (6, outcome.head_anchor)
    assert result.steps[0].line() == "step OK index=0 navigate" and result.steps[5].line() == "step OK index=5 submit"

    report = verify(signup_run.run_id, signup_run.source(), cas=signup_run.store, trusted=signup_run.trusted)
    assert report.ok and report.exit_code == 0
    (stage,) = report.stages
    assert (stage.stage_id, stage.kind, stage.terminal_state) == ("browser-0", "browser", TerminalState.COMPLETED.value)
    assert "6 steps replayed" in stage.notes
    assert [d.text for d in stage.details][:6] == [f"step OK index={i} {r.action.kind}" for i, r in enumerate(outcome.records)]


def test_a_flipped_screenshot_byte_is_named_at_its_action(signup_run: SignupRun) -> None:
    store = signup_run.local_copy("flipped")
    target = signup_run.outcome.records[3]
    path = store.path_of(target.screenshot_hash)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))

    result = replay_run(signup_run.run_id, source=signup_run.source(), cas=store, trusted=signup_run.trusted)
    d = result.divergence
    assert d is not None and (d.action_index, d.reason) == (3, DivergenceReason.SCREENSHOT_CHANGED)
    assert (
        d.expected_anchor == target.anchor and d.recomputed_anchor.startswith("sha256:") and d.recomputed_anchor != target.anchor
    )
    assert [s.ok for s in result.steps] == [True, True, True, False, True, True]

    report = verify(signup_run.run_id, signup_run.source(), cas=store, trusted=signup_run.trusted)
    assert report.exit_code == 2
    assert report.stages[0].reason.startswith("browser replay diverged at action 3 (screenshot_changed)")


def test_an_action_changed_in_the_journal_is_named(signup_run: SignupRun) -> None:
    records = signup_run.journal()
    position = computer_use_positions(records)[2]
    records[position] = edit_action(records[position], action={"kind": "type", "target": "#name", "value_digest": ""})
    source = MemorySource({"journal": records})
    d = replay_run(signup_run.run_id, source=source, cas=signup_run.store, trusted=signup_run.trusted).divergence
    assert d is not None and (d.action_index, d.reason) == (2, DivergenceReason.ANCHOR_MISMATCH)
    assert d.expected_anchor == signup_run.outcome.records[2].anchor

    # the verifier's chain walk names the same edit as a broken journal entry
    audit = list(signup_run.source().records("audit", 0))
    report = verify(
        signup_run.run_id, MemorySource({"journal": records, "audit": audit}), cas=signup_run.store, trusted=signup_run.trusted
    )
    assert report.exit_code == 2 and report.header.chain is not None and report.header.chain.problem is not None


def test_a_deleted_tail_is_caught_by_the_signed_head(signup_run: SignupRun) -> None:
    records = signup_run.journal()
    for position in reversed(computer_use_positions(records)[4:]):
        del records[position]
    result = replay_run(
        signup_run.run_id, source=MemorySource({"journal": records}), cas=signup_run.store, trusted=signup_run.trusted
    )
    assert all(s.ok for s in result.steps) and result.action_count == 4
    d = result.divergence
    assert d is not None and (d.action_index, d.reason) == (4, DivergenceReason.TRUNCATED_TAIL)
    assert d.expected_anchor == signup_run.outcome.records[4].anchor


def test_the_password_never_appears_in_any_topic_blob_or_file(signup_run: SignupRun) -> None:
    needle = signup_run.password.encode()
    scanned = 0
    for record in all_topic_records(signup_run.bootstrap, signup_run.topics):
        scanned += 1
        assert needle not in (record.value or b"") and needle not in (record.key or b"")
        assert all(needle not in v for _k, v in record.headers)
    assert scanned >= 6 + 1 + 6 + 1  # submissions (actions, result, close) and journal at least
    assert len(signup_run.digests) >= 6
    for digest in signup_run.digests:
        assert needle not in signup_run.store.get(digest)
    for path in signup_run.worktree.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes()
    assert not list((signup_run.worktree / ".bernstein" / "computer-use" / "profiles").glob("*"))  # profile removed


def test_logs_of_a_session_hold_no_typed_value(services: Services, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """stdout and stderr of the whole process (Playwright's driver and Chromium included) while a session runs."""
    keys = init_producer_keys(tmp_path / "producer-keys", "navigator-it")
    topics = Topics(fresh_prefix())
    ensure_topics(services.bootstrap, topics)
    password = "pw-" + secrets.token_hex(16)
    with (
        serve(SITE) as (url, _stop),
        Emitter(bootstrap=services.bootstrap, store=S3BlobStore(services.s3), topics=topics, producer=keys) as emitter,
    ):
        outcome = browser_demo_stage(emitter, "logs-run", keys, url, tmp_path / "worktree", password=password)
        print(outcome)  # noqa: T201 - the outcome's repr goes to the captured log too
        print(outcome.records, outcome.document, outcome.error)  # noqa: T201
    captured = capfd.readouterr()
    assert outcome.ok
    assert password not in captured.out and password not in captured.err
    shutil.rmtree(tmp_path / "worktree", ignore_errors=True)
    assert chromium_processes(str(tmp_path)) == []
