"""``bernstein scheduler run`` as a subprocess, and the probes of what it committed: the fault-injection tests."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.config import Topics
from tests.conftest import as_component
from tests.support.kafka import encode_close, encode_submission

REPO = Path(__file__).resolve().parents[2]
SEAL_EVERY = 50


class SchedulerProcess:
    """One incarnation of ``bernstein scheduler run`` with its own log file."""

    def __init__(self, number: int, env: dict[str, str], logs: Path, *, idle_exit: float | None = None) -> None:
        self.number = number
        self.log = logs / f"scheduler-{number}.log"
        args = [
            str(REPO / ".venv" / "bin" / "python"),
            "-m",
            "bernstein",
            "scheduler",
            "run",
            "--partition",
            "0",
            "--seal-every",
            str(SEAL_EVERY),
            "--progress-every",
            "1",
        ]
        if idle_exit is not None:
            args += ["--idle-exit", str(idle_exit)]
        self._file = self.log.open("wb")
        self.proc = subprocess.Popen(args, env=as_component(args, env), cwd=REPO, stdout=self._file, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_started(self, timeout: float = 60.0) -> None:
        """Poll the log until the instance has rebuilt its state and is reading."""
        deadline = time.monotonic() + timeout
        while "reading " not in self.text():
            if self.proc.poll() is not None:
                raise AssertionError(f"scheduler #{self.number} exited with {self.proc.returncode}:\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"scheduler #{self.number} did not start within {timeout:.0f}s:\n{self.text()}")
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        assert self.alive(), f"scheduler #{self.number} died on its own ({self.proc.returncode}):\n{self.text()}"
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL
        self._file.close()

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._file.close()
        return code

    def stop(self) -> None:
        """Leave nothing running, whatever happened (test teardown)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._file.close()


class TxnProbe:
    """Sees whether the scheduler has an open transaction with records in it (journal LSO < high watermark)."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from bernstein.substrate.kafka import client_config

        self.tp = TopicPartition(topics.journal, 0)
        self.committed = Consumer(client_config(bootstrap, **{"group.id": "tests.probe", "isolation.level": "read_committed"}))
        self.uncommitted = Consumer(
            client_config(bootstrap, **{"group.id": "tests.probe", "isolation.level": "read_uncommitted"})
        )

    def open_transaction(self) -> bool:
        # ListOffsets(latest) answers the last stable offset to a read_committed client, the high watermark otherwise
        lso = self.committed.get_watermark_offsets(self.tp, timeout=10, cached=False)[1]
        high = self.uncommitted.get_watermark_offsets(self.tp, timeout=10, cached=False)[1]
        return bool(lso < high)

    def close(self) -> None:
        self.committed.close()
        self.uncommitted.close()


def count_records(bootstrap: str, topic: str, isolation: str) -> int:
    """Data records of a partition (control markers are never delivered) under an isolation level."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from bernstein.substrate.kafka import client_config

    consumer = Consumer(
        client_config(
            bootstrap,
            **{"group.id": "tests.count", "isolation.level": isolation, "enable.partition.eof": True, "fetch.wait.max.ms": 10},
        )
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        count = 0
        while True:
            for message in consumer.consume(5000, 0.05):
                error = message.error()
                if error is None:
                    count += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    return count
    finally:
        consumer.close()


def committed_offset(bootstrap: str, topics: Topics, timeout: float = 60.0) -> int:
    """The scheduler group's committed input offset (read only; we never commit for that group).

    Retries errors until ``timeout``: right after a broker restart the group coordinator answers
    NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a while (librdkafka does not flag those retriable).
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from bernstein.substrate.kafka import client_config

    deadline = time.monotonic() + timeout
    consumer = Consumer(
        client_config(
            bootstrap,
            **{"group.id": f"{topics.prefix}.scheduler", "enable.auto.commit": False, "isolation.level": "read_committed"},
        )
    )
    try:
        while True:
            try:
                return int(consumer.committed([TopicPartition(topics.submissions, 0)], timeout=10)[0].offset)
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"cannot read the scheduler's committed offset: {exc}") from exc
                time.sleep(0.1)
    finally:
        consumer.close()


def small_plan(store: DirBlobStore, runs: tuple[str, ...], per_run: int) -> list[tuple[bytes, bytes]]:
    """``per_run`` accepted stages for each run, interleaved, then a close for each run."""
    items = []
    for n in range(per_run * len(runs)):
        run_id = runs[n % len(runs)]
        value = encode_submission(
            run_id=run_id, stage_id=f"st-{n}", pages=(f"{run_id} page {n}".encode(),), artifact=b"d%d" % n, store=store
        )
        items.append((run_id.encode(), value))
    return items + [(run_id.encode(), encode_close(run_id)) for run_id in runs]
