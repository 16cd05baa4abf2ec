"""``audit follow``'s state machine, tested as one.

Hypothesis drives random sequences of: a follower started (following, or ``--once``) that resumes from its state
directory, loop rounds, a clean stop, kill -9, a group rebalance, the checkpoint writer catching up, the wall
clock moving, submissions arriving while the scheduler runs or is stopped (a restarted scheduler continues its
chain; a stopped one leaves ``scheduler_silent``/``run_unsealed`` due), and real tampering. The follower is the
real ``Follower.run`` loop on a thread that the test lets go round one iteration at a time (lock-step, so every
run is deterministic), over an in-memory Kafka (``tests/support/follow_fake.py``); records are the ones the scheduler
writes (``tests/support/audit_forge.py``). The examples come from a fixed seed (the ``reproducible`` profile of
``tests/conftest.py``: ``derandomize``), a bounded number of them, so ``make test`` gives the same verdict each run.

Kill -9 is modelled at the top of a loop round (where the follower has flushed its latches, and its checkpoint
saves may be queued): any prefix of the queued saves reaches the disk (each write is atomic, in order), the
rest is lost, and nothing of that process runs again. A crash inside a round is no different for what is on
disk: the latches of a round are written before its checkpoint is queued.

Tampering happens on partition 1 only, so that every example also checks a clean partition (0): appended
forgeries (a MAC that does not recompute, or made with a key nobody pinned), records by someone with the key
that skip a seq (a record deleted before anyone read it) or link to a record that is not their predecessor,
a replay, a record copied from partition 0, and, while no follower runs (a topic is rewritten by deleting and
re-creating it), a record edited in place (often the one the checkpoint names), or records deleted from the
middle or the end.

Invariants (checked as they happen, at every loop round and after every stop or kill):

* no tamper-class alert (``latch.TAMPER``) and no latch on a partition that was not tampered with; a
  ``history_rewritten`` only when the record the checkpoint on disk names has changed or vanished, and always then;
* once the follower has read a record that is not what the scheduler wrote, the partition's latch file holds a
  latch (no acks here: a latch is never cleared);
* every offset is checked exactly once, in order: a run starts after the record its checkpoint on disk names
  (at 0 without one, or after a rewritten history) and never re-checks or skips one; only the records checked
  after the last checkpoint that reached the disk before a kill are checked again; the ``checked`` progress
  ranges (printed once a checkpoint is on disk) follow each other without overlap or hole;
* a clean stop leaves the checkpoint on the last record checked, nothing queued, and a ``--once`` run checks
  every record up to the end it pinned; a following run that is let go round catches up with every partition;
  partitions handed back after a rebalance resume where they were;
* a time-based alert (``run_unsealed`` of a run, ``scheduler_silent``) is not raised again by a later run for
  what a clean stop or a revocation saved (after a kill it may be);
* a checkpoint on disk always pins the value of the record at its offset (never the digest of nothing: the
  false ``history_rewritten`` after a time-based alert on resume);
* a latch counts each finding once (distinct alert lines), also when a kill or a rewritten history makes the
  follower check records again.
"""

from __future__ import annotations

import json
import queue
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bernstein.schemas.canonical import audit_genesis, hmac_key_id
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.facts import A_RECORD
from bernstein.verifier.follow.alerts import Alert, AlertKind
from bernstein.verifier.follow.checker import Policy
from bernstein.verifier.follow.checkpoint import CheckpointStore, value_digest
from bernstein.verifier.follow.consumer import Follower, FollowOptions
from bernstein.verifier.follow.latch import TAMPER, AckLog, LatchStore, PartitionLatches, acknowledge
from tests.support.audit_forge import edited, entry, genuine, parts
from tests.support.follow_fake import Cluster, ControlledWriter, Entry, FakeConsumer

SECRET = bytes(range(32))
KEY = hmac_key_id(SECRET)
STRANGER = bytes(range(1, 33))
"""An audit key nobody pinned."""
TOPICS = Topics("sm")
PARTITIONS = 2
TAMPERED = 1
"""The partition tampering happens on (the other one stays clean in every example)."""
T0 = 1_700_000_000_000
POLICY = Policy(refusal_burst=3, refusal_window_ms=10_000, unsealed_after_ms=10_000, silent_after_ms=5_000)
EVENTS = ["activity.result", "activity.result", "run.sealed", "activity.refused", "input.deadletter"]
TAMPERING = [
    *["forge", "stranger", "gap", "unlinked", "replay", "copy", "edit", "delete", "truncate"],
    *["edit-checked", "delete-checked"] * 2,
]
"""How partition ``TAMPERED`` is tampered with (``-checked``: the record its checkpoint names, else any; drawn
more often: a rewritten checkpoint record is what resuming must notice)."""
REWRITES = {"edit", "edit-checked", "delete", "delete-checked", "truncate"}
"""Tampering that rewrites the topic: only while no follower runs (a topic is deleted and re-created)."""
MAX_ROUNDS = 200
"""Loop rounds a following run gets to catch up, a ``--once`` run to finish (far more than either needs)."""


class _Killed(BaseException):
    """Ends the thread of a killed follower at teardown (before that, it never runs again)."""


class _Follower(Follower):
    """The real follower, over the in-memory Kafka and with the test's checkpoint writer."""

    def __init__(self, cluster: Cluster, batch: int, opening: Callable[[int], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._writer.close()  # the real writer's thread: replaced by a queue the test drains
        self.writer = ControlledWriter(self.options.store)
        self._writer = self.writer
        self.fake = FakeConsumer(cluster, batch)
        self._opening = opening

    def _make_consumer(self, *, group: bool = True) -> Any:
        return self.fake

    def _open(self, partition: int) -> int:
        self._opening(partition)  # the model looks at the state directory and the log as the follower will
        return super()._open(partition)


class _Runner:
    """``Follower.run`` on a thread, let go round one loop iteration at a time by the test's thread.

    ``run`` calls ``stop()`` at the top of every iteration; there the follower's thread reports and waits for
    the next command, so the two threads never run at once and every callback runs while the test waits."""

    def __init__(self, follower: _Follower) -> None:
        self.follower = follower
        self._commands: queue.Queue[str] = queue.Queue()
        self._reports: queue.Queue[tuple[str, BaseException | None]] = queue.Queue()
        self.thread = threading.Thread(target=self._main, name="follower-under-test", daemon=True)
        self.thread.start()
        self.where = self._wait()

    def _stop(self) -> bool:
        self._reports.put(("top", None))
        command = self._commands.get()
        if command == "die":
            raise _Killed
        return command == "stop"

    def _main(self) -> None:
        try:
            self.follower.run(self._stop)
        except _Killed:
            self._reports.put(("killed", None))
        except BaseException as exc:  # handed to the test's thread
            self._reports.put(("error", exc))
        else:
            self._reports.put(("done", None))

    def _wait(self) -> str:
        self.where, exc = self._reports.get(timeout=60)
        if exc is not None:
            raise exc
        return self.where

    def round(self) -> str:
        """One loop iteration; "top" (waiting again) or "done" (``--once`` finished)."""
        assert self.where == "top"
        self._commands.put("go")
        self.where = self._wait()
        return self.where

    def stop(self) -> None:
        assert self.where == "top"
        self._commands.put("stop")
        self.where = self._wait()
        assert self.where == "done"
        self.thread.join()

    def bury(self) -> None:
        """End the thread of a killed (or failed) follower without letting it do anything more."""
        if self.where == "top":
            self._commands.put("die")
            self._wait()
        self.thread.join(timeout=60)


@dataclass
class _Chain:
    """What the scheduler of one partition keeps: its chain head and the submissions it has turned into records."""

    seq: int
    head: str
    processed: int = 0
    skip: int = 0
    """Seqs its next record skips (tampering: records deleted before anyone read them)."""
    next_bad: str | None = None
    """How its next record was tampered with (it skips seqs, or links to another record): marked ``bad``."""


class FollowerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="follow-sm-"))
        self.state_dir = self.tmp / "state"
        self.store = CheckpointStore(self.state_dir)
        self.latch_store = LatchStore(self.state_dir)
        self.now = T0
        self.cluster = Cluster(
            {TOPICS.audit: [[] for _ in range(PARTITIONS)], TOPICS.submissions: [[] for _ in range(PARTITIONS)]}
        )
        self.chains = [_Chain(0, audit_genesis(SECRET, p)) for p in range(PARTITIONS)]
        self.backlog: list[list[tuple[int, str, str]]] = [[] for _ in range(PARTITIONS)]
        self.scheduler_up = True
        self.forgeries = 0
        self.trusted = TrustedKeys(hmac={KEY: SECRET})
        # the follower and what the model expects of it
        self.runner: _Runner | None = None
        self.once = False
        self.zombies: list[_Runner] = []
        self.tampered = [False] * PARTITIONS
        self.read_bad = [False] * PARTITIONS
        self.findings: list[dict[AlertKind, set[str]]] = [{} for _ in range(PARTITIONS)]
        """Distinct tamper alert lines raised per partition and kind (what a latch may count)."""
        self.printed_last = [-1] * PARTITIONS
        self.next_expected = [0] * PARTITIONS
        self.checkpoint_valid = [True] * PARTITIONS
        self.rewritten: set[int] = set()
        """Partitions whose history was reported rewritten since the follower opened them."""
        self.opened: set[int] = set()
        """Partitions the running follower has opened."""
        self.pinned_end = [0] * PARTITIONS
        self.events: list[str] = []
        """What happened on the follower's thread, for ``--hypothesis-show-statistics``."""
        self.unsealed_alerted: list[set[str]] = [set() for _ in range(PARTITIONS)]
        self.silent_alerted = [False] * PARTITIONS
        """Time-based alerts raised and saved with the chain state, so that no run raises them again."""

    def teardown(self) -> None:
        try:
            for runner in [*self.zombies, *([self.runner] if self.runner is not None else [])]:
                runner.bury()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the scheduler and the topics ----------------------------------------------------------------

    def _log(self, partition: int) -> list[Entry]:
        return self.cluster.log(TOPICS.audit, partition)

    def _append(self, partition: int, value: bytes, *, bad: str | None = None, chain: bool = False) -> None:
        self._log(partition).append(Entry(value, self.now, bad, chain))
        if bad is not None:
            self._tampered(partition)

    def _tampered(self, partition: int) -> None:
        assert partition == TAMPERED
        self.tampered[partition] = True

    def _process(self, partition: int) -> None:
        """The running scheduler writes the audit record of every submission waiting (in one transaction each)."""
        chain = self.chains[partition]
        for offset, event_, run_id in self.backlog[partition][chain.processed :]:
            seq = chain.seq + chain.skip
            value, mac = genuine(SECRET, KEY, entry(partition, seq, chain.head, event=event_, run_id=run_id, input_offset=offset))
            self._append(partition, value, bad=chain.next_bad, chain=True)
            chain.seq, chain.head, chain.skip, chain.next_bad = seq + 1, mac, 0, None
            chain.processed += 1

    @rule(
        partition=st.integers(0, PARTITIONS - 1),
        inputs=st.lists(st.tuples(st.sampled_from(EVENTS), st.sampled_from(["run-a", "run-b"])), min_size=1, max_size=4),
    )
    def submit(self, partition: int, inputs: list[tuple[str, str]]) -> None:
        """Submissions arrive (``(event, run id)`` each: what the scheduler makes of it); a running scheduler
        writes their audit records."""
        submissions = self.cluster.log(TOPICS.submissions, partition)
        for event_, run_id in inputs:
            self.backlog[partition].append((len(submissions), event_, run_id))
            submissions.append(Entry(b"submission", self.now))
        if self.scheduler_up:
            self._process(partition)

    @precondition(lambda self: self.scheduler_up)
    @rule()
    def scheduler_stops(self) -> None:
        self.scheduler_up = False

    @precondition(lambda self: not self.scheduler_up)
    @rule()
    def scheduler_restarts(self) -> None:
        """It continues its chains from where they are and writes the records of what waited meanwhile."""
        self.scheduler_up = True
        for partition in range(PARTITIONS):
            self._process(partition)

    @rule(ms=st.sampled_from([400, 3_000, 6_000, 15_000]))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule(how=st.sampled_from(TAMPERING), where=st.integers(0, 1_000), count=st.integers(1, 3))
    def tamper(self, how: str, where: int, count: int) -> None:
        """Real tampering on partition ``TAMPERED``. A record is marked ``bad`` when reading it must raise a
        tamper-class alert whatever the follower read before; the rest of what tampering makes wrong (a
        rewritten record the checkpoint names) has its own invariant."""
        log = self._log(TAMPERED)
        chain = self.chains[TAMPERED]
        if how in REWRITES and self.runner is not None:
            how = "forge"  # the topic cannot be rewritten under a running consumer; append a forgery instead
        if how.endswith("-checked"):
            checkpoint = self.store.load(TOPICS.audit, TAMPERED)
            if checkpoint is not None and log:
                where = min(checkpoint.offset, len(log) - 1)
            how = how.removesuffix("-checked")
        if how == "forge":  # the next record, edited without the key (its MAC no longer recomputes)
            value, _ = genuine(SECRET, KEY, entry(TAMPERED, chain.seq, chain.head, input_offset=chain.processed))
            self.forgeries += 1
            self._append(TAMPERED, edited(value, run_id=f"run-evil-{self.forgeries}"), bad=how)
        elif how == "stranger":  # MACed with a key the trusted keys do not pin
            fields = entry(TAMPERED, chain.seq, chain.head, input_offset=chain.processed)
            self._append(TAMPERED, genuine(STRANGER, hmac_key_id(STRANGER), fields)[0], bad=how)
        elif how in ("gap", "unlinked"):  # by someone with the key: a seq deleted before anyone read it, or a
            chain.next_bad = how  # record linked to one that is not its predecessor; the scheduler goes on after it
            if how == "gap":
                chain.skip = 1
            else:
                chain.head = "hmac-sha256:" + "0" * 64
            if self.scheduler_up:
                self.submit(TAMPERED, [("activity.result", "run-a")])
        elif how == "replay" and log:  # out of order: every seq comes after its original (none is ever ahead)
            self._append(TAMPERED, log[where % len(log)].value, bad=how)
        elif how == "copy" and self._log(0):  # a genuine record of partition 0
            source = self._log(0)
            self._append(TAMPERED, source[where % len(source)].value, bad=how)
        elif how == "edit" and log:
            target = log[where % len(log)]
            self.forgeries += 1
            fields, _, _ = parts(target.value)
            target.value = edited(target.value, stage_id=f"{fields['stage_id']}-edited-{self.forgeries}")
            target.bad = how
            self._tampered(TAMPERED)
        elif how in ("delete", "truncate") and log:
            for record in log:  # a replay may now stand where its deleted original was: in order after all
                if record.bad == "replay":
                    record.bad = None
            start = where % len(log) if how == "delete" else max(0, len(log) - count)
            removed = log[start : start + count]
            del log[start : start + count]
            self._tampered(TAMPERED)
            if any(record.chain for record in removed):  # the next record of the chain skips their seqs
                if start == len(log):
                    chain.next_bad = how
                elif log[start].chain and log[start].bad is None:
                    log[start].bad = how

    # -- the follower ------------------------------------------------------------------------------------

    def _emit(self, alert: Alert) -> None:
        """Every alert, as it is raised (on the follower's thread, while the test waits)."""
        partition = alert.partition
        self.events.append(f"alert {alert.kind.value}")  # (hypothesis.event is for the test's thread)
        if alert.kind in TAMPER:
            assert self.tampered[partition], f"a tamper-class alert without tampering: {alert.line()}"
            self.findings[partition].setdefault(alert.kind, set()).add(alert.line())
        if alert.kind is AlertKind.HISTORY_REWRITTEN:
            assert not self.checkpoint_valid[partition], (
                f"history_rewritten, but the checkpoint's record is there: {alert.line()}"
            )
            assert partition not in self.rewritten, "history_rewritten twice for one checkpoint"
            self.rewritten.add(partition)
            self.next_expected[partition] = 0  # checked again from the start
            self.printed_last[partition] = -1
            self.unsealed_alerted[partition].clear()
            self.silent_alerted[partition] = False
        elif alert.kind is AlertKind.RUN_UNSEALED:
            run_id = alert.extra["run_id"]
            assert run_id not in self.unsealed_alerted[partition], f"run_unsealed again, the run not sealed since: {alert.line()}"
            self.unsealed_alerted[partition].add(run_id)
        elif alert.kind is AlertKind.SCHEDULER_SILENT:
            assert not self.silent_alerted[partition], f"scheduler_silent again, no record read since: {alert.line()}"
            self.silent_alerted[partition] = True

    def _on_record(self, partition: int, offset: int, fact: tuple[Any, ...], alerts: list[Alert]) -> None:
        expected = self.next_expected[partition]
        assert offset == expected, f"partition {partition}: checked offset {offset}, expected {expected} (re-checked or skipped)"
        self.next_expected[partition] = offset + 1
        if self._log(partition)[offset].bad is not None:
            self.read_bad[partition] = True
        self.silent_alerted[partition] = False  # (a record that moves the chain does; a bad one may not: weaker)
        if fact[0] == A_RECORD and fact[7] == "run.sealed":
            self.unsealed_alerted[partition].discard(fact[8])

    def _progress(self, line: dict[str, Any]) -> None:
        if line["event"] != "checked":
            return
        partition = line["partition"]
        assert line["first_offset"] == self.printed_last[partition] + 1, (
            f"saved ranges overlap or leave a hole: {line} after {self.printed_last}"
        )
        assert line["records"] == line["last_offset"] - line["first_offset"] + 1, line
        self.printed_last[partition] = line["last_offset"]

    @precondition(lambda self: self.runner is None)
    @rule(
        once=st.booleans(),
        batch=st.integers(1, 4),
        save_every_round=st.booleans(),
        tick_every_round=st.booleans(),
    )
    def start(self, once: bool, batch: int, save_every_round: bool, tick_every_round: bool) -> None:
        """A follower process starts on the state directory (``checkpoint_every``/``tick_every``: every loop
        round, or never but at the end)."""
        for partition in range(PARTITIONS):  # (a partition it never opens keeps what is on disk)
            checkpoint = self.store.load(TOPICS.audit, partition)
            self.next_expected[partition] = checkpoint.offset + 1 if checkpoint is not None else 0
        self.opened = set()
        self.once = once
        options = FollowOptions(
            bootstrap="in-memory",
            topics=TOPICS,
            store=self.store,
            group="sm.audit-follow",
            once=once,
            policy=POLICY,
            checkpoint_every=0.0 if save_every_round else 1e9,
            tick_every=0.0 if tick_every_round else 1e9,
        )
        follower = _Follower(
            self.cluster,
            batch,
            self._opening,
            options,
            lambda: self.trusted,
            self._emit,
            on_record=self._on_record,
            progress=self._progress,
            clock=lambda: self.now / 1000,
        )
        self.runner = _Runner(follower)
        self._after_round()

    def _opening(self, partition: int) -> None:
        """The follower opens a partition (at its start; again after a rebalance): from the checkpoint on disk."""
        checkpoint = self.store.load(TOPICS.audit, partition)
        log = self._log(partition)
        resume = checkpoint.offset + 1 if checkpoint is not None else 0
        if partition in self.opened:  # handed back after a revocation, which saved all it had checked
            assert self.next_expected[partition] == resume, (
                f"partition {partition} handed back at {resume}, but checked up to {self.next_expected[partition] - 1}"
            )
        self.opened.add(partition)
        self.checkpoint_valid[partition] = checkpoint is None or (
            checkpoint.offset < len(log) and value_digest(log[checkpoint.offset].value) == checkpoint.value_sha256
        )
        self.rewritten.discard(partition)
        self.next_expected[partition] = resume
        self.pinned_end[partition] = len(log)
        if checkpoint is None:  # nothing saved what a run before raised (no record was checked)
            self.unsealed_alerted[partition].clear()
            self.silent_alerted[partition] = False

    def _after_round(self) -> None:
        runner = self.runner
        assert runner is not None
        if runner.where == "done":
            self._finished(by_itself=True)
            return
        for partition, entry_ in runner.follower.partitions.items():
            if entry_.resume is None and not self.checkpoint_valid[partition]:
                assert partition in self.rewritten, f"partition {partition} resumed past a rewritten record silently"

    def _finished(self, *, by_itself: bool) -> None:
        """The run ended cleanly: stopped, or (``by_itself``) ``--once`` at the end it pinned."""
        runner = self.runner
        assert runner is not None
        runner.thread.join()
        if by_itself:
            assert self.once
            for partition in range(PARTITIONS):
                assert self.next_expected[partition] == self.pinned_end[partition], (
                    f"--once ended on partition {partition} at {self.next_expected[partition]}, "
                    f"its end was {self.pinned_end[partition]}"
                )
        assert runner.follower.writer.pending == [], "a clean stop left checkpoint saves unwritten"
        for partition in range(PARTITIONS):
            checkpoint = self.store.load(TOPICS.audit, partition)
            saved = checkpoint.offset if checkpoint is not None else -1
            assert saved == self.next_expected[partition] - 1, (
                f"partition {partition}: checked up to {self.next_expected[partition] - 1}, the checkpoint says {saved}"
            )
            assert self.printed_last[partition] == saved, (partition, self.printed_last, saved)
        self.runner = None

    @precondition(lambda self: self.runner is not None)
    @rule(rounds=st.integers(1, 4))
    def go_round(self, rounds: int) -> None:
        for _ in range(rounds):
            if self.runner is None:  # (--once ended by itself)
                return
            self.runner.round()
            self._after_round()

    @precondition(lambda self: self.runner is not None)
    @rule()
    def catch_up(self) -> None:
        """Let the follower go round until it has checked everything (following) or finished (``--once``)."""
        runner = self.runner
        assert runner is not None
        for _ in range(MAX_ROUNDS):
            if not self.once and all(
                self.next_expected[p] == len(self._log(p))
                and p in runner.follower.partitions
                and runner.follower.partitions[p].resume is None
                for p in range(PARTITIONS)
            ):
                return
            runner.round()
            self._after_round()
            if self.runner is None:
                return
        raise AssertionError(f"the follower did not catch up in {MAX_ROUNDS} rounds: {self.next_expected}")

    @precondition(lambda self: self.runner is not None)
    @rule()
    def stop(self) -> None:
        """SIGTERM: the loop's clean-stop path (final save, tick, save, flush)."""
        runner = self.runner
        assert runner is not None
        runner.stop()
        self._finished(by_itself=False)

    @precondition(lambda self: self.runner is not None)
    @rule(rounds=st.integers(0, 6), written=st.integers(0, 3))
    def kill(self, rounds: int, written: int) -> None:
        """kill -9 after ``rounds`` more loop rounds, at the top of one: ``written`` of the checkpoint saves queued
        reached the disk."""
        self.go_round(rounds)
        runner = self.runner
        if runner is None:  # (--once ended by itself)
            return
        self.events.append(f"kill with {len(runner.follower.writer.pending)} save(s) queued, {written} written")
        runner.follower.writer.kill(written)
        runner.follower.fake.dead = True
        self.zombies.append(runner)
        self.runner = None
        for partition in range(PARTITIONS):  # the checkpoints that saved them may be lost: they may come again
            self.unsealed_alerted[partition].clear()
            self.silent_alerted[partition] = False

    @precondition(lambda self: self.runner is not None)
    @rule(count=st.integers(1, 3))
    def disk_catches_up(self, count: int) -> None:
        """The checkpoint writer's thread writes some of what is queued."""
        assert self.runner is not None
        self.runner.follower.writer.write(count)

    @precondition(lambda self: self.runner is not None and not self.once)
    @rule()
    def rebalance(self) -> None:
        """The group takes the partitions away and hands them back (a member came or went)."""
        assert self.runner is not None
        self.runner.follower.fake.rebalance()
        for partition in range(PARTITIONS):
            if self.store.load(TOPICS.audit, partition) is None:  # nothing to save a silence in: it starts again
                self.silent_alerted[partition] = False

    # -- what holds after every step ---------------------------------------------------------------------

    @invariant()
    def statistics(self) -> None:
        for name in self.events:
            event(name)
        self.events.clear()

    @invariant()
    def checkpoints_pin_the_records_they_name(self) -> None:
        for partition in range(PARTITIONS):
            checkpoint = self.store.load(TOPICS.audit, partition)
            if checkpoint is None or self.tampered[partition]:
                continue
            log = self._log(partition)
            assert checkpoint.offset < len(log)
            assert checkpoint.value_sha256 == value_digest(log[checkpoint.offset].value), (
                f"the checkpoint of partition {partition} does not pin its record at offset {checkpoint.offset}"
            )

    @invariant()
    def latches_are_held_exactly_after_tampering_read(self) -> None:
        for partition in range(PARTITIONS):
            held = self.latch_store.load(TOPICS.audit, partition).held
            if not self.tampered[partition]:
                assert not held, f"partition {partition} is latched without tampering: {list(held)}"
            if self.read_bad[partition]:
                assert held, f"partition {partition}: a tampered record was read and nothing is latched"
            for kind, latch in held.items():
                distinct = len(self.findings[partition].get(kind, ()))
                assert latch.findings == distinct, f"the {kind.value} latch counts {latch.findings} findings of {distinct}"
        if self.runner is not None:
            for partition, latches in self.runner.follower.latches.items():
                assert bool(latches.held) == bool(self.latch_store.load(TOPICS.audit, partition).held)


FollowerMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    report_multiple_bugs=False,  # shrink one failure, not each: a failing run reports within minutes
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
test_follower_state_machine = FollowerMachine.TestCase


# -- regressions: sequences the machine found (or that the usability review reported), replayed step by step -------------


@contextmanager
def _replayed(*steps: Callable[[FollowerMachine], object]) -> Iterator[FollowerMachine]:
    """A fresh machine that ran ``steps``, the invariants checked after each as Hypothesis would; torn down after."""
    machine = FollowerMachine()
    try:
        for step in steps:
            step(machine)
            machine.checkpoints_pin_the_records_they_name()
            machine.latches_are_held_exactly_after_tampering_read()
        yield machine
    finally:
        machine.teardown()


def _start(once: bool, *, every_round: bool = False) -> Callable[[FollowerMachine], object]:
    return lambda m: m.start(once=once, batch=1, save_every_round=every_round, tick_every_round=every_round)


def test_a_finding_checked_again_from_the_start_after_a_rewrite_is_counted_once() -> None:
    """Found by the machine: after ``history_rewritten`` the partition is checked again from its start, and the
    forgery at offset 0 raised ``mac_mismatch`` a second time, which the latch counted as a second finding (it
    compared the alert with the latest finding only)."""
    with _replayed(
        lambda m: m.scheduler_stops(),
        lambda m: m.tamper("forge", 0, 1),
        _start(once=False),
        lambda m: m.tamper("forge", 0, 1),
        lambda m: m.catch_up(),
        lambda m: m.stop(),
        lambda m: m.tamper("edit-checked", 0, 1),  # the record the checkpoint names, edited in place
        _start(once=False),
        lambda m: m.catch_up(),
        lambda m: m.stop(),
    ) as machine:
        held = machine.latch_store.load(TOPICS.audit, TAMPERED).held
        assert sorted(held) == [AlertKind.HISTORY_REWRITTEN, AlertKind.MAC_MISMATCH]
        assert held[AlertKind.MAC_MISMATCH].findings == 3  # offset 0, offset 1 as first read, offset 1 as edited


def test_the_records_a_kill_makes_the_follower_check_again_are_not_new_findings() -> None:
    """kill -9 with checkpoint saves queued: the records after the last one on disk are checked again and raise
    the same alerts, which neither add to the latch nor latch again what an operator acknowledged meanwhile."""
    with _replayed(
        lambda m: m.tamper("forge", 0, 1),
        lambda m: m.tamper("forge", 0, 1),
        _start(once=False, every_round=True),
        lambda m: m.catch_up(),
        lambda m: m.kill(rounds=0, written=0),
        _start(once=False, every_round=True),
        lambda m: m.catch_up(),
    ) as machine:
        latches = machine.latch_store.load(TOPICS.audit, TAMPERED)
        assert latches.held[AlertKind.MAC_MISMATCH].findings == 2
        ack = acknowledge(latches, AlertKind.MAC_MISMATCH, by="alice", reason="INC-1", now_ms=T0, log=[])
        AckLog(machine.state_dir).append(ack)
        machine.go_round(2)  # a tick reads the ack log, the next round writes the latch file
        assert machine.latch_store.load(TOPICS.audit, TAMPERED).held == {}
        machine.kill(rounds=0, written=0)  # before the checkpoint past the forgeries is on disk
        _start(once=False)(machine)
        machine.catch_up()
        machine.stop()
        assert machine.latch_store.load(TOPICS.audit, TAMPERED).held == {}  # checked again: nothing new
        assert [a for a in machine.events if a == "alert mac_mismatch"] == ["alert mac_mismatch"] * 6


@pytest.mark.parametrize(
    "quiet",
    [
        # a run left open: run_unsealed on resume, before any new record is read
        [lambda m: m.submit(0, [("activity.result", "run-a")])],
        # the scheduler stopped with a submission waiting: scheduler_silent on resume
        [lambda m: m.submit(0, [("run.sealed", "run-a")]), lambda m: m.scheduler_stops()],
    ],
    ids=["run_unsealed", "scheduler_silent"],
)
def test_a_time_based_alert_on_resume_keeps_the_checkpoint_on_its_record(
    quiet: list[Callable[[FollowerMachine], object]],
) -> None:
    """Usability review B1: resumed from its checkpoint, the follower raised a time-based alert before it
    read a record, saved its checkpoint with the digest of empty bytes, and the next start reported a false
    ``history_rewritten`` and checked the partition again from its start."""
    waiting: list[Callable[[FollowerMachine], object]] = [lambda m: m.submit(0, [("activity.result", "run-b")])]
    with _replayed(
        *quiet,
        _start(once=True),
        lambda m: m.catch_up(),
        *(waiting if len(quiet) > 1 else []),
        lambda m: m.time_passes(15_000),
        _start(once=False, every_round=True),
        lambda m: m.go_round(2),
        lambda m: m.stop(),
        _start(once=True),
        lambda m: m.catch_up(),
        _start(once=False),
        lambda m: m.catch_up(),
        lambda m: m.stop(),
    ) as machine:
        assert "alert history_rewritten" not in machine.events


def test_a_latch_counts_a_finding_once_across_acks_and_in_its_file() -> None:
    """What the two regressions above rest on, in ``PartitionLatches`` alone (and a latch file from before ``seen``)."""

    def mac_mismatch(offset: int) -> Alert:
        return Alert(AlertKind.MAC_MISMATCH, TOPICS.audit, 0, offset, f"seq {offset}: forged", {"seq": offset})

    latches = PartitionLatches(TOPICS.audit, 0)
    assert latches.latch(mac_mismatch(7), T0) is not None
    assert latches.latch(mac_mismatch(9), T0) is None and latches.latch(mac_mismatch(7), T0) is None
    assert latches.held[AlertKind.MAC_MISMATCH].findings == 2  # 7 again is not a third finding
    ack = acknowledge(latches, AlertKind.MAC_MISMATCH, by="alice", reason="INC-1", now_ms=T0, log=[])
    assert latches.acknowledge(ack, T0) is not None
    stored = json.loads(json.dumps(latches.to_json()))
    again = PartitionLatches.from_json(stored)
    assert again.seen == latches.seen and again.latch(mac_mismatch(9), T0) is None and again.held == {}
    assert again.latch(mac_mismatch(11), T0) is not None  # a new finding latches again
    before = again.to_json()
    del before["seen"]  # as written before findings were remembered: the latch's own findings are known
    old = PartitionLatches.from_json(before)
    assert old.latch(mac_mismatch(11), T0) is None and old.held[AlertKind.MAC_MISMATCH].findings == 1
