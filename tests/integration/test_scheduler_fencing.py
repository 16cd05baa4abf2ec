"""One owner per partition: two schedulers on one partition, and a paused instance resumed after a takeover.

Kafka's model: a new producer with the same transactional id fences the older
one (``init_transactions`` bumps the epoch and aborts its open transaction).
The newer ``bernstein scheduler run`` keeps the partition; the older one stops
at its next transactional call with exit code 7 (``EXIT_FENCED``) and a message that names the
partition and the transactional id, and never recreates its producer (which
would fence the newer one back: an endless ping-pong). A SIGSTOPped instance
resumed after a newer one took over commits nothing and stops the same way.

After each scenario every input offset produced exactly one crossing, the
outputs are byte-identical to one uninterrupted pass of the pure core, and
every run verifies offline.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bernstein.commands.scheduler import EXIT_FENCED
from bernstein.consumers.manifest import load_roles
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.keys import InstallKeys, TrustedKeys
from bernstein.verifier.verify import verify
from tests.support.kafka import (
    CachedSource,
    crossings,
    encode_close,
    encode_submission,
    fold,
    fresh_topics,
    idempotent_producer,
    produce_all,
    read_outputs,
    read_partition,
    scheduler_config,
    stored_form,
)
from tests.support.scheduler_process import SEAL_EVERY, SchedulerProcess, TxnProbe, committed_offset, count_records

RUNS = ("fence-a", "fence-b", "fence-c")
FENCED_WITHIN = 60.0
"""Bound on how long a fenced instance may take to notice and stop once records reach it."""


def submissions(store: DirBlobStore, start: int, count: int) -> list[tuple[bytes, bytes]]:
    """``count`` accepted stages spread over RUNS (stage ids numbered from ``start``)."""
    items = []
    for n in range(start, start + count):
        run_id = RUNS[n % len(RUNS)]
        value = encode_submission(
            run_id=run_id,
            stage_id=f"st-{n}",
            pages=(f"{run_id} page {n}".encode(),),
            artifact=f"diff {n}".encode(),
            store=store,
        )
        items.append((run_id.encode(), value))
    return items


def closes() -> list[tuple[bytes, bytes]]:
    return [(run_id.encode(), encode_close(run_id)) for run_id in RUNS]


def wait_committed(bootstrap: str, topics: Topics, offset: int, owner: SchedulerProcess, timeout: float = 60.0) -> None:
    """Until the scheduler group's committed input offset reaches ``offset`` (``owner`` must stay alive)."""
    deadline = time.monotonic() + timeout
    while committed_offset(bootstrap, topics) < offset:
        assert owner.alive(), f"scheduler #{owner.number} exited with {owner.proc.returncode}:\n{owner.text()}"
        assert time.monotonic() < deadline, f"input offset {offset} not committed within {timeout:.0f}s:\n{owner.text()}"
        time.sleep(0.05)


def fenced_message(topics: Topics) -> str:
    return (
        f"partition 0 is now owned by another scheduler instance (transactional id {topics.prefix}.scheduler.p0); "
        "this instance stops"
    )


def assert_stopped_fenced(process: SchedulerProcess, topics: Topics) -> None:
    code = process.wait(FENCED_WITHIN)
    text = process.text()
    assert code == EXIT_FENCED, f"scheduler #{process.number} exited {code}, not {EXIT_FENCED}:\n{text}"
    assert f"bernstein: error: {fenced_message(topics)}" in text, text
    assert "Traceback" not in text, text
    # it stopped at once: one start-up, no producer recreated, no second rebuild
    assert text.count("state rebuilt") == 1, text
    assert "recreating the producer" not in text, text


def stop_the_survivor(process: SchedulerProcess) -> None:
    """SIGTERM the instance that kept the partition: exit 0, and it was never fenced back (one start-up, no recovery)."""
    process.proc.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, process.text()
    text = process.text()
    assert text.count("state rebuilt") == 1, text
    assert "recreating the producer" not in text and "fenced" not in text.lower(), text


def assert_exactly_once(
    bootstrap: str,
    topics: Topics,
    items: list[tuple[bytes, bytes]],
    *,
    keys: InstallKeys,
    trusted: TrustedKeys,
    roles_path: Path,
    store: DirBlobStore,
) -> None:
    """Every input offset crossed once, outputs byte-identical to the pure core, every run verifies."""
    inputs = read_partition(bootstrap, topics, "submissions")
    assert [(r.key, r.value) for r in inputs] == items
    out = read_outputs(bootstrap, topics)
    found = crossings(out)
    assert [offset for offset, _ in found] == list(range(len(items))), "each input offset exactly one crossing"
    assert [what for _, what in found] == ["journal"] * (len(items) - len(RUNS)) + ["close"] * len(RUNS)
    expected = fold(scheduler_config(keys, roles=load_roles(roles_path), seal_every=SEAL_EVERY), inputs)
    for stream, records in out.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream
    source = CachedSource(bootstrap, topics)
    for run_id in RUNS:
        report = verify(run_id, source, cas=store, trusted=trusted)
        assert report.exit_code == 0, (run_id, report.header, [s for s in report.stages if not s.ok][:3])
        assert report.header.seal is not None and report.header.seal.final


@pytest.fixture
def spawn(cli_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[[], SchedulerProcess]]:
    """Starts one more ``bernstein scheduler run`` (log under tmp_path/logs) and waits for it; all stop at teardown."""
    started: list[SchedulerProcess] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start() -> SchedulerProcess:
        process = SchedulerProcess(len(started) + 1, cli_env, logs)
        started.append(process)
        process.wait_started()
        return process

    yield start
    for process in started:
        process.stop()


@pytest.mark.timeout(300)
def test_two_schedulers_on_one_partition_the_newer_keeps_it(
    services: Any,
    settings: Settings,
    install_keys: InstallKeys,
    trusted: TrustedKeys,
    cli_env: dict[str, str],
    tmp_path: Path,
    spawn: Callable[[], SchedulerProcess],
) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)
    store = DirBlobStore(tmp_path / "cas")
    first_wave, second_wave = submissions(store, 0, 120), submissions(store, 120, 120)
    older = spawn()
    produce_all(bootstrap, topics.submissions, first_wave)
    wait_committed(bootstrap, topics, len(first_wave), older)

    newer = spawn()  # its init_transactions fences the older instance
    produce_all(bootstrap, topics.submissions, second_wave)
    started = time.monotonic()
    assert_stopped_fenced(older, topics)
    print(f"\nthe older instance stopped {time.monotonic() - started:.1f}s after the second wave was sent")

    items = first_wave + second_wave + closes()
    produce_all(bootstrap, topics.submissions, items[len(first_wave) + len(second_wave) :])
    wait_committed(bootstrap, topics, len(items), newer)
    assert newer.alive()
    stop_the_survivor(newer)

    assert_exactly_once(
        bootstrap,
        topics,
        items,
        keys=install_keys,
        trusted=trusted,
        roles_path=Path(cli_env["BERNSTEIN_ROLES"]),
        store=store,
    )


class Feeder(threading.Thread):
    """Publishes items in small paced bursts, so the scheduler keeps opening transactions.

    The bursts are small and paced (about 15 s for 1,500 items) so that transactions keep
    opening for as long as the test may need to catch one open, however late the scheduler
    started; once ``hurry`` is set, the rest goes out at once.
    """

    BURST = 5
    PAUSE_S = 0.05

    def __init__(self, bootstrap: str, topic: str, items: list[tuple[bytes, bytes]]) -> None:
        super().__init__(name="feeder", daemon=True)
        self.bootstrap, self.topic, self.items = bootstrap, topic, items
        self.errors: list[str] = []
        self.hurry = threading.Event()

    def run(self) -> None:
        producer = idempotent_producer(self.bootstrap)

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        for start in range(0, len(self.items), self.BURST):
            for key, value in self.items[start : start + self.BURST]:
                producer.produce(self.topic, value=value, key=key, partition=0, on_delivery=delivered)
            producer.poll(0)
            if not self.hurry.is_set():
                time.sleep(self.PAUSE_S)
        if producer.flush(60) != 0:
            self.errors.append("undelivered records")


PAST_THE_CALL_DEADLINE = 40.0
"""Longer than a transactional call's deadline (30 s timeout + 5 s grace), shorter than transaction.timeout.ms (60 s)."""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("frozen_for", [0.0, PAST_THE_CALL_DEADLINE], ids=["takeover-pause", "pause-past-the-call-deadline"])
def test_a_paused_instance_resumed_after_a_takeover_commits_nothing(
    services: Any,
    settings: Settings,
    install_keys: InstallKeys,
    trusted: TrustedKeys,
    cli_env: dict[str, str],
    tmp_path: Path,
    spawn: Callable[[], SchedulerProcess],
    frozen_for: float,
) -> None:
    """``frozen_for``: the least time the instance stays frozen (0: as long as the takeover takes).

    Frozen past its calls' deadline, the instance resumes with a call in flight whose deadline
    passed on the monotonic clock: it must wait for the broker's real answer (fenced), not take
    the call for stuck and make a new producer, whose init_transactions would fence the newer one.
    """
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, settings.topics.prefix)
    store = DirBlobStore(tmp_path / "cas")
    zombie = spawn()
    streamed = submissions(store, 0, 1500)
    feeder = Feeder(bootstrap, topics.submissions, streamed)
    feeder.start()
    probe = TxnProbe(bootstrap, topics)
    try:
        wait_committed(bootstrap, topics, 300, zombie)  # it has done some work before it is frozen
        # freeze the instance while it has a transaction with records open, and prove it is open
        caught = False
        deadline = time.monotonic() + 30
        while not caught and time.monotonic() < deadline:
            assert zombie.alive(), zombie.text()
            if not probe.open_transaction():
                continue
            zombie.proc.send_signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            quiet_until = time.monotonic() + 0.3
            while probe.open_transaction():
                if time.monotonic() > quiet_until:
                    caught = True
                    break
            if not caught:
                zombie.proc.send_signal(signal.SIGCONT)
        assert caught, "never caught the scheduler inside an open transaction"
        feeder.hurry.set()

        takeover = spawn()  # fences the frozen instance and aborts its open transaction
        feeder.join(120)
        assert not feeder.is_alive() and feeder.errors == [], feeder.errors
        wait_committed(bootstrap, topics, len(streamed), takeover)
    finally:
        probe.close()
    time.sleep(max(frozen_at + frozen_for - time.monotonic(), 0.0))

    committed_before = {s: count_records(bootstrap, topics.by_stream(s), "read_committed") for s in ("journal", "audit")}
    aborted = count_records(bootstrap, topics.journal, "read_uncommitted") - committed_before["journal"]
    assert aborted > 0, "the frozen instance's open transaction left aborted journal records"

    zombie.proc.send_signal(signal.SIGCONT)
    print(f"\nthe instance was frozen {time.monotonic() - frozen_at:.1f}s")
    assert_stopped_fenced(zombie, topics)
    assert takeover.alive(), takeover.text()
    committed_after = {s: count_records(bootstrap, topics.by_stream(s), "read_committed") for s in ("journal", "audit")}
    assert committed_after == committed_before, "the resumed instance committed nothing"
    assert count_records(bootstrap, topics.journal, "read_uncommitted") - committed_after["journal"] >= aborted

    items = streamed + closes()
    produce_all(bootstrap, topics.submissions, items[len(streamed) :])
    wait_committed(bootstrap, topics, len(items), takeover)
    stop_the_survivor(takeover)

    assert_exactly_once(
        bootstrap,
        topics,
        items,
        keys=install_keys,
        trusted=trusted,
        roles_path=Path(cli_env["BERNSTEIN_ROLES"]),
        store=store,
    )
