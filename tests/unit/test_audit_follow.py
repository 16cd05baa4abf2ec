"""``audit follow``'s pure checker: every integrity alert on hand-built chains, rotation, resume checks."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas.canonical import hmac_key_id
from bernstein.substrate.keys import KeyPurpose, TrustedKey, TrustedKeys, Validity
from bernstein.verifier.facts import PYTHON, audit_fact
from bernstein.verifier.follow.alerts import INTEGRITY, Alert, AlertKind
from bernstein.verifier.follow.checker import ChainState, PartitionChecker, Policy
from bernstein.verifier.follow.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    CheckpointWriter,
    resume_mismatch,
    value_digest,
)
from bernstein.verifier.follow.journal import Expected, JournalJoin
from tests.support.audit_forge import chain, edited, entry, genuine, parts, remac

SECRET = bytes(range(32))
KEY = hmac_key_id(SECRET)
OTHER = bytes(range(1, 33))
TOPIC = "p.audit"
NOW = 1_700_000_000_000
RESULT = ("activity.result", "run-1")


def trusted(*secrets: bytes) -> TrustedKeys:
    return TrustedKeys(hmac={hmac_key_id(s): s for s in secrets})


def checker(
    keys: TrustedKeys | None = None, partition: int = 0, policy: Policy | None = None, state: ChainState | None = None
) -> PartitionChecker:
    return PartitionChecker(TOPIC, partition, keys or trusted(SECRET), policy or Policy(), state)


def feed(
    c: PartitionChecker, values: Sequence[bytes | None], *, first_offset: int = 0, timestamps: list[int] | None = None
) -> list[Alert]:
    """Check ``values`` at consecutive offsets; return every alert."""
    found = PYTHON.audit_facts(list(values), c.trusted.audit_secret)
    alerts: list[Alert] = []
    for index, fact in enumerate(found):
        ts = timestamps[index] if timestamps else NOW
        alerts += c.check(first_offset + index, fact, ts, NOW)
    return alerts


def kinds(alerts: list[Alert]) -> list[tuple[str, int | None]]:
    return [(a.kind.value, a.offset) for a in alerts]


def values(records: list[tuple[bytes, str]]) -> list[bytes | None]:
    return [v for v, _ in records]


def test_a_clean_chain_raises_nothing_and_moves_the_head() -> None:
    records = chain(SECRET, KEY, 0, [RESULT] * 5)
    c = checker()
    assert feed(c, values(records)) == []
    assert c.state.next_seq == 5 and c.state.head == records[-1][1] and c.state.last_input == 4
    assert c.checked == 5


def test_a_forged_record_is_a_mac_mismatch_and_does_not_move_the_chain() -> None:
    records = chain(SECRET, KEY, 0, [RESULT] * 4)
    forged = edited(records[1][0], run_id="run-evil")  # payload edited, stored MAC kept
    c = checker()
    alerts = feed(c, [records[0][0], records[1][0], forged, records[2][0], records[3][0]])
    assert kinds(alerts) == [("mac_mismatch", 2)]
    assert alerts[0].extra["key_id"] == KEY and alerts[0].extra["seq"] == 1
    assert alerts[0].to_json()["alert"] == "mac_mismatch" and alerts[0].to_json()["partition"] == 0
    assert c.state.next_seq == 4 and c.state.head == records[3][1]


def test_a_record_macd_with_another_key_under_the_pinned_id_is_a_mac_mismatch() -> None:
    records = chain(SECRET, KEY, 0, [RESULT] * 3)
    wrong = remac(records[2][0], OTHER)  # the real key id, another secret
    assert parts(wrong)[1] == KEY
    assert kinds(feed(checker(), [records[0][0], records[1][0], wrong])) == [("mac_mismatch", 2)]


def test_a_key_that_is_not_pinned_is_an_unknown_key() -> None:
    records = chain(SECRET, KEY, 0, [RESULT] * 3)
    stranger = remac(records[2][0], OTHER, hmac_key_id(OTHER))
    alerts = feed(checker(), [records[0][0], records[1][0], stranger])
    assert kinds(alerts) == [("unknown_key", 2)]
    assert alerts[0].extra["key_id"] == hmac_key_id(OTHER)


def test_a_pinned_signing_key_id_on_an_audit_record_is_key_misuse() -> None:
    keys = TrustedKeys.of(
        [TrustedKey(KEY, KeyPurpose.AUDIT, SECRET), TrustedKey("sha256:" + "e" * 64, KeyPurpose.SEAL, b"\x01" * 32)]
    )
    records = chain(SECRET, KEY, 0, [RESULT] * 2)
    misnamed = remac(records[1][0], OTHER, "sha256:" + "e" * 64)
    assert kinds(feed(checker(keys), [records[0][0], misnamed])) == [("key_misuse", 1)]


def test_skipped_seqs_are_a_gap_and_the_chain_continues_after_it() -> None:
    records = chain(SECRET, KEY, 0, [RESULT] * 7)
    kept = [records[i][0] for i in (0, 1, 2, 5, 6)]  # seqs 3 and 4 deleted
    alerts = feed(checker(), kept)
    assert kinds(alerts) == [("gap", 3)]
    assert alerts[0].extra == {"seq": 5, "expected_seq": 3}
    assert "seqs 3..4 missing" in alerts[0].detail


def test_a_chain_that_does_not_start_at_seq_0_is_a_gap() -> None:
    records = chain(SECRET, KEY, 0, [RESULT] * 4)
    assert kinds(feed(checker(), values(records[2:]))) == [("gap", 0)]


def test_a_replayed_record_is_out_of_order_and_ignored() -> None:
    records = chain(SECRET, KEY, 0, [RESULT] * 4)
    sequence = [records[0][0], records[1][0], records[2][0], records[1][0], records[3][0]]
    assert kinds(feed(checker(), sequence)) == [("out_of_order", 3)]


def test_a_record_that_does_not_link_is_a_chain_break() -> None:
    records = chain(SECRET, KEY, 0, [RESULT] * 3)
    unlinked, _ = genuine(SECRET, KEY, entry(0, 3, "hmac-sha256:" + "0" * 64))
    alerts = feed(checker(), [*values(records), unlinked])
    assert kinds(alerts) == [("chain_break", 3)]
    assert alerts[0].extra["expected"] == records[2][1]


def test_a_first_record_that_does_not_start_at_the_genesis_is_a_chain_break() -> None:
    first, _ = genuine(SECRET, KEY, entry(0, 0, "hmac-sha256:" + "1" * 64))
    assert kinds(feed(checker(), [first])) == [("chain_break", 0)]


def test_a_record_copied_from_another_partition_is_wrong_partition() -> None:
    mine = chain(SECRET, KEY, 0, [RESULT] * 2)
    theirs = chain(SECRET, KEY, 1, [RESULT] * 3)
    assert kinds(feed(checker(), [mine[0][0], mine[1][0], theirs[2][0]])) == [("wrong_partition", 2)]


def test_an_undecodable_record_is_reported() -> None:
    alerts = feed(checker(), [b"not an audit record"])
    assert kinds(alerts) == [("undecodable", 0)]


def test_rotation_needs_both_keys_pinned() -> None:
    new = bytes(range(2, 34))
    old_part = chain(SECRET, KEY, 0, [RESULT] * 3)
    new_part = chain(new, hmac_key_id(new), 0, [RESULT] * 3, start_seq=3, head=old_part[-1][1])
    both = [*values(old_part), *values(new_part)]
    assert feed(checker(trusted(SECRET, new)), both) == []
    alerts = feed(checker(trusted(SECRET)), both)
    assert kinds(alerts) == [("unknown_key", 3), ("unknown_key", 4), ("unknown_key", 5)]


def test_a_key_used_outside_its_pinned_lifetime_is_key_not_valid() -> None:
    keys = TrustedKeys.of([TrustedKey(KEY, KeyPurpose.AUDIT, SECRET, Validity(0, NOW))])
    records = chain(SECRET, KEY, 0, [RESULT] * 2)
    alerts = feed(checker(keys), values(records), timestamps=[NOW - 1, NOW])
    assert kinds(alerts) == [("key_not_valid", 1)]


def test_every_dead_letter_is_reported() -> None:
    records = chain(SECRET, KEY, 0, [RESULT, ("input.deadletter", ""), RESULT])
    alerts = feed(checker(), values(records))
    assert kinds(alerts) == [("deadletter", 1)]
    assert alerts[0].extra["input_offset"] == 1


def test_a_refusal_burst_is_reported_once_per_burst() -> None:
    refused = ("activity.refused", "run-1")
    records = chain(SECRET, KEY, 0, [refused] * 7)
    c = checker(policy=Policy(refusal_burst=3, refusal_window_ms=1000))
    alerts = feed(c, values(records), timestamps=[0, 100, 200, 300, 5000, 5100, 5200])
    assert kinds(alerts) == [("refusal_burst", 2), ("refusal_burst", 6)]
    assert alerts[0].extra["refusals"] == 3


def test_a_run_left_unsealed_is_reported_once_until_sealed() -> None:
    c = checker(policy=Policy(unsealed_after_ms=1000))
    records = chain(SECRET, KEY, 0, [RESULT, RESULT])
    feed(c, values(records), timestamps=[10_000, 10_500])
    assert c.tick(10_999) == []
    alerts = c.tick(11_000)
    assert kinds(alerts) == [("run_unsealed", None)] and alerts[0].extra["run_id"] == "run-1"
    assert c.tick(20_000) == []
    sealed = chain(SECRET, KEY, 0, [("run.sealed", "run-1")], start_seq=2, head=records[-1][1])
    assert feed(c, values(sealed), first_offset=2) == []
    assert c.state.open_runs == {} and c.tick(99_000) == []


def test_a_silent_scheduler_is_reported_once_until_the_chain_moves() -> None:
    c = checker(policy=Policy(silent_after_ms=5000))
    records = chain(SECRET, KEY, 0, [RESULT] * 3)
    found = PYTHON.audit_facts(values(records), c.trusted.audit_secret)
    for offset, fact in enumerate(found[:2]):
        c.check(offset, fact, NOW, 1000)  # seen at wall clock 1000: inputs 0 and 1 accounted for
    assert c.tick(9000, submissions_end=2) == []  # nothing waits
    assert c.tick(5999, submissions_end=3) == []  # one waits, for less than 5 s
    alerts = c.tick(6000, submissions_end=3)
    assert kinds(alerts) == [("scheduler_silent", None)] and alerts[0].extra == {"waiting": 1, "last_input": 1}
    assert c.tick(7000, submissions_end=4) == []
    c.check(2, found[2], NOW, 7000)
    assert c.tick(11_999, submissions_end=4) == []
    assert kinds(c.tick(12_000, submissions_end=4)) == [("scheduler_silent", None)]


def test_the_state_survives_a_checkpoint_and_a_forgery_after_the_restart_is_still_caught(tmp_path: Path) -> None:
    records = chain(SECRET, KEY, 0, [RESULT] * 6)
    first = checker(policy=Policy(unsealed_after_ms=1000, refusal_burst=2))
    feed(first, values(records[:3]))
    store = CheckpointStore(tmp_path / "state")
    store.save(Checkpoint(TOPIC, 0, 2, value_digest(records[2][0]), 3, first.state))
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["p.audit.0.json"]  # no temporary file left
    loaded = store.load(TOPIC, 0)
    assert loaded is not None and loaded.offset == 2 and loaded.checked == 3
    assert loaded.state.to_json() == first.state.to_json()
    second = checker(state=loaded.state)
    forged = edited(records[4][0], run_id="run-evil")
    alerts = feed(second, [records[3][0], forged, records[4][0], records[5][0]], first_offset=3)
    assert kinds(alerts) == [("mac_mismatch", 4)]
    # a restart from a checkpoint that skipped records would see a gap, not a clean chain
    reloaded = store.load(TOPIC, 0)
    assert reloaded is not None
    skipped = checker(state=reloaded.state)
    assert kinds(feed(skipped, values(records[4:]), first_offset=4)) == [("gap", 4)]


@pytest.mark.parametrize(
    ("offset", "value", "verdict"),
    [
        (2, b"the record", None),
        (2, b"the record, edited", "has changed"),
        (5, b"the record", "has vanished"),
        (None, None, "has vanished"),
        (1, b"the record", "is not where it was"),
    ],
)
def test_resume_compares_the_record_the_checkpoint_names(offset: int | None, value: bytes | None, verdict: str | None) -> None:
    checkpoint = Checkpoint(TOPIC, 0, 2, value_digest(b"the record"), 3, ChainState())
    found = resume_mismatch(checkpoint, offset, value)
    assert (found if found is None else found.split(" (")[0]) == verdict


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "is not a follow checkpoint"),
        ('{"format": "other"}', "is not a follow checkpoint"),
        ('{"format": "bernstein.audit-follow-checkpoint/v1", "topic": "p.audit", "partition": 0}', "is not a follow checkpoint"),
    ],
)
def test_an_unreadable_checkpoint_is_a_typed_error(tmp_path: Path, text: str, message: str) -> None:
    store = CheckpointStore(tmp_path)
    store.path(TOPIC, 0).write_text(text)
    with pytest.raises(CheckpointError, match=message):
        store.load(TOPIC, 0)


def test_a_checkpoint_of_another_partition_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(Checkpoint(TOPIC, 1, 0, value_digest(b""), 1, ChainState()))
    os.replace(store.path(TOPIC, 1), store.path(TOPIC, 0))
    with pytest.raises(CheckpointError, match=r"is the checkpoint of p.audit\[1\]"):
        store.load(TOPIC, 0)


def test_the_python_facts_are_the_verifiers_audit_facts() -> None:
    value, mac = chain(SECRET, KEY, 0, [RESULT])[0]
    fact: Any = audit_fact(value, trusted(SECRET).audit_secret)
    assert fact[2] == fact[3] == mac


def test_every_alert_kind_is_documented_and_every_documented_kind_exists() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("### Alert kinds", 1)[1].split("\n## ", 1)[0]  # up to the next section (Metrics and health)
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE)
    assert len(documented) == len(set(documented))
    assert set(documented) == {kind.value for kind in AlertKind}
    assert INTEGRITY == {AlertKind(kind) for kind in documented[:13]}  # the table lists the integrity kinds first


def test_the_journal_join_reports_a_mirror_the_journal_passed_without_it() -> None:
    join = JournalJoin(TOPIC, 0)
    join.journal("sha256:early")  # read from the journal before its audit record
    join.expect("sha256:early", Expected(3, 3, "run-1", 1, journal_end=10))
    join.expect("sha256:late", Expected(4, 4, "run-1", 2, journal_end=10))
    join.expect("sha256:lost", Expected(5, 5, "run-1", 3, journal_end=10))
    join.expect("sha256:next", Expected(6, 6, "run-1", 4, journal_end=20))
    assert join.reached(9) == []  # the journal is not past the end the records were read with
    join.journal("sha256:late")
    alerts = join.reached(10)
    assert kinds(alerts) == [("journal_missing", 5)]
    assert alerts[0].extra == {"seq": 5, "record_hash": "sha256:lost", "run_id": "run-1", "journal_seq": 3}
    assert join.reached(11) == [] and list(join.expected) == ["sha256:next"] and join.next_offset == 11
    restored = JournalJoin.from_json(TOPIC, 0, json.loads(json.dumps(join.to_json())))
    assert restored.to_json() == join.to_json()
    assert kinds(restored.reached(20)) == [("journal_missing", 6)]


def test_the_checker_hands_every_mirror_of_an_authentic_record_to_the_join() -> None:
    records = chain(SECRET, KEY, 0, [RESULT, ("activity.refused", "run-1"), ("run.sealed", "run-1")])
    forged = edited(records[0][0], run_id="run-evil")
    c = checker()
    mirrored: list[tuple[int, int, str]] = []
    c.mirror = lambda offset, seq, run_id, _hash, _jseq: mirrored.append((offset, seq, run_id))
    feed(c, [forged, *values(records)])
    assert mirrored == [(1, 0, "run-1"), (3, 2, "run-1")]  # the result and the seal; not the refusal nor the forgery


def test_the_checkpoint_writer_saves_in_order_then_reports_and_surfaces_a_failure(tmp_path: Path) -> None:
    writer = CheckpointWriter(CheckpointStore(tmp_path / "state"))
    done: list[int] = []
    state = ChainState()
    try:
        for offset in range(5):
            state.next_seq = offset + 1
            writer.save(
                Checkpoint(TOPIC, 0, offset, value_digest(b""), offset + 1, state), functools.partial(done.append, offset)
            )
        state.next_seq = 99  # the checker goes on: what was given is a snapshot
        writer.flush()
        loaded = CheckpointStore(tmp_path / "state").load(TOPIC, 0)
        assert done == [0, 1, 2, 3, 4] and loaded is not None and loaded.offset == 4 and loaded.state.next_seq == 5
    finally:
        writer.close()
    (tmp_path / "blocked").write_text("a file where the state directory should be")
    broken = CheckpointWriter(CheckpointStore(tmp_path / "blocked"))
    try:
        broken.save(Checkpoint(TOPIC, 0, 5, value_digest(b""), 6, state))
        with pytest.raises(CheckpointError, match="cannot write the follow checkpoint"):
            broken.flush()
        with pytest.raises(CheckpointError):  # and every later call, until the follower stops
            broken.save(Checkpoint(TOPIC, 0, 6, value_digest(b""), 7, state))
    finally:
        broken.close()


def test_the_command_refuses_keys_without_an_audit_key_and_bad_flags_before_any_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bernstein.cli import main

    monkeypatch.setenv("BERNSTEIN_KAFKA_BOOTSTRAP", "127.0.0.1:9")  # never reached
    seal_only = tmp_path / "seal-only.json"
    seal_key = TrustedKey("sha256:" + hashlib.sha256(b"\x01" * 32).hexdigest(), KeyPurpose.SEAL, b"\x01" * 32)
    seal_only.write_text(json.dumps(TrustedKeys.of([seal_key]).to_json()))
    assert main(["audit", "follow", "--once", "--trusted-keys", str(seal_only), "--state", str(tmp_path / "s")]) == 3
    assert "pin no audit key" in capsys.readouterr().err
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(trusted(SECRET).to_json()))
    assert main(["audit", "follow", "--once", "--trusted-keys", str(keys), "--checkpoint-every", "0"]) == 3
    assert "--checkpoint-every 0.0: must be a positive number of seconds" in capsys.readouterr().err
    assert main(["audit", "follow", "--once", "--trusted-keys", str(tmp_path / "missing.json")]) == 3
    assert "no trusted-keys file" in capsys.readouterr().err
