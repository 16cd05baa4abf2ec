"""Bounded restart on the real (secured) broker: snapshots in <prefix>.scheduler.state, a tail fold, a tampered snapshot.

The scheduler runs over a few thousand submissions writing snapshots, is restarted and must
read only the journal tail after the newest snapshot and continue exactly as a pure fold over
every input; a snapshot edited in the state topic (produced by the admin) is rejected with a
warning and the rebuilt state equals the full fold byte for byte.
"""

from __future__ import annotations

import io
from typing import Any

from bernstein.consumers.core.model import SchedulerConfig
from bernstein.consumers.core.native import make_core
from bernstein.consumers.core.rebuild import rebuild_state
from bernstein.consumers.core.snapshot import MAGIC, Snapshot, newest_verified, state_bytes
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import Counters, SchedulerShell, ShellOptions, _stream_partition
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import InstallKeys
from tests.support.kafka import (
    encode_close,
    encode_submission,
    fold,
    fresh_topics,
    produce_all,
    read_outputs,
    read_partition,
    scheduler_config,
    stored_form,
    wait_stable,
)

OPTIONS = ShellOptions(batch_max=100, snapshot_every_transactions=4, snapshot_every_records=0)


def _inputs(first: int, count: int) -> list[tuple[bytes, bytes]]:
    items: list[tuple[bytes, bytes]] = []
    for i in range(first, first + count):
        run = f"run-{i // 50}"  # 50 inputs per run, the last closes it; runs overlap the restart
        if i % 50 == 49:
            items.append((run.encode(), encode_close(run)))
        else:
            items.append((run.encode(), encode_submission(run_id=run, stage_id=f"s{i}", pages=[f"page {i}".encode()])))
    return items


def _shell(bootstrap: str, topics: Topics, config: SchedulerConfig, core: Any) -> tuple[SchedulerShell, io.StringIO]:
    log = io.StringIO()
    shell = SchedulerShell(bootstrap=bootstrap, topics=topics, partition=0, core=core, options=OPTIONS, progress=log)
    return shell, log


def _run(bootstrap: str, topics: Topics, config: SchedulerConfig, expect: int, core: Any) -> tuple[SchedulerShell, Counters, str]:
    shell, log = _shell(bootstrap, topics, config, core)
    counters = shell.run(until=lambda c: c.consumed >= expect, idle_exit=60.0)
    assert counters.consumed == expect, log.getvalue()
    return shell, counters, log.getvalue()


def _full_fold_bytes(bootstrap: str, topics: Topics, config: SchedulerConfig) -> bytes:
    state = rebuild_state(
        config,
        0,
        _stream_partition(bootstrap, topics.journal, 0),
        _stream_partition(bootstrap, topics.audit, 0),
        checkpoint_values=_stream_partition(bootstrap, topics.checkpoints, 0),
    )
    return state_bytes(state)


def _newest(bootstrap: str, topics: Topics, config: SchedulerConfig) -> Snapshot:
    wait_stable(bootstrap, topics.state, 0)
    snapshot = newest_verified(config, 0, _stream_partition(bootstrap, topics.state, 0))
    assert snapshot is not None
    return snapshot


def test_a_restart_reads_only_the_tail_and_a_tampered_snapshot_is_rejected(
    services: Any, prefix: str, install_keys: InstallKeys
) -> None:
    bootstrap = services.bootstrap
    topics = fresh_topics(bootstrap, prefix)
    config = scheduler_config(install_keys)

    # 1. a few thousand submissions, snapshots every 4 transactions (the native core, as deployed)
    first = _inputs(0, 2520)  # run-50 is open across the restart
    produce_all(bootstrap, topics.submissions, first)
    _, counters, _ = _run(bootstrap, topics, config, len(first), make_core(config, 0))
    assert counters.snapshots >= 3 and counters.rebuild_snapshot == -1
    snapshot = _newest(bootstrap, topics, config)
    journal = read_partition(bootstrap, topics, "journal")
    journal_end = journal[-1].offset + 1  # offsets count the transaction markers too
    assert 0 < snapshot.positions.journal_next <= journal_end

    # 2. restart with more input: the rebuild starts at the newest snapshot and reads only the tail
    second = _inputs(2520, 480)
    produce_all(bootstrap, topics.submissions, second)
    shell, counters, log = _run(bootstrap, topics, config, len(second), SchedulerCore(config))
    assert counters.rebuild_snapshot == snapshot.positions.input_next, log
    tail = sum(
        1 for r in read_partition(bootstrap, topics, "journal") if snapshot.positions.journal_next <= r.offset < journal_end
    )
    assert counters.rebuild_journal_records == tail < len(journal) // 4
    assert "state rebuilt from the snapshot at input offset" in log
    # ... and continues exactly: every output equals the pure fold over every input
    inputs = read_partition(bootstrap, topics, "submissions")
    expected = fold(config, inputs)
    outputs = read_outputs(bootstrap, topics)
    for stream, outs in expected.items():
        assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in outputs[stream]] == [stored_form(o) for o in outs], stream
    full = _full_fold_bytes(bootstrap, topics, config)
    assert state_bytes(SchedulerShell._plain(shell._state)) == full

    # 3. the admin edits the newest snapshot (a new record under its key): rejected with a warning,
    #    the rebuild falls back to the genuine snapshot before it, and the state is the full fold's
    genuine = _newest(bootstrap, topics, config)
    values = list(_stream_partition(bootstrap, topics.state, 0))
    _, value = values[-1]
    assert value.startswith(MAGIC)
    edited = bytearray(value)
    edited[-3] ^= 0x01
    (offset,) = produce_all(bootstrap, topics.state, [(b"0", bytes(edited))])
    shell, counters, log = _run(bootstrap, topics, config, 0, SchedulerCore(config))
    assert f"scheduler state snapshot@{offset}: its MAC does not verify" in log, log
    assert counters.rebuild_snapshot == genuine.positions.input_next
    assert state_bytes(SchedulerShell._plain(shell._state)) == full
