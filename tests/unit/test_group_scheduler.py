"""``bernstein.consumers.group.GroupScheduler`` without Kafka: what it does with assignments, revocations and shells that end.

The rebalance callbacks are called as librdkafka calls them on the polling thread, with a fake
member; the shells are fakes whose ``run`` ends as told.
"""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import pytest
from confluent_kafka import TopicPartition

from bernstein.consumers import group as group_module
from bernstein.consumers.group import GroupScheduler
from bernstein.consumers.shell import SchedulerFailed, SchedulerFenced, SchedulerShell


class FakeMember:
    def __init__(self) -> None:
        self.assigned: list[int] = []
        self.paused: list[int] = []
        self.generation = 1

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += [tp.partition for tp in partitions]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused += [tp.partition for tp in partitions]

    def consumer_group_metadata(self) -> bytes:
        return b"generation %d" % self.generation


class FakeShell:
    """Runs until stopped, or ends at once with ``error``."""

    def __init__(self, partition: int, metadata: Any, still_owned: Any, error: BaseException | None = None) -> None:
        self.partition = partition
        self.metadata = metadata
        self.still_owned = still_owned
        self.error = error
        self.stopped = threading.Event()

    def run(self) -> None:
        if self.error is not None:
            raise self.error
        self.stopped.wait(10)

    def stop(self) -> None:
        self.stopped.set()


def fenced(partition: int) -> SchedulerFenced:
    return SchedulerFenced(
        f"partition {partition} is now owned by another", partition=partition, transactional_id="t", error="_FENCED"
    )


def scheduler(
    errors: dict[int, list[BaseException | None]] | None = None,
) -> tuple[GroupScheduler, list[FakeShell], list[tuple[str, str]], FakeMember]:
    shells: list[FakeShell] = []
    lines: list[tuple[str, str]] = []
    pending = {p: list(e) for p, e in (errors or {}).items()}

    def make_shell(partition: int, metadata: Any, still_owned: Any) -> SchedulerShell:
        queue = pending.get(partition) or [None]
        shell = FakeShell(partition, metadata, still_owned, queue.pop(0))
        shells.append(shell)
        return cast(SchedulerShell, shell)

    group = GroupScheduler(
        bootstrap="unused:9092",
        group_id="p.scheduler",
        input_topic="p.activity.submissions",
        make_shell=make_shell,
        log=lambda message, event, level, fields: lines.append((event, message)),
    )
    member = FakeMember()
    group._consumer = member
    return group, shells, lines, member


def tps(*partitions: int) -> list[TopicPartition]:
    return [TopicPartition("p.activity.submissions", p) for p in partitions]


def settle(group: GroupScheduler, until: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        group._tend()
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_assigned_partitions_are_paused_on_the_member_and_each_runs_a_shell_with_the_members_metadata() -> None:
    group, shells, _, member = scheduler()
    group._on_assign(member, tps(0, 2))
    assert (member.assigned, member.paused) == ([0, 2], [0, 2])
    assert sorted(s.partition for s in shells) == [0, 2] and group.partitions() == [0, 2]
    member.generation = 2
    group._on_assign(member, [])  # a rebalance that moved nothing here still brings a new generation
    assert [s.metadata() for s in shells] == [b"generation 2", b"generation 2"]
    assert all(s.still_owned() for s in shells)
    group._on_revoke(member, tps(2))
    revoked = next(s for s in shells if s.partition == 2)
    assert revoked.stopped.is_set() and not revoked.still_owned()
    assert group.partitions() == [0] and [s.partition for s in group.shells()] == [0]
    group._on_lost(member, tps(0))
    assert group.partitions() == [] and group.shells() == []


def test_a_fenced_shell_is_started_again_while_the_group_assigns_its_partition_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_module, "_RESTART_DELAY_S", 0.01)
    group, shells, lines, member = scheduler({1: [fenced(1)]})
    group._on_assign(member, tps(1))
    settle(group, lambda: len(shells) == 2)
    assert [e for e, _ in lines if e == "shell_restarting"] == ["shell_restarting"]
    assert group.failure is None and not shells[1].stopped.is_set()
    group.stop()
    shells[1].stop()


def test_a_shell_fenced_after_its_partition_was_taken_away_is_not_started_again() -> None:
    group, shells, lines, member = scheduler({1: [fenced(1)]})
    group._on_assign(member, tps(1))
    with group._lock:
        group._assigned.discard(1)  # the group moved it on before the callback came
    settle(group, lambda: group.shells() == [])
    assert len(shells) == 1 and group.failure is None


def test_a_partition_fenced_over_and_over_stops_the_process_as_fenced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_module, "_RESTART_DELAY_S", 0.001)
    group, shells, lines, member = scheduler({0: [fenced(0)] * 10})
    group._on_assign(member, tps(0))
    settle(group, lambda: group.failure is not None)
    assert group.fenced and len(shells) == group_module._FENCED_RESTARTS + 1
    assert lines[-1][0] == "fenced"


def test_a_failed_shell_fails_the_process_so_that_the_group_moves_its_partitions() -> None:
    group, shells, lines, member = scheduler({3: [SchedulerFailed("Kafka failed while recovering")]})
    group._on_assign(member, tps(3))
    settle(group, lambda: group.failure is not None)
    assert not group.fenced and isinstance(group.failure, SchedulerFailed)
    assert ("shell_failed" in [e for e, _ in lines]) and len(shells) == 1


@pytest.mark.parametrize("flag", [["--idle-exit", "1"], ["--quarantine", "5"]])
def test_group_mode_refuses_the_flags_of_one_partition_before_it_connects(
    flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from bernstein.cli import main

    code = main(["scheduler", "run", "--group", *flag])
    err = capsys.readouterr().err
    assert code == 3 and f"{flag[0]} is not available with --group" in err and "Traceback" not in err


def test_the_group_probe_is_ready_once_joined_and_every_partition_consumes() -> None:
    from bernstein.consumers.metrics import GroupProbe
    from bernstein.consumers.shell import Counters

    class Shell:
        def __init__(self, partition: int, phase: str) -> None:
            self.partition = partition
            self.counters = Counters(phase=phase)

    class Group:
        def __init__(self) -> None:
            self.heartbeat = time.monotonic()
            self.joined = False
            self.running: list[Shell] = []

        def shells(self) -> list[Shell]:
            return self.running

    group = Group()
    probe = GroupProbe(group, stall_after=5.0)
    assert probe.readiness() == (False, "joining the group")
    group.joined = True
    assert probe.readiness() == (True, "consuming")  # a member the group gave nothing is ready
    group.running = [Shell(0, "consuming"), Shell(3, "rebuilding")]
    assert probe.readiness() == (False, "p3 rebuilding")
    assert probe.health() == (True, "ok")
    group.running = [Shell(0, "consuming"), Shell(3, "stopped")]  # a revoked partition's shell stopping
    assert probe.health() == (True, "ok")
    group.running[0].counters.heartbeat -= 60
    assert probe.health()[0] is False and probe.health()[1].startswith("partition 0: stalled")
    group.heartbeat -= 60
    assert probe.health()[1].startswith("stalled: the group loop has not moved")
