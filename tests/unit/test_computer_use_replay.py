"""``replay_run``: every tamper is named at the first differing action index.

A session is recorded with a fake driver and journalled by the real
scheduler core (in memory); each test edits one thing -- a stored blob, a
journal record, the key set -- and checks the exact divergence.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from bernstein.producers.computer_use import (
    ComputerUseSession,
    Frame,
    ProposedAction,
    ScriptedAgent,
    SessionOutcome,
)
from bernstein.schemas import codec
from bernstein.schemas.canonical import action_anchor, observation_hash, sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import Ed25519Signer, ProducerKeys, TrustedKeys, init_producer_keys
from bernstein.verifier.browser_replay import DivergenceReason, ReplayNotFound, replay_run, replay_sessions
from bernstein.verifier.sources import StoredRecord
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, InMemoryScheduler, MemorySource, RecordingPublisher
from tests.support.computer_use import computer_use_positions, edit_entry

RUN = "run-replay"
SESSION = "browser-0"
FLOW = [
    ProposedAction("navigate", "http://site/signup.html"),
    ProposedAction("type", "#name", "Ada Lovelace"),
    ProposedAction("type", "#password", "correct horse battery"),
    ProposedAction("check", "#terms"),
    ProposedAction("submit", "#submit"),
]


def frames(n: int, tag: str = "") -> list[Frame]:
    return [
        Frame(
            screenshot=b"\x89PNG\r\n\x1a\n" + f"{tag}frame-{i}".encode() * 50,
            aria_snapshot=f'- heading "{tag}Step {i}"\n',
            url=f"http://site/{i}",
        )
        for i in range(n)
    ]


@dataclass
class Recorded:
    source: MemorySource
    store: DirBlobStore
    trusted: TrustedKeys
    keys: ProducerKeys
    outcome: SessionOutcome
    root: Path

    def store_copy(self) -> DirBlobStore:
        target = self.root / f"cas-copy-{len(list(self.root.glob('cas-copy-*')))}"
        shutil.copytree(self.store.root, target)
        return DirBlobStore(target)

    def journal(self) -> list[StoredRecord]:
        return self.source.all("journal")

    def with_journal(self, records: list[StoredRecord]) -> MemorySource:
        return self.source.replaced("journal", records)


def record_session(
    tmp_path: Path, keys: ProducerKeys, scheduler: InMemoryScheduler, *, session_id: str = SESSION, tag: str = ""
) -> SessionOutcome:
    store = DirBlobStore(tmp_path / "cas")
    publisher = RecordingPublisher(keys)
    session = ComputerUseSession(
        RUN, session_id, keys=keys, store=store, publisher=publisher, worker_id="navigator@test", worktree=tmp_path / "worktree"
    )
    outcome = session.run(ScriptedAgent(FLOW), FakeDriverFactory(FakeDriver(frames(6, tag))))
    scheduler.feed_all(publisher)
    return outcome


@pytest.fixture
def recorded(tmp_path: Path) -> Recorded:
    keys = init_producer_keys(tmp_path / "producer-keys", "navigator@test")
    scheduler = InMemoryScheduler(keys)
    outcome = record_session(tmp_path, keys, scheduler)
    scheduler.close_run(RUN)
    assert scheduler.refusals() == []
    return Recorded(scheduler.source, DirBlobStore(tmp_path / "cas"), scheduler.trusted(), keys, outcome, tmp_path)


def entry_of(record: StoredRecord) -> dict[str, object]:
    return codec.decode(codec.decode(record.value or b"").record["payload"]).record


# ---------------------------------------------------------------------------


def test_a_clean_session_replays(recorded: Recorded) -> None:
    result = replay_run(RUN, source=recorded.source, cas=recorded.store, trusted=recorded.trusted)
    assert result.ok and result.divergence is None
    assert result.action_count == 5 and result.head_anchor == recorded.outcome.head_anchor == result.signed_head
    assert [s.line() for s in result.steps] == [
        "step OK index=0 navigate",
        "step OK index=1 type",
        "step OK index=2 type",
        "step OK index=3 check",
        "step OK index=4 submit",
    ]
    assert result.head_line.startswith("head OK 5 actions")
    # the lineage envelope is keyed with the producer's own lineage key, which no trusted-keys file holds
    # (docs/security.md): the replay says it did not check those HMACs; the producer signature it did check
    assert len(result.notes) == 1 and result.notes[0].startswith(
        "lineage HMACs of 5 action(s) are their producer's local check, by design"
    )


def test_a_flipped_screenshot_byte_names_its_action(recorded: Recorded) -> None:
    store = recorded.store_copy()
    target = recorded.outcome.records[2]
    path = store.path_of(target.screenshot_hash)
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))

    result = replay_run(RUN, source=recorded.source, cas=store, trusted=recorded.trusted)
    assert not result.ok
    d = result.divergence
    assert d is not None and (d.action_index, d.reason) == (2, DivergenceReason.SCREENSHOT_CHANGED)
    expected_recomputed = action_anchor(
        target.prev_anchor, observation_hash(bytes(data), target.dom_digest), target.action.to_record()
    )
    assert (d.expected_anchor, d.recomputed_anchor) == (target.anchor, expected_recomputed)
    lines = [s.line() for s in result.steps]
    assert lines[2] == (
        f"step FAIL index=2 type -- screenshot bytes changed: anchor mismatch (expected '{target.anchor}', recomputed '{expected_recomputed}')"
    )
    assert [s.ok for s in result.steps] == [True, True, False, True, True]  # one edit, one failing step


def test_missing_and_changed_snapshot_bytes_are_different_reasons(recorded: Recorded) -> None:
    store = recorded.store_copy()
    store.path_of(recorded.outcome.records[1].screenshot_hash).unlink()
    d = replay_run(RUN, source=recorded.source, cas=store, trusted=recorded.trusted).divergence
    assert d is not None and (d.action_index, d.reason, d.recomputed_anchor) == (1, DivergenceReason.SCREENSHOT_MISSING, "")

    store = recorded.store_copy()
    store.path_of(recorded.outcome.records[3].dom_digest).write_bytes(b'- heading "forged"\n')
    d = replay_run(RUN, source=recorded.source, cas=store, trusted=recorded.trusted).divergence
    assert d is not None and (d.action_index, d.reason) == (3, DivergenceReason.SNAPSHOT_CHANGED)


def test_an_action_changed_in_the_journal_is_named(recorded: Recorded) -> None:
    records = recorded.journal()
    position = computer_use_positions(records)[3]
    records[position] = edit_entry(
        records[position], rehash=False, action={"kind": "check", "target": "#newsletter", "value_digest": ""}
    )
    result = replay_run(RUN, source=recorded.with_journal(records), cas=recorded.store, trusted=recorded.trusted)
    d = result.divergence
    assert d is not None and (d.action_index, d.reason) == (3, DivergenceReason.ANCHOR_MISMATCH)
    assert d.expected_anchor == recorded.outcome.records[3].anchor and d.recomputed_anchor not in ("", d.expected_anchor)
    assert "the recorded action does not recompute its anchor" in result.steps[3].message


def test_a_forged_action_with_a_recomputed_anchor_breaks_the_signature_and_the_chain(recorded: Recorded) -> None:
    records = recorded.journal()
    position = computer_use_positions(records)[1]
    original = entry_of(records[position])
    forged_action = {**original["action"], "target": "#email"}  # type: ignore[dict-item]
    anchor = action_anchor(str(original["prev_anchor"]), str(original["observation_hash"]), forged_action)
    records[position] = edit_entry(records[position], rehash=True, action=forged_action, anchor=anchor)
    result = replay_run(RUN, source=recorded.with_journal(records), cas=recorded.store, trusted=recorded.trusted)
    d = result.divergence
    assert d is not None and (d.action_index, d.reason) == (1, DivergenceReason.LINEAGE_MISMATCH)
    # action 2 still follows the signed anchor, not the forged one
    assert [(s.index, s.reason) for s in result.steps if not s.ok] == [
        (1, DivergenceReason.LINEAGE_MISMATCH),
        (2, DivergenceReason.CHAIN_BREAK),
    ]


def test_a_deleted_tail_is_caught_by_the_signed_head(recorded: Recorded) -> None:
    records = recorded.journal()
    for position in reversed(computer_use_positions(records)[3:]):
        del records[position]
    result = replay_run(RUN, source=recorded.with_journal(records), cas=recorded.store, trusted=recorded.trusted)
    assert all(s.ok for s in result.steps) and result.action_count == 3
    d = result.divergence
    assert d is not None and (d.action_index, d.reason) == (3, DivergenceReason.TRUNCATED_TAIL)
    assert d.expected_anchor == recorded.outcome.records[3].anchor and d.recomputed_anchor == ""
    assert result.head_line.startswith("head FAIL -- the signed head names 5 actions")
    assert "actions 3..4 missing (tail deleted)" in result.head_line


def test_deleted_duplicated_and_edited_records(recorded: Recorded) -> None:
    records = recorded.journal()
    del records[computer_use_positions(records)[2]]
    d = replay_run(RUN, source=recorded.with_journal(records), cas=recorded.store, trusted=recorded.trusted).divergence
    assert d is not None and (d.action_index, d.reason) == (2, DivergenceReason.ACTION_MISSING)

    records = recorded.journal()
    position = computer_use_positions(records)[1]
    records.insert(position + 1, records[position])
    d = replay_run(RUN, source=recorded.with_journal(records), cas=recorded.store, trusted=recorded.trusted).divergence
    assert d is not None and (d.action_index, d.reason) == (1, DivergenceReason.ACTION_DUPLICATED)

    records = recorded.journal()
    position = computer_use_positions(records)[4]
    records[position] = edit_entry(records[position], rehash=False, occurred_at_ms=1)
    d = replay_run(RUN, source=recorded.with_journal(records), cas=recorded.store, trusted=recorded.trusted).divergence
    assert d is not None and (d.action_index, d.reason) == (4, DivergenceReason.JOURNAL_RECORD_EDITED)


def test_signatures_and_hmacs_are_checked_with_pinned_keys_only(recorded: Recorded) -> None:
    stranger = Ed25519Signer.generate()
    d = replay_run(
        RUN, source=recorded.source, cas=recorded.store, trusted=TrustedKeys(ed25519={stranger.key_id: stranger.public_key_raw})
    ).divergence
    assert d is not None and (d.action_index, d.reason) == (0, DivergenceReason.UNPINNED_KEY)

    records = recorded.journal()
    position = computer_use_positions(records)[2]
    signature = bytearray(entry_of(records[position])["lineage_signature"])  # type: ignore[call-overload]
    signature[0] ^= 0x80
    records[position] = edit_entry(records[position], rehash=True, lineage_signature=bytes(signature))
    d = replay_run(RUN, source=recorded.with_journal(records), cas=recorded.store, trusted=recorded.trusted).divergence
    assert d is not None and (d.action_index, d.reason) == (2, DivergenceReason.SIGNATURE_INVALID)

    # the HMAC envelope is the producer's own (its lineage key, never pinned): the entry's hmac_key_id names
    # that key, and what a verifier relies on is the producer signature over the entry, checked above
    entry = json.loads(recorded.outcome.records[0].lineage.entry)
    assert entry["hmac_key_id"] == recorded.keys.lineage.key_id
    assert recorded.trusted.entry(recorded.keys.lineage.key_id) is None

    # without the audit key the replay checks the same: signatures under the pinned producer key
    signing_only = recorded.trusted.without_audit_keys()
    result = replay_run(RUN, source=recorded.source, cas=recorded.store, trusted=signing_only)
    assert (
        result.ok
        and len(result.notes) == 1
        and result.notes[0].startswith("lineage HMACs of 5 action(s) are their producer's local check, by design")
    )


def test_a_session_without_its_result_cannot_be_vouched_for(recorded: Recorded) -> None:
    records = [
        r
        for r in recorded.journal()
        if codec.decode(r.value or b"").schema.name != codec.JOURNAL_RECORD or entry_of(r)["entry_type"] != "activity.result"
    ]
    result = replay_run(RUN, source=recorded.with_journal(records), cas=recorded.store, trusted=recorded.trusted)
    d = result.divergence
    assert d is not None and (d.action_index, d.reason) == (5, DivergenceReason.NO_SESSION_RESULT)
    assert all(s.ok for s in result.steps)

    store = recorded.store_copy()
    artifact = sha256_digest(recorded.outcome.result.artifact)
    store.path_of(artifact).unlink()
    d = replay_run(RUN, source=recorded.source, cas=store, trusted=recorded.trusted).divergence
    assert d is not None and d.reason is DivergenceReason.SESSION_RESULT_UNREADABLE


def test_several_sessions_and_unknown_runs(tmp_path: Path) -> None:
    keys = init_producer_keys(tmp_path / "producer-keys", "navigator@test")
    scheduler = InMemoryScheduler(keys)
    first = record_session(tmp_path, keys, scheduler, session_id="browser-0", tag="a")
    second = record_session(tmp_path, keys, scheduler, session_id="browser-1", tag="b")
    store, trusted = DirBlobStore(tmp_path / "cas"), scheduler.trusted()
    assert scheduler.refusals() == []
    results = replay_sessions(RUN, source=scheduler.source, cas=store, trusted=trusted)
    assert [(r.session_id, r.ok, r.head_anchor) for r in results] == [
        ("browser-0", True, first.head_anchor),
        ("browser-1", True, second.head_anchor),
    ]
    with pytest.raises(ReplayNotFound, match="2 browser sessions"):
        replay_run(RUN, source=scheduler.source, cas=store, trusted=trusted)
    assert replay_run(RUN, source=scheduler.source, cas=store, trusted=trusted, session_id="browser-1").ok
    with pytest.raises(ReplayNotFound):
        replay_run("no-such-run", source=scheduler.source, cas=store, trusted=trusted)
    with pytest.raises(ReplayNotFound):
        replay_run(RUN, source=scheduler.source, cas=store, trusted=trusted, session_id="browser-9")


def test_the_final_observation_is_re_hashed(recorded: Recorded) -> None:
    final = recorded.outcome.document["final_observation"]
    assert final["screenshot_hash"] == sha256_digest(frames(6)[5].screenshot)  # what the agent saw when it stopped
    result = replay_run(RUN, source=recorded.source, cas=recorded.store, trusted=recorded.trusted)
    assert result.head_line.endswith("final observation re-hashed")

    store = recorded.store_copy()
    path = store.path_of(final["screenshot_hash"])
    path.write_bytes(path.read_bytes() + b"\x00")
    result = replay_run(RUN, source=recorded.source, cas=store, trusted=recorded.trusted)
    d = result.divergence
    assert d is not None and (d.action_index, d.reason) == (5, DivergenceReason.FINAL_OBSERVATION_CHANGED)
    assert all(s.ok for s in result.steps)
