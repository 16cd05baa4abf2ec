"""Scheduler state snapshots (consumers.core.snapshot): byte form, MAC, chunks, and the tail fold after one."""

from __future__ import annotations

import copy

import pytest

from bernstein.consumers.core.model import OutputRecord, SchedulerConfig, SchedulerState, Stream
from bernstein.consumers.core.rebuild import rebuild_state
from bernstein.consumers.core.snapshot import (
    MAGIC,
    Positions,
    Rejected,
    encode_chunks,
    newest_verified,
    snapshot_key,
    state_bytes,
    state_form,
    state_of_form,
)
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas.canonical import hmac_key_id
from tests.support.core_driver import AUDIT_KEY, PARTITION, checkpoint_config, enc_close, enc_sub, record

KEY_ID = hmac_key_id(AUDIT_KEY)


def _values() -> list[tuple[bytes, bytes]]:
    values: list[tuple[bytes, bytes]] = []
    for run in range(6):
        rid = f"run-{run}"
        values += [
            (rid.encode(), enc_sub(run_id=rid, submission_id=f"{rid}-{i}", stage_id=f"s{i}", pages=[f"p {run} {i}".encode()]))
            for i in range(3)
        ]
        if run % 2 == 0:
            values.append((rid.encode(), enc_close(rid)))
    values.append((b"run-1", enc_sub(run_id="run-1", submission_id="run-1-0", stage_id="s9", pages=[b"again"])))
    return values


def _run(cfg: SchedulerConfig) -> tuple[list[list[OutputRecord]], list[SchedulerState]]:
    """Every step's outputs and the state after each step (copies)."""
    core = SchedulerCore(cfg)
    state = initial_state(cfg, PARTITION)
    states: list[SchedulerState] = []
    steps: list[list[OutputRecord]] = []
    for offset, (key, raw) in enumerate(_values()):
        state, outputs = core.step(state, record(offset, raw, key))
        steps.append(outputs)
        states.append(copy.deepcopy(state))
    return steps, states


def _indexed(steps: list[list[OutputRecord]], stream: Stream) -> list[tuple[int, bytes]]:
    return list(enumerate(o.value for step in steps for o in step if o.stream is stream))


def _count(steps: list[list[OutputRecord]], stream: Stream) -> int:
    return sum(1 for step in steps for o in step if o.stream is stream)


def test_the_byte_form_round_trips_and_keeps_dict_orders() -> None:
    _, states = _run(checkpoint_config(checkpoint_every=3))
    state = states[-1]
    assert any(r.closed for r in state.runs.values()) and any(r.stages for r in state.runs.values())
    back = state_of_form(state_form(state))
    assert back == state
    assert state_bytes(back) == state_bytes(state)
    assert list(back.runs) == list(state.runs)


def test_a_snapshot_verifies_and_an_edited_one_is_rejected_with_the_reason() -> None:
    cfg = checkpoint_config()
    _, states = _run(cfg)
    positions = Positions(10, 7, 9, 2)
    records = encode_chunks(states[-1], positions, audit_secret=AUDIT_KEY, audit_key_id=KEY_ID)
    assert [k for k, _ in records] == [str(PARTITION).encode()]
    snap = newest_verified(cfg, PARTITION, [(0, records[0][1])])
    assert snap is not None and snap.positions == positions and state_bytes(snap.state) == state_bytes(states[-1])
    # a flipped byte in the body, and a forged MAC under a key that is not the derived one
    value = bytearray(records[0][1])
    value[-5] ^= 1
    rejected: list[Rejected] = []
    assert newest_verified(cfg, PARTITION, [(3, bytes(value))], report=rejected.append) is None
    assert [str(r) for r in rejected] == [
        "scheduler state snapshot@3: its MAC does not verify: the snapshot was edited or forged; ignored"
    ]
    raw = encode_chunks(states[-1], positions, audit_secret=snapshot_key(AUDIT_KEY), audit_key_id=KEY_ID)
    rejected.clear()
    assert newest_verified(cfg, PARTITION, [(4, raw[0][1])], report=rejected.append) is None
    assert "MAC does not verify" in rejected[0].problem
    other = encode_chunks(states[-1], positions, audit_secret=AUDIT_KEY, audit_key_id="sha256:" + "1" * 64)
    rejected.clear()
    assert newest_verified(cfg, PARTITION, [(5, other[0][1]), (6, b"garbage")], report=rejected.append) is None
    assert [r.problem[:41] for r in rejected] == [
        "not a scheduler state snapshot (no magic)",
        "MACed under audit key 'sha256:11111111111",
    ]


def test_the_newest_snapshot_that_verifies_wins_and_a_tampered_newest_falls_back() -> None:
    cfg = checkpoint_config()
    _, states = _run(cfg)
    old = encode_chunks(states[3], Positions(4, 4, 4, 0), audit_secret=AUDIT_KEY, audit_key_id=KEY_ID)[0][1]
    new = encode_chunks(states[8], Positions(9, 9, 9, 1), audit_secret=AUDIT_KEY, audit_key_id=KEY_ID)[0][1]
    assert newest_verified(cfg, PARTITION, [(0, old), (1, new)]).positions.input_next == 9  # type: ignore[union-attr]
    tampered = new.replace(b'"input_next":9', b'"input_next":8', 1)
    rejected: list[Rejected] = []
    snap = newest_verified(cfg, PARTITION, [(0, old), (1, tampered)], report=rejected.append)
    assert snap is not None and snap.positions.input_next == 4 and state_bytes(snap.state) == state_bytes(states[3])
    assert len(rejected) == 1 and rejected[0].offset == 1


def test_a_snapshot_larger_than_a_chunk_is_split_and_reassembled() -> None:
    cfg = checkpoint_config()
    _, states = _run(cfg)
    records = encode_chunks(states[-1], Positions(1, 2, 3, 4), audit_secret=AUDIT_KEY, audit_key_id=KEY_ID, chunk_bytes=64)
    assert len(records) > 3
    assert [k for k, _ in records][:3] == [f"{PARTITION}".encode(), f"{PARTITION}.1".encode(), f"{PARTITION}.2".encode()]
    assert all(v.startswith(MAGIC) for _, v in records)
    snap = newest_verified(cfg, PARTITION, list(enumerate(v for _, v in records)))
    assert snap is not None and state_bytes(snap.state) == state_bytes(states[-1])
    assert newest_verified(cfg, PARTITION, list(enumerate(v for _, v in records[:-1]))) is None  # incomplete


@pytest.mark.parametrize("cut", [1, 3, 5, 9, 14, 20])
def test_state_from_a_snapshot_plus_the_tail_equals_the_full_fold_byte_for_byte(cut: int) -> None:
    cfg = checkpoint_config(checkpoint_every=3)
    steps, states = _run(cfg)
    full = rebuild_state(
        cfg,
        PARTITION,
        _indexed(steps, Stream.JOURNAL),
        _indexed(steps, Stream.AUDIT),
        checkpoint_values=_indexed(steps, Stream.CHECKPOINTS),
    )
    assert state_bytes(full) == state_bytes(states[-1])
    head = steps[:cut]
    positions = Positions(cut, _count(head, Stream.JOURNAL), _count(head, Stream.AUDIT), _count(head, Stream.CHECKPOINTS))
    (record,) = encode_chunks(states[cut - 1], positions, audit_secret=AUDIT_KEY, audit_key_id=KEY_ID)
    snap = newest_verified(cfg, PARTITION, [(0, record[1])])
    assert snap is not None
    p = snap.positions
    tail = rebuild_state(
        cfg,
        PARTITION,
        _indexed(steps, Stream.JOURNAL)[p.journal_next :],
        _indexed(steps, Stream.AUDIT)[p.audit_next :],
        checkpoint_values=_indexed(steps, Stream.CHECKPOINTS)[p.checkpoints_next :],
        start=snap.state,
    )
    assert state_bytes(tail) == state_bytes(full)
