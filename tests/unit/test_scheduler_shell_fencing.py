"""The shell's reading of Kafka errors: which mean "another instance owns the partition", and what it says then.

No broker: the shell is built but never started; its producer is a stand-in.
The behaviour against the real broker is tests/integration/test_scheduler_fencing.py.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from bernstein import cli
from bernstein.commands.common import without_endpoint_line
from bernstein.commands.scheduler import EXIT_FENCED, supervised_exit
from bernstein.consumers.core.model import DEFAULT_MAX_OUTPUT_BYTES, OUTPUT_FRAMING_ALLOWANCE, SchedulerConfig
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import (
    SchedulerFailed,
    SchedulerFenced,
    SchedulerShell,
    _Abort,
    _AwakeClock,
    _TxnCaller,
    _TxnCallStuck,
)
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import init_keys
from tests.support.roles import ROLES


@pytest.fixture
def shell(tmp_path: Path) -> SchedulerShell:
    keys = init_keys(tmp_path / "keys")
    config = SchedulerConfig(roles=ROLES, signer=keys.signer, audit_key=keys.audit.secret, audit_key_id=keys.audit.key_id)
    return SchedulerShell(bootstrap="unused:9", topics=Topics("unit"), partition=3, core=SchedulerCore(config), progress=None)


class FatalProducer:
    """A producer that already failed fatally: every transactional call answers with ``cause``."""

    def __init__(self, cause: int) -> None:
        self.cause = cause

    def abort_transaction(self, timeout: float) -> None:
        raise KafkaException(KafkaError(self.cause, "fenced by newer producer instance", fatal=True))


OWNED = "partition 3 is now owned by another scheduler instance (transactional id unit.scheduler.p3); this instance stops"


@pytest.mark.parametrize(
    "code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.FENCED_INSTANCE_ID]
)
def test_a_fencing_error_stops_the_instance_with_a_message_naming_partition_and_transactional_id(
    shell: SchedulerShell, code: int
) -> None:
    shell._producer = FatalProducer(code)
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(code, "x", fatal=True)))
    name = KafkaError(code).name()
    assert raised.value.message == f"{OWNED} ({name}: nothing more was committed by it)"
    assert (raised.value.partition, raised.value.transactional_id, raised.value.error) == (3, "unit.scheduler.p3", name)
    assert raised.value.code == "E_SCHEDULER_FENCED"
    assert shell._producer is None  # never flushed, aborted or reused


def test_produce_on_a_fenced_producer_says_only_fatal_and_the_cause_is_asked_for(shell: SchedulerShell) -> None:
    shell._producer = FatalProducer(KafkaError._FENCED)
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error")))
    assert raised.value.error == "_FENCED"


def test_a_fatal_error_that_is_not_fencing_is_left_to_the_recovery(shell: SchedulerShell) -> None:
    shell._producer = FatalProducer(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER)
    shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._FATAL)))
    shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    shell._raise_if_fenced(KafkaException("not a KafkaError"))
    assert shell._producer is not None


def test_the_broker_refusing_the_transactional_id_says_so(shell: SchedulerShell) -> None:
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))
    assert raised.value.message == (
        "partition 3: the broker does not let this instance use transactional id unit.scheduler.p3 "
        "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); this instance stops. Grant it Write and Describe on that transactional id"
    )


def test_a_transaction_open_past_its_timeout_adds_the_pause_hint(shell: SchedulerShell) -> None:
    shell._producer = FatalProducer(KafkaError._FENCED)
    shell._txn_began = time.monotonic() - 95
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._FENCED, fatal=True)))
    message = raised.value.message
    assert message.startswith(OWNED)
    assert ". Its last transaction had been open 95s, longer than transaction.timeout.ms (60s)" in message
    assert message.endswith("the broker aborted that transaction; start the scheduler again")


def test_no_pause_hint_without_an_open_transaction(shell: SchedulerShell) -> None:
    shell._producer = FatalProducer(KafkaError._FENCED)
    shell._txn_began = None
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._FENCED, fatal=True)))
    assert "transaction.timeout.ms" not in raised.value.message


def test_close_never_flushes_a_fenced_producer(shell: SchedulerShell) -> None:
    class Flushing:
        def flush(self, timeout: float) -> Any:
            raise KafkaException(KafkaError(KafkaError._FENCED, fatal=True))

    shell._producer = Flushing()
    shell._close()  # a producer whose flush fails fatally does not replace the real error
    assert shell._producer is None


# -- a paused instance ------------------------------------------------------


class Pausable:
    """``time.monotonic`` plus a jump: ``pause(s)`` is what a process sees after s seconds of SIGSTOP."""

    def __init__(self) -> None:
        self.jumped = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.jumped

    def pause(self, seconds: float) -> None:
        self.jumped += seconds


def test_a_pause_does_not_use_up_the_deadline_of_a_call_in_flight() -> None:
    now = Pausable()
    clock = _AwakeClock(now, tick=0.02, gap=0.2).start()
    caller = _TxnCaller(clock)
    answer = threading.Event()
    pending = caller.submit(lambda: answer.wait(10) and "the broker's answer", "commit_transaction", 2.0)
    now.pause(40.0)  # frozen 40 s with the call in flight: its 2 s deadline has long passed on the monotonic clock
    threading.Timer(0.5, answer.set).start()  # the answer comes once the process runs again
    assert pending.result() == "the broker's answer"
    assert not caller.stuck
    count, seconds = clock.pauses()
    assert count == 1 and 40.0 <= seconds < 41.0


def test_a_call_that_never_returns_is_still_given_up_at_its_deadline() -> None:
    caller = _TxnCaller(_AwakeClock(tick=0.02, gap=0.2).start())
    release = threading.Event()
    pending = caller.submit(lambda: release.wait(10), "send_offsets_to_transaction", 0.3)
    started = time.monotonic()
    with pytest.raises(_TxnCallStuck, match=r"^send_offsets_to_transaction did not return within 0s"):
        pending.result()
    release.set()
    assert 0.3 <= time.monotonic() - started < 2.0
    assert caller.stuck


def test_awake_time_counts_a_pause_only_up_to_the_gap() -> None:
    now = Pausable()
    clock = _AwakeClock(now, gap=0.2)
    before = clock.awake()
    now.pause(3.0)  # shorter than _PAUSED_S: the deadline is spared, but it is no pause that stops the instance
    assert clock.awake() - before < 0.3
    clock.look()
    assert clock.awake() - before < 0.3
    assert clock.pauses() == (0, 0.0)
    now.pause(6.0)
    clock.look()
    count, seconds = clock.pauses()
    assert count == 1 and 6.0 <= seconds < 6.5


class FakeClock:
    """The shell's clock with a fixed record of pauses."""

    def __init__(self, pauses: tuple[int, float]) -> None:
        self.seen = pauses

    def pauses(self) -> tuple[int, float]:
        return self.seen


def fail_in_batch(shell: SchedulerShell, error: Exception) -> list[bool]:
    """The shell's loop with no broker: start-up does nothing, the first batch raises ``error``.

    Returns the list of recoveries the loop asked for (each stops the loop)."""
    recoveries: list[bool] = []

    def one_batch() -> int:
        raise error

    def recover(*, abortable: bool, txn_open: bool = True) -> None:
        recoveries.append(abortable)
        shell._stop = True

    def no_producer() -> Any:
        raise AssertionError("a new producer was made")

    shell._start = lambda: None  # type: ignore[method-assign]
    shell._one_batch = one_batch  # type: ignore[method-assign]
    shell._recover = recover  # type: ignore[method-assign]
    shell._new_producer = no_producer  # type: ignore[method-assign]
    return recoveries


def test_a_stuck_call_after_a_pause_stops_the_instance_instead_of_making_a_producer(shell: SchedulerShell) -> None:
    recoveries = fail_in_batch(shell, _TxnCallStuck("send_offsets_to_transaction/commit_transaction did not return within 35s"))
    shell._clock = FakeClock((3, 80.0))  # type: ignore[assignment]
    shell._owned_since = (2, 38.0)  # one pause of 42 s since the last commit
    with pytest.raises(SchedulerFenced) as raised:
        shell.run()
    assert raised.value.message == (
        "partition 3: this instance was paused for 42s since it last committed (transactional id unit.scheduler.p3), "
        "then Kafka answered: send_offsets_to_transaction/commit_transaction did not return within 35s. Another "
        "instance may own the partition now, and a new producer would fence it: this instance stops (nothing more "
        "was committed by it). If no other instance runs, start the scheduler again"
    )
    assert (raised.value.error, raised.value.code) == ("PAUSED", "E_SCHEDULER_FENCED")
    assert recoveries == []


@pytest.mark.parametrize(
    "error",
    [_TxnCallStuck("commit_transaction did not return within 35s"), KafkaException(KafkaError(KafkaError._FATAL, "x"))],
)
def test_without_a_pause_since_the_last_commit_a_failed_producer_is_replaced(shell: SchedulerShell, error: Exception) -> None:
    recoveries = fail_in_batch(shell, error)
    shell._clock = FakeClock((2, 38.0))  # type: ignore[assignment]
    shell._owned_since = (2, 38.0)  # the pause came before a commit that proved ownership
    shell.run()
    assert recoveries == [False]


def test_a_fencing_answer_after_a_pause_is_the_fencing_message(shell: SchedulerShell) -> None:
    fail_in_batch(shell, KafkaException(KafkaError(KafkaError.PRODUCER_FENCED, fatal=True)))
    shell._clock = FakeClock((1, 40.0))  # type: ignore[assignment]
    with pytest.raises(SchedulerFenced) as raised:
        shell.run()
    assert raised.value.message == f"{OWNED} (PRODUCER_FENCED: nothing more was committed by it)"


# -- the producer's sizes follow the output topics' limits -------------------------------------------


@pytest.mark.parametrize(
    ("max_output", "smallest", "max_request", "batch"),
    [
        (DEFAULT_MAX_OUTPUT_BYTES, 2_097_152, 2_097_152, 2_097_152 - OUTPUT_FRAMING_ALLOWANCE),
        (DEFAULT_MAX_OUTPUT_BYTES, 3_000_000, 2_097_152, 2_097_152 - OUTPUT_FRAMING_ALLOWANCE),
        (1_000_000, 1_500_000, 1_500_000, 1_500_000 - OUTPUT_FRAMING_ALLOWANCE),
        (1_000_000, 1_016_384, 1_016_384, 1_000_000),
    ],
)
def test_the_producer_batches_under_the_smallest_output_topic_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_output: int, smallest: int, max_request: int, batch: int
) -> None:
    keys = init_keys(tmp_path / "keys")
    config = SchedulerConfig(
        roles=ROLES,
        signer=keys.signer,
        audit_key=keys.audit.secret,
        audit_key_id=keys.audit.key_id,
        max_output_bytes=max_output,
    )
    shell = SchedulerShell(bootstrap="unused:9", topics=Topics("unit"), partition=0, core=SchedulerCore(config), progress=None)
    limits = {topic: 8_388_608 for topic in shell._topics} | {Topics("unit").audit: smallest}
    monkeypatch.setattr("bernstein.consumers.shell.preflight._max_message_bytes", lambda bootstrap, topics: limits)
    shell._check_topic_limits()
    producer = shell._producer_config()
    assert (producer["message.max.bytes"], producer["batch.size"]) == (max_request, batch)
    # any batch of two or more records fits every topic; one record of the largest output passes the client's check
    assert all(producer["batch.size"] + OUTPUT_FRAMING_ALLOWANCE <= limit for limit in limits.values())
    assert producer["batch.size"] >= max_output
    assert producer["message.max.bytes"] >= max_output + OUTPUT_FRAMING_ALLOWANCE


# -- exit codes at the edge --------------------------------------------------------------------------


def test_a_kafka_error_at_start_up_is_the_documented_failure(shell: SchedulerShell) -> None:
    def start() -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))

    shell._start = start  # type: ignore[method-assign]
    with pytest.raises(SchedulerFailed) as raised:
        shell.run()
    assert raised.value.message == (
        'partition 3: Kafka failed while starting (KafkaError{code=_TRANSPORT,val=-195,str="Broker transport failure"}): '
        "check that the broker at unused:9 is up and reachable (infra/status; its log is under .infra/kafka/logs) "
        "and start the scheduler again"
    )
    assert raised.value.code == "E_SCHEDULER_FAILED"


def test_a_kafka_error_of_a_recovery_is_the_documented_failure(shell: SchedulerShell) -> None:
    def one_batch() -> int:
        raise _Abort()

    def recover(*, abortable: bool, txn_open: bool = True) -> None:  # e.g. _seek_to_committed after the rebuild
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Local: Timed out"))

    shell._start = lambda: None  # type: ignore[method-assign]
    shell._one_batch = one_batch  # type: ignore[method-assign]
    shell._recover = recover  # type: ignore[method-assign]
    with pytest.raises(SchedulerFailed, match=r"^partition 3: Kafka failed while recovering \(KafkaError\{code=_TIMED_OUT"):
        shell.run()


def test_the_cli_exits_3_for_a_scheduler_failure(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: Any) -> int:
        raise SchedulerFailed("partition 0: Kafka failed while starting (x): check that the broker")

    monkeypatch.setattr("bernstein.commands.scheduler._run", run)
    parser_args = ["scheduler", "run"]
    assert cli.main(parser_args) == cli.EXIT_USAGE == 3
    assert without_endpoint_line(capsys.readouterr().err) == (
        "bernstein: error: partition 0: Kafka failed while starting (x): check that the broker\n"
    )


@pytest.mark.parametrize(
    ("returncodes", "exit_code"),
    [
        ([0, 0], 0),
        ([0, EXIT_FENCED], EXIT_FENCED),
        ([0, -signal.SIGKILL], 137),
        ([EXIT_FENCED, -signal.SIGTERM], 143),
        ([3, -signal.SIGKILL, EXIT_FENCED], 137),
        ([3, 0], 3),
    ],
)
def test_the_supervisor_reports_a_child_killed_by_a_signal_as_128_plus_the_signal(returncodes: list[int], exit_code: int) -> None:
    assert supervised_exit(returncodes) == exit_code


@pytest.mark.parametrize(
    ("code", "ran_for", "stopping", "restarts", "delay"),
    [
        (0, 100.0, False, 0, None),  # a clean stop (SIGTERM, --idle-exit)
        (EXIT_FENCED, 100.0, False, 0, None),  # another instance owns the partition now
        (3, 2.0, False, 0, None),  # a configuration error at start: a restart would repeat it
        (3, 30.0, False, 0, 1.0),  # Kafka errors that kept recurring after a while
        (-signal.SIGKILL, 0.5, False, 0, 1.0),
        (-signal.SIGKILL, 5.0, False, 3, 8.0),
        (-signal.SIGKILL, 5.0, False, 9, 30.0),
        (-signal.SIGKILL, 5.0, True, 0, None),  # the supervisor is stopping
    ],
)
def test_all_partitions_starts_a_dead_child_again_unless_it_stopped_on_purpose(
    code: int, ran_for: float, stopping: bool, restarts: int, delay: float | None
) -> None:
    from bernstein.commands.scheduler import restart_delay

    assert restart_delay(code, ran_for=ran_for, stopping=stopping, restarts=restarts) == delay


def test_the_supervisor_restarts_a_killed_child_and_waits_for_the_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition 1's first child is killed (-9): a second one starts after a second; the supervisor exits 0
    once every final child exited 0."""
    from bernstein.cli import build_parser
    from bernstein.commands import scheduler

    started: list[int] = []

    class Child:
        def __init__(self, command: list[str]) -> None:
            self.partition = int(command[command.index("--partition") + 1])
            started.append(self.partition)
            self.first = started.count(self.partition) == 1

        def poll(self) -> int:
            return -signal.SIGKILL if self.partition == 1 and self.first else 0

        def send_signal(self, signum: int) -> None:
            pass

    monkeypatch.setattr("bernstein.commands.scheduler.subprocess.Popen", Child)
    monkeypatch.setattr("bernstein.commands.scheduler.signal.signal", lambda *a: None)
    assert scheduler._supervise(build_parser().parse_args(["scheduler", "run", "--all-partitions"]), 2) == 0
    assert started == [0, 1, 1]
