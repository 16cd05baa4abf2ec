"""``audit follow --witness``, its pure parts: the journal's Merkle log folded from the records (``LogWatch``), every
signed head held to it whatever order the two topics arrive in, and the witness cosigning only what the journal's
own leaves gave (``Witness.cosign_checked``). Runs written by the real scheduler core."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas import merkle, notes
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.follow.alerts import INTEGRITY, AlertKind
from bernstein.verifier.follow.checkpoint import Checkpoint
from bernstein.verifier.follow.logwatch import LogWatch
from bernstein.verifier.report import EXIT_VERIFIED
from bernstein.verifier.tlog import journal_leaf
from bernstein.verifier.witness.core import Witness, WitnessCode, Witnessed, WitnessRefusal
from bernstein.verifier.witness.store import FileWitnessStore
from tests.support.verdicts import RUN, Built, C, Writer, build_checkpointed

WITNESS = notes.NoteSigner("follower.example/w1", notes.SIG_COSIGNATURE_V1, b"\x52" * 32)
TOPIC = "t.checkpoints"
END = 1 << 40


def six_stages(w: Writer) -> None:
    for i in range(6):
        w.stage(RUN, f"stage-{i}")
    w.close(RUN)


@pytest.fixture(name="b")
def _b(tmp_path: Path) -> Built:
    return build_checkpointed(tmp_path, six_stages, checkpoint_every=3)


def journal(b: Built) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in b.records("journal")]


def heads(b: Built) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in b.records("checkpoints")]


def signed(b: Built) -> list[dict[str, Any]]:
    return [dict(C.decode(C.decode(v or b"").record["payload"]).record) for _, v in heads(b)]


def leaf_hashes(b: Built) -> list[bytes]:
    return [merkle.leaf_hash(leaf) for _, v in journal(b) if (leaf := journal_leaf(C, v)) is not None]


def test_every_signed_head_is_held_to_the_journal_whichever_topic_comes_first(b: Built) -> None:
    sizes = [h["tree_size"] for h in signed(b)]
    assert len(sizes) >= 3 and sizes == sorted(sizes)
    # the checkpoints first: every head waits, then each is held as its leaves arrive
    watch = LogWatch(TOPIC, 0)
    assert watch.heads(heads(b), b.trusted, END) == []
    assert watch.waiting == len(sizes)
    held: list[int] = []
    for at in range(0, len(journal(b)), 2):
        watch.journal(journal(b)[at : at + 2])
        alerts, reproduced = watch.settle()
        assert alerts == []
        held += [h.size for h in reproduced]
    assert held == sizes and watch.waiting == 0
    assert watch.base.root() == merkle.root(leaf_hashes(b)[: sizes[-1]])
    # the journal first: the tail waits for the heads
    other = LogWatch(TOPIC, 0)
    other.journal(journal(b))
    assert other.heads(heads(b), b.trusted, END) == []
    alerts, reproduced = other.settle()
    assert alerts == [] and [h.size for h in reproduced] == sizes
    assert other.base == watch.base and other.size == len(leaf_hashes(b))


def test_a_rewritten_journal_record_is_log_head_mismatch_with_the_first_leaf_not_held(b: Built) -> None:
    records = journal(b)
    first, second = signed(b)[0]["tree_size"], signed(b)[1]["tree_size"]
    # the leaf at index first (past the first head) rewritten: an entry's payload byte flipped
    leaf_offsets = [o for o, v in records if journal_leaf(C, v) is not None]
    at = next(i for i, (o, _) in enumerate(records) if o == leaf_offsets[first])
    offset, value = records[at]
    assert value is not None and b"stage-" in value
    bent = bytearray(value)
    bent[bytes(bent).index(b"stage-") + 6] ^= 1
    records[at] = (offset, bytes(bent))
    watch = LogWatch(TOPIC, 0)
    watch.journal(records)
    watch.heads(heads(b), b.trusted, END)
    alerts, reproduced = watch.settle()
    assert [h.size for h in reproduced] == [first]
    assert alerts and {a.kind for a in alerts} == {AlertKind.LOG_HEAD_MISMATCH}
    assert alerts[0].extra["tree_size"] == second and alerts[0].extra["leaf_index"] == first
    assert alerts[0].extra["signed_root"] == signed(b)[1]["tree_root"]
    assert alerts[0].offset == heads(b)[1][0] and alerts[0].topic == TOPIC
    assert AlertKind.LOG_HEAD_MISMATCH in INTEGRITY  # a tamper finding: it latches


def test_a_journal_cut_short_of_a_signed_head_is_named_once_the_journal_end_is_passed(b: Built) -> None:
    records = journal(b)
    first = signed(b)[0]["tree_size"]
    leaf_offsets = [o for o, v in records if journal_leaf(C, v) is not None]
    kept = [r for r in records if r[0] <= leaf_offsets[first]]  # one leaf past the first head
    watch = LogWatch(TOPIC, 0)
    watch.journal(kept)
    end = records[-1][0] + 1
    watch.heads(heads(b), b.trusted, end)
    alerts, reproduced = watch.settle()
    assert alerts == [] and [h.size for h in reproduced] == [first]  # the journal may still bring the rest
    watch.journal_read = end  # the consumer's position passed the end the heads were read with
    alerts, _ = watch.settle()
    assert alerts == [] and watch.suspects  # not yet: the journal's end is read again first
    watch.refresh(end)  # the same end: nothing more is coming
    assert not watch.suspects
    alerts, _ = watch.settle()
    assert [a.kind for a in alerts] == [AlertKind.LOG_HEAD_MISMATCH] * (len(signed(b)) - 1)
    assert {a.extra["leaves"] for a in alerts} == {first + 1} and watch.waiting == 0


def test_a_head_seen_before_its_journal_transaction_marker_waits_for_the_end_read_again(b: Built) -> None:
    """The scheduler's transaction commits the checkpoints partition and the journal's a moment apart: a head may be
    read while the journal's last stable offset is still below its leaves. That is no cut journal."""
    records = journal(b)
    first = signed(b)[0]["tree_size"]
    leaf_offsets = [o for o, v in records if journal_leaf(C, v) is not None]
    early = [r for r in records if r[0] <= leaf_offsets[first - 1]]
    watch = LogWatch(TOPIC, 0)
    watch.journal(early)
    stale = early[-1][0] + 1  # the end read with the heads: the later leaves' marker not written yet
    watch.heads(heads(b), b.trusted, stale)
    watch.journal_read = stale
    alerts, reproduced = watch.settle()
    assert alerts == [] and [h.size for h in reproduced] == [first] and watch.suspects
    watch.refresh(records[-1][0] + 1)  # read again: the marker is there now
    alerts, _ = watch.settle()
    assert alerts == [] and watch.waiting == len(signed(b)) - 1
    watch.journal(records[len(early) :])
    alerts, reproduced = watch.settle()
    assert alerts == [] and [h.size for h in reproduced] == [h["tree_size"] for h in signed(b)][1:]


def test_a_catch_up_holding_a_hundred_heads_at_once_still_cosigns_on_top_of_the_last_cosigned(tmp_path: Path) -> None:
    def many(w: Writer) -> None:
        for i in range(100):
            w.stage(RUN, f"stage-{i}")

    b = build_checkpointed(tmp_path, many, checkpoint_every=1)
    assert len(heads(b)) >= 100 > 64  # more than the recent roots a fold keeps
    store = FileWitnessStore(tmp_path / "witness")
    witness = cosigner(b, store)
    watch = LogWatch(TOPIC, 0)
    watch.heads(heads(b)[:1], b.trusted, END)
    watch.journal(journal(b)[:4])
    _, reproduced = watch.settle()
    done = witness.cosign_checked(reproduced[-1].note, lambda latest: watch.knows(latest.size, latest.root_hash))
    assert done is not None
    watch.cosigned = (done.size, done.root_hash)
    watch.heads(heads(b)[1:], b.trusted, END)  # every other head, then the whole journal: one pass holds them all
    watch.journal(journal(b)[4:])
    alerts, reproduced = watch.settle()
    assert alerts == [] and len(reproduced) == len(heads(b)) - 1
    grown = witness.cosign_checked(reproduced[-1].note, lambda latest: watch.knows(latest.size, latest.root_hash))
    assert grown is not None and grown.size == signed(b)[-1]["tree_size"] and store.evidence() == []


def test_the_tree_a_witness_state_names_is_held_like_a_head_and_named_when_the_journal_lacks_it(b: Built) -> None:
    last = signed(b)[-1]
    root = bytes.fromhex(last["tree_root"].removeprefix("sha256:"))
    watch = LogWatch(TOPIC, 0)
    watch.expect(last["tree_size"], root, END)
    watch.journal(journal(b))
    alerts, reproduced = watch.settle()
    assert alerts == [] and reproduced == [] and watch.cosigned == (last["tree_size"], root)
    assert watch.knows(last["tree_size"], root)
    # the journal cut back below the tree the witness state holds: named once the journal's end is passed
    cut = LogWatch(TOPIC, 0)
    records = journal(b)[: len(journal(b)) // 2]
    cut.journal(records)
    cut.expect(last["tree_size"], root, records[-1][0] + 1)
    cut.settle()
    cut.refresh(records[-1][0] + 1)
    alerts, _ = cut.settle()
    assert [a.kind for a in alerts] == [AlertKind.LOG_HEAD_MISMATCH] and alerts[0].offset is None
    assert "a witness state names" in alerts[0].detail and cut.waiting == 0


def test_a_note_no_pinned_seal_key_signed_is_log_note_invalid_and_never_waits(b: Built) -> None:
    unpinned = TrustedKeys.of([k for k in b.trusted.entries.values() if k.key_id != b.keys.signer.key_id])
    watch = LogWatch(TOPIC, 0)
    alerts = watch.heads(heads(b), unpinned, END)
    assert [a.kind for a in alerts] == [AlertKind.LOG_NOTE_INVALID] * len(signed(b))
    assert "not signed by a pinned seal key" in alerts[0].detail and watch.waiting == 0
    # another partition's log: its checkpoints are not this partition's heads
    other = LogWatch(TOPIC, 1)
    alerts = other.heads(heads(b), b.trusted, END)
    assert {a.kind for a in alerts} == {AlertKind.LOG_NOTE_INVALID} and "another partition's log" in alerts[0].detail


def test_the_fold_resumes_from_the_follower_checkpoint_and_holds_the_rest(b: Built) -> None:
    records, first = journal(b), signed(b)[0]["tree_size"]
    watch = LogWatch(TOPIC, 0)
    watch.journal(records[: len(records) // 2])
    watch.heads(heads(b), b.trusted, END)
    _, reproduced = watch.settle()
    assert reproduced and reproduced[0].size == first
    saved = watch.to_json()
    assert saved["checkpoints_next"] == heads(b)[len(reproduced)][0]  # the first head still waiting
    back = LogWatch.from_json(0, saved)
    assert (back.base, back.journal_next, back.checkpoints_next) == (watch.base, watch.journal_next, watch.checkpoints_next)
    # a restart reads the journal after the base's last leaf and the heads from the first one waiting
    back.journal([r for r in records if r[0] >= back.journal_next])
    back.heads([h for h in heads(b) if h[0] >= back.checkpoints_next], b.trusted, END)
    alerts, rest = back.settle()
    assert alerts == [] and [h.size for h in rest] == [h["tree_size"] for h in signed(b)][len(reproduced) :]
    assert back.base.root() == merkle.root(leaf_hashes(b)[: signed(b)[-1]["tree_size"]])


def test_the_follower_checkpoint_file_carries_the_fold() -> None:
    watch = LogWatch(TOPIC, 3, merkle.Frontier.of([b"\x01" * 32] * 5), 17, 4, (5, b"\x02" * 32), origin="o/t/3/e1")
    from bernstein.verifier.follow.checker import ChainState

    checkpoint = Checkpoint("t.audit", 3, 9, "sha256:" + "0" * 64, 10, ChainState(), log=watch)
    back = Checkpoint.from_json(checkpoint.to_json())
    assert back.log is not None and back.log.to_json() == watch.to_json()
    assert back.log.knows(5, b"\x02" * 32) and not back.log.knows(5, b"\x03" * 32)


def cosigner(b: Built, store: FileWitnessStore) -> Witness:
    origin = signed(b)[0]["note"].split("\n", 1)[0]
    return Witness(
        WITNESS, {origin: [notes.log_verifier(origin, b.keys.signer.public_key_raw)]}, store, clock=lambda: 1_767_225_600
    )


def test_the_witness_cosigns_what_the_journal_reproduced_and_holds_the_next_to_it(b: Built, tmp_path: Path) -> None:
    store = FileWitnessStore(tmp_path / "witness")
    witness = cosigner(b, store)
    first, second = (h["note"].encode() for h in signed(b)[:2])
    done = witness.cosign_checked(first, lambda latest: False)  # nothing cosigned yet: nothing to hold it to
    assert isinstance(done, Witnessed) and done.size == signed(b)[0]["tree_size"]
    body, opened = notes.open_checkpoint(done.note, [WITNESS.verifier])
    assert body.size == done.size and opened.signed_by(WITNESS.verifier) is not None
    assert witness.cosign_checked(first, lambda latest: True) is None  # already holds it
    seen: list[Witnessed] = []
    grown = witness.cosign_checked(second, lambda latest: seen.append(latest) or True)
    assert grown is not None and grown.size == signed(b)[1]["tree_size"] and [w.size for w in seen] == [done.size]
    assert witness.cosign_checked(first, lambda latest: True) is None  # smaller than what it holds: nothing to add
    assert store.latest(grown.origin) == grown


def test_the_witness_refuses_a_head_the_leaves_do_not_extend_and_keeps_the_evidence(b: Built, tmp_path: Path) -> None:
    store = FileWitnessStore(tmp_path / "witness")
    witness = cosigner(b, store)
    first, second, third = (h["note"].encode() for h in signed(b)[:3])
    assert witness.cosign_checked(second, lambda latest: True) is not None
    with pytest.raises(WitnessRefusal) as refused:
        witness.cosign_checked(third, lambda latest: False)
    assert refused.value.code == WitnessCode.INCONSISTENT
    assert [e["kind"] for e in store.evidence()] == ["inconsistent"]
    assert store.evidence()[0]["presented"] == third.decode()
    # a note not signed by the log's key is refused before the state is touched
    forged = first.replace(first.split(b"\n")[2], b"A" * 43 + b"=")
    with pytest.raises(WitnessRefusal) as unsigned:
        witness.cosign_checked(forged, lambda latest: True)
    assert unsigned.value.code in {WitnessCode.NOT_SIGNED_BY_LOG, WitnessCode.MALFORMED_REQUEST}


def test_a_cosigned_follower_checkpoint_meets_the_policy_in_activity_verify(b: Built, tmp_path: Path) -> None:
    store = FileWitnessStore(tmp_path / "witness")
    watch = LogWatch(TOPIC, 0)
    watch.journal(journal(b))
    watch.heads(heads(b), b.trusted, END)
    _, reproduced = watch.settle()
    cosigned = cosigner(b, store).cosign_checked(reproduced[-1].note, lambda latest: watch.knows(latest.size, latest.root_hash))
    assert cosigned is not None
    policy = f"witness F1 {WITNESS.verifier.vkey}\nquorum F1\n"
    source = b.source.replaced("journal", b.records("journal"))
    source.witnessed = (cosigned.note,)
    assert b.verify(source, trusted=b.trusted.with_witness_policy(policy)).exit_code == EXIT_VERIFIED


def test_the_metrics_show_how_far_the_fold_and_the_cosigning_have_come(b: Built) -> None:
    from typing import cast

    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from bernstein.verifier.follow.consumer import Follower
    from bernstein.verifier.follow.metrics import FollowerMetrics
    from tests.support.metrics import FollowerTallies

    watch = LogWatch(TOPIC, 0)
    watch.journal(journal(b)[: len(journal(b)) // 2])
    watch.heads(heads(b), b.trusted, END)
    _, reproduced = watch.settle()
    watch.cosigned = (reproduced[-1].size, reproduced[-1].root)
    tallies = FollowerTallies()
    tallies.logs = lambda: {0: watch}  # type: ignore[method-assign]
    text = generate_latest(FollowerMetrics(cast(Follower, tallies)).registry).decode()
    samples = {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("bernstein_audit_log")
    }
    assert samples == {
        "bernstein_audit_log_leaves": watch.size,
        "bernstein_audit_log_cosigned_size": reproduced[-1].size,
        "bernstein_audit_log_heads_waiting": watch.waiting,
        "bernstein_audit_log_heads_unjudged": 0,
    }
    assert watch.waiting > 0 and watch.size > reproduced[-1].size
