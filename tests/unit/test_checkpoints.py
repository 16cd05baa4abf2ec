"""Signed partition checkpoints and AuditRecord.v2, from both scheduler cores, and their rebuild.

Every step that writes a final seal, or leaves ``checkpoint_every`` audit
records uncovered, ends with a ``CheckpointRecord`` on the checkpoints stream;
every audit record is an ``AuditRecord.v2`` whose MAC covers its key id. The
Python reference and the Rust core write the same bytes, and the rebuild
restores the checkpoint chain so a restarted scheduler continues it exactly.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from bernstein.consumers.core.model import OutputRecord, SchedulerConfig, SchedulerState, Stream
from bernstein.consumers.core.native import NativeSchedulerCore, native_status
from bernstein.consumers.core.rebuild import Skipped, StateCorrupted, rebuild_state
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import codec, merkle, notes
from bernstein.schemas.canonical import (
    audit_genesis,
    audit_mac,
    audit_record_mac,
    checkpoint_genesis,
    checkpoint_hash,
    checkpoint_signing_input,
    hmac_key_id,
)
from bernstein.substrate.keys import Ed25519Signer, verify_signature
from bernstein.verifier.tlog import journal_leaf
from tests.support.core_driver import AUDIT_KEY, PARTITION, SIGNER, TOPIC, checkpoint_config, enc_close, enc_sub, record

REPO = Path(__file__).resolve().parents[2]
needs_native = pytest.mark.skipif(not native_status()[0], reason=native_status()[1])
CHECKPOINT_TYPE = b"bernstein.partition.checkpoint"


def checkpoint_of(out: OutputRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    """(envelope, payload) of a checkpoint output; its signature verifies with the scheduler's key."""
    assert out.stream is Stream.CHECKPOINTS
    assert out.key == str(PARTITION).encode()
    assert out.headers[3] == ("ce_type", CHECKPOINT_TYPE)
    envelope = codec.decode(out.value, expect=frozenset({codec.CHECKPOINT_RECORD})).record
    assert envelope["key_id"] == SIGNER.key_id
    assert verify_signature(SIGNER.public_key_raw, envelope["signature"], checkpoint_signing_input(envelope["payload"]))
    return envelope, codec.decode(envelope["payload"], expect=codec.PARTITION_CHECKPOINTS).record


def audit_of(out: OutputRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    assert out.stream is Stream.AUDIT
    envelope = codec.decode(out.value, expect=frozenset({codec.AUDIT_RECORD_V2})).record
    return envelope, codec.decode(envelope["payload"]).record


def feed(core: Any, state: Any, values: list[tuple[bytes, bytes]], start: int = 0) -> tuple[Any, list[list[OutputRecord]]]:
    steps = []
    for offset, (key, value) in enumerate(values, start):
        state, outputs = core.step(state, record(offset, value, key))
        steps.append(outputs)
    return state, steps


# ---------------------------------------------------------------------------
# the reference core
# ---------------------------------------------------------------------------


def test_audit_records_are_v2_and_their_mac_covers_the_key_id() -> None:
    core = SchedulerCore(checkpoint_config())
    _, outputs = core.step(initial_state(core.config, PARTITION), record(0, enc_sub()))
    assert [o.stream for o in outputs] == [Stream.JOURNAL, Stream.AUDIT]
    envelope, entry = audit_of(outputs[1])
    assert list(envelope) == ["key_id", "payload", "mac"]
    assert envelope["key_id"] == hmac_key_id(AUDIT_KEY)
    assert envelope["mac"] == audit_record_mac(AUDIT_KEY, hmac_key_id(AUDIT_KEY), envelope["payload"])
    assert envelope["mac"] != audit_mac(AUDIT_KEY, envelope["payload"])  # not the v1 MAC
    assert audit_record_mac(AUDIT_KEY, "sha256:" + "0" * 64, envelope["payload"]) != envelope["mac"]
    assert entry["seq"] == 0 and entry["prev_mac"] == audit_genesis(AUDIT_KEY, PARTITION)


def test_a_run_close_ends_with_a_final_checkpoint_over_its_seal() -> None:
    core = SchedulerCore(checkpoint_config())
    state = initial_state(core.config, PARTITION)
    state, steps = feed(core, state, [(b"run-1", enc_sub()), (b"run-1", enc_close())])
    assert [o.stream for o in steps[0]] == [Stream.JOURNAL, Stream.AUDIT]  # no checkpoint due yet
    close = steps[1]
    assert [o.stream for o in close] == [Stream.JOURNAL, Stream.AUDIT, Stream.CHECKPOINTS]
    seal_audit, _ = audit_of(close[1])
    _, payload = checkpoint_of(close[2])
    leaves = [journal_leaf(codec.default_codec(), out.value) for out in (steps[0][0], close[0])]
    root = merkle.root([merkle.leaf_hash(leaf) for leaf in leaves if leaf is not None])
    assert payload == {
        "partition": PARTITION,
        "seq": 0,
        "prev_hash": checkpoint_genesis(PARTITION),
        "input_topic": TOPIC,
        "next_offset": 2,
        "audit_seq": 2,
        "audit_head": seal_audit["mac"],
        "reason": "final",
        "checkpoint_every": 1000,
        "checkpointed_at_ms": close[2].timestamp_ms,
        # the partition's Merkle log: the entry and the final seal, each a leaf
        "tree_size": 2,
        "tree_root": "sha256:" + root.hex(),
        "note": payload["note"],
    }
    origin = f"bernstein/{TOPIC}/{PARTITION}/e1"
    body, opened = notes.open_checkpoint(payload["note"].encode(), [notes.log_verifier(origin, SIGNER.public_key_raw)])
    assert (body.origin, body.size, body.root_hash, len(opened.verified)) == (origin, 2, root, 1)
    assert close[2].headers[1] == ("ce_id", f"{TOPIC}:{PARTITION}:1:2".encode())
    assert (state.checkpoint_seq, state.checkpoint_audit_seq) == (1, 2)
    assert state.checkpoint_head == checkpoint_hash(codec.decode(close[2].value).record["payload"])


def test_periodic_checkpoints_chain_and_a_late_refusal_is_covered_by_the_next_one() -> None:
    core = SchedulerCore(checkpoint_config(checkpoint_every=3))
    state = initial_state(core.config, PARTITION)
    values = [(b"run-1", enc_sub(stage_id=f"s{i}", pages=[f"page {i}".encode()])) for i in range(3)]
    values += [(b"run-1", enc_close()), (b"run-1", enc_sub(stage_id="late", pages=[b"late"]))]
    values += [(b"run-2", enc_sub(run_id="run-2", stage_id=f"t{i}", pages=[f"t {i}".encode()])) for i in range(2)]
    state, steps = feed(core, state, values)
    kinds = [[o.stream.value for o in step] for step in steps]
    assert kinds == [
        ["journal", "audit"],
        ["journal", "audit"],
        ["journal", "audit", "checkpoints"],  # 3 audit records since the (genesis) checkpoint
        ["journal", "audit", "checkpoints"],  # the final seal
        ["refusals", "audit"],  # RUN_CLOSED: not yet covered
        ["journal", "audit"],
        ["journal", "audit", "checkpoints"],  # 3 more: covers the late refusal
    ]
    checkpoints = [checkpoint_of(step[-1])[1] for step in steps if step[-1].stream is Stream.CHECKPOINTS]
    assert [(c["seq"], c["audit_seq"], c["next_offset"], c["reason"]) for c in checkpoints] == [
        (0, 3, 3, "periodic"),
        (1, 4, 4, "final"),
        (2, 7, 7, "periodic"),
    ]
    previous = checkpoint_genesis(PARTITION)
    for step in steps:
        if step[-1].stream is Stream.CHECKPOINTS:
            envelope, payload = checkpoint_of(step[-1])
            assert payload["prev_hash"] == previous
            assert payload["audit_head"] == audit_of(step[-2])[0]["mac"]  # the step's last audit record
            previous = checkpoint_hash(envelope["payload"])
    refusal_audit = audit_of(steps[4][1])[1]
    assert refusal_audit["event"] == "activity.refused" and refusal_audit["seq"] == 4
    assert checkpoints[2]["audit_seq"] > refusal_audit["seq"]


def test_checkpoint_every_is_bounded() -> None:
    for bad in (0, -1, 1001):
        with pytest.raises(ValueError, match="checkpoint_every"):
            SchedulerCore(checkpoint_config(checkpoint_every=bad))


def test_a_rejected_record_is_checkpointed_like_a_stepped_one() -> None:
    from bernstein.schemas.records import DeadLetterCode

    core = SchedulerCore(checkpoint_config(checkpoint_every=2))
    state = initial_state(core.config, PARTITION)
    state, _ = feed(core, state, [(b"run-1", enc_sub())])
    state, outputs = core.reject(state, record(1, enc_sub(stage_id="big")), DeadLetterCode.PRODUCE_REJECTED, "too big")
    assert [o.stream for o in outputs] == [Stream.DEADLETTER, Stream.AUDIT, Stream.CHECKPOINTS]
    assert checkpoint_of(outputs[2])[1]["audit_seq"] == 2


# ---------------------------------------------------------------------------
# rebuild
# ---------------------------------------------------------------------------


def _streams(steps: list[list[OutputRecord]], stream: Stream) -> list[bytes]:
    return [o.value for step in steps for o in step if o.stream is stream]


def _rebuilt(cfg: SchedulerConfig, steps: list[list[OutputRecord]]) -> SchedulerState:
    checkpoints = _streams(steps, Stream.CHECKPOINTS)
    audits = _streams(steps, Stream.AUDIT)
    return rebuild_state(
        cfg,
        PARTITION,
        _streams(steps, Stream.JOURNAL),
        audits,
        checkpoint_values=checkpoints,
    )


def test_the_rebuild_restores_the_checkpoint_chain_and_the_restarted_core_continues_it() -> None:
    cfg = checkpoint_config(checkpoint_every=3)
    values = [(b"run-1", enc_sub(stage_id=f"s{i}", pages=[f"page {i}".encode()])) for i in range(4)]
    values += [(b"run-1", enc_close())] + [(b"run-1", enc_sub(stage_id=f"x{i}", pages=[b"x"])) for i in range(4)]
    core = SchedulerCore(cfg)
    straight, all_steps = feed(core, initial_state(cfg, PARTITION), values)
    for cut in range(1, len(values)):
        rebuilt = _rebuilt(cfg, all_steps[:cut])
        replayed, steps = feed(core, initial_state(cfg, PARTITION), values[:cut])
        assert (rebuilt.checkpoint_seq, rebuilt.checkpoint_head, rebuilt.checkpoint_audit_seq) == (
            replayed.checkpoint_seq,
            replayed.checkpoint_head,
            replayed.checkpoint_audit_seq,
        ), cut
        resumed, rest = feed(core, rebuilt, values[cut:], start=cut)
        assert rest == all_steps[cut:], cut  # byte-identical to the run without a restart
        assert resumed.checkpoint_head == straight.checkpoint_head


def test_the_rebuild_reads_v1_audit_records_too() -> None:
    """A partition written before AuditRecord.v2: its v1 records still restore the audit chain."""
    cfg = checkpoint_config()
    core = SchedulerCore(cfg)
    state, steps = feed(core, initial_state(cfg, PARTITION), [(b"run-1", enc_sub())])
    envelope, _ = audit_of(steps[0][1])
    v1 = codec.encode(
        codec.AUDIT_RECORD,
        {"payload": envelope["payload"], "key_id": envelope["key_id"], "mac": audit_mac(AUDIT_KEY, envelope["payload"])},
    )
    rebuilt = rebuild_state(cfg, PARTITION, _streams(steps, Stream.JOURNAL), [v1])
    assert (rebuilt.audit_seq, rebuilt.audit_head) == (1, audit_mac(AUDIT_KEY, envelope["payload"]))


def test_the_rebuild_refuses_a_checkpoint_it_cannot_vouch_for() -> None:
    cfg = checkpoint_config()
    core = SchedulerCore(cfg)
    _, steps = feed(core, initial_state(cfg, PARTITION), [(b"run-1", enc_sub()), (b"run-1", enc_close())])
    journal, audits, checkpoint = _streams(steps, Stream.JOURNAL), _streams(steps, Stream.AUDIT), steps[1][2].value
    envelope = codec.decode(checkpoint).record
    payload = codec.decode(envelope["payload"]).record
    other = Ed25519Signer.from_seed(bytes(range(1, 33)))
    forged = codec.encode(
        codec.CHECKPOINT_RECORD,
        {
            "payload": envelope["payload"],
            "key_id": other.key_id,
            "signature": other.sign(checkpoint_signing_input(envelope["payload"])),
        },
    )
    with pytest.raises(StateCorrupted, match="not signed by this scheduler's key") as caught:
        rebuild_state(cfg, PARTITION, journal, audits, checkpoint_values=[(5, forged)], checkpoints_topic="t.checkpoints")
    assert caught.value.where == f"t.checkpoints[{PARTITION}]@5"
    assert "bernstein scheduler run" not in str(caught.value)  # --quarantine is for journal offsets only
    # after the genuine checkpoint, the foreign one is named and the chain continues from the genuine one
    skipped: list[Skipped] = []
    rebuilt = rebuild_state(
        cfg,
        PARTITION,
        journal,
        audits,
        checkpoint_values=[(4, checkpoint), (5, forged)],
        checkpoints_topic="t.checkpoints",
        report=skipped.append,
    )
    assert (rebuilt.checkpoint_seq, rebuilt.checkpoint_audit_seq) == (1, 2)
    assert [str(s).split(": ")[0] for s in skipped] == [f"t.checkpoints[{PARTITION}]@5"]
    wrong_head = codec.encode(codec.PARTITION_CHECKPOINT, {**payload, "audit_head": "hmac-sha256:" + "1" * 64})
    resigned = codec.encode(
        codec.CHECKPOINT_RECORD,
        {"payload": wrong_head, "key_id": SIGNER.key_id, "signature": SIGNER.sign(checkpoint_signing_input(wrong_head))},
    )
    with pytest.raises(StateCorrupted, match="audit head"):
        rebuild_state(cfg, PARTITION, journal, audits, checkpoint_values=[resigned])
    ahead = codec.encode(codec.PARTITION_CHECKPOINT, {**payload, "audit_seq": 3})
    resigned = codec.encode(
        codec.CHECKPOINT_RECORD,
        {"payload": ahead, "key_id": SIGNER.key_id, "signature": SIGNER.sign(checkpoint_signing_input(ahead))},
    )
    with pytest.raises(StateCorrupted, match="audit chain of 2 records"):
        rebuild_state(cfg, PARTITION, journal, audits, checkpoint_values=[resigned])


# ---------------------------------------------------------------------------
# both cores
# ---------------------------------------------------------------------------


def _mixed_inputs() -> list[tuple[bytes, bytes]]:
    values: list[tuple[bytes, bytes]] = []
    for run in range(3):
        run_id = f"run-{run}"
        values += [(run_id.encode(), enc_sub(run_id=run_id, stage_id=f"s{i}", pages=[f"{run} {i}".encode()])) for i in range(3)]
        values.append((run_id.encode(), enc_close(run_id)))
        values.append((run_id.encode(), enc_sub(run_id=run_id, stage_id="late", pages=[b"late"])))  # RUN_CLOSED
    values.append((b"run-9", b"\xc3\x01" + b"\x00" * 8 + b"junk"))  # dead letter
    values.append((b"run-1", _computer_use_action()))  # handled by the reference only (a Fallback of the native core)
    values.append((b"run-1", enc_sub(run_id="run-1", stage_id="after", pages=[b"after"])))
    return values


def _computer_use_action() -> bytes:
    digest = "sha256:" + "0" * 64
    return codec.encode(
        codec.COMPUTER_USE_ACTION,
        {
            "submission_id": "cu-1",
            "run_id": "run-1",
            "session_id": "session-1",
            "action_index": 0,
            "producer": {"id": "unit@test", "sdk": "bernstein-python/0.1.0"},
            "prev_anchor": digest,
            "screenshot_hash": digest,
            "dom_digest": digest,
            "observation_hash": digest,
            "action": {"kind": "click", "target": "#go", "value_digest": ""},
            "anchor": digest,
            "lineage": {"entry": b"{}", "hmac": "", "key_id": "", "signature": b""},
            "occurred_at_ms": 1_700_000_000_500,
        },
    )


@needs_native
@pytest.mark.parametrize("every", [1, 2, 5, 1000])
def test_both_cores_write_the_same_checkpoints_and_audit_records(every: int) -> None:
    cfg = checkpoint_config(checkpoint_every=every, seal_every=2)
    values = _mixed_inputs()
    python_state, python_steps = feed(SchedulerCore(cfg), initial_state(cfg, PARTITION), values)
    native = NativeSchedulerCore(cfg, PARTITION)
    native_state, native_steps = feed(native, native.initial_state(), values)
    assert native_steps == python_steps
    assert any(o.stream is Stream.CHECKPOINTS for step in python_steps for o in step)
    exported = native_state.to_scheduler_state()
    assert (exported.checkpoint_seq, exported.checkpoint_head, exported.checkpoint_audit_seq) == (
        python_state.checkpoint_seq,
        python_state.checkpoint_head,
        python_state.checkpoint_audit_seq,
    )
    assert native.fallbacks >= 1  # the non-ASCII producer sdk goes through the reference: its checkpoint state came back


@needs_native
def test_the_native_core_continues_a_loaded_checkpoint_chain() -> None:
    cfg = checkpoint_config(checkpoint_every=2)
    values = _mixed_inputs()
    reference = SchedulerCore(cfg)
    _, expected = feed(reference, initial_state(cfg, PARTITION), values)
    half, _ = feed(reference, initial_state(cfg, PARTITION), values[:7])
    native = NativeSchedulerCore(cfg, PARTITION)
    _, rest = feed(native, copy.deepcopy(half), values[7:], start=7)
    assert rest == expected[7:]
    batch_state, batched = native.step_many(native.load(half), [record(i, v, k) for i, (k, v) in enumerate(values[7:], 7)])
    assert batched == expected[7:]
    assert batch_state.to_scheduler_state().checkpoint_seq == sum(
        1 for step in expected for o in step if o.stream is Stream.CHECKPOINTS
    )


def test_the_scheduler_command_takes_checkpoint_every(tmp_path: Path) -> None:
    from bernstein.commands.common import UsageError
    from bernstein.commands.scheduler import scheduler_config
    from bernstein.substrate.keys import init_keys

    keys = init_keys(tmp_path / "keys")
    roles = REPO / "config" / "roles.toml"
    assert scheduler_config(keys, roles, 1000).checkpoint_every == 1000
    assert scheduler_config(keys, roles, 1000, checkpoint_every=7).checkpoint_every == 7
    for bad in (0, 1001):
        with pytest.raises(UsageError, match="--checkpoint-every must be 1 to 1000"):
            scheduler_config(keys, roles, 1000, checkpoint_every=bad)
