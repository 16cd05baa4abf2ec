"""Broker loss on the local three-node cluster (`infra/up --brokers 3`): the scheduler keeps committing.

The test starts its own cluster from a temporary root (``infra.py --root``), in the mode of the
session's broker (secured in `make test`), with the session's S3 as an external endpoint, so
the single broker the other tests use is not touched. Topics get replication factor 3 and
``min.insync.replicas`` 2 from the cluster's ``.infra/env``. While the Python emitter publishes
signed submissions and the real ``bernstein scheduler run`` journals them, the node that is the
scheduler's transaction coordinator is stopped (a clean shutdown: its leaderships move to the
two others). The scheduler commits again, every submission is journalled exactly once, every
run is closed and sealed, and ``bernstein activity verify`` exits 0 for each. At the end the
node is started again and rejoins every replica set of the journal. On the same cluster, topics
replicated as on one broker keep the scheduler from starting: it reads RF 3 and min ISR 2 from
the cluster root's ``.infra/env``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import client_config, ensure_topics
from bernstein.substrate.keys import InstallKeys, ProducerKeys, TrustedKeys
from bernstein.substrate.topic_policy import describe_topics
from tests.conftest import REPO, Services, as_component, bernstein_env
from tests.support.kafka import read_partition
from tests.support.scheduler_process import SchedulerProcess, committed_offset

INFRA = REPO / "infra" / "infra.py"
RUNS = ("rf3-a", "rf3-b", "rf3-c")
SUBMISSIONS = 150
STOP_AFTER = 50
"""The feeder publishes this many, then waits until the node stop begins, and goes on publishing during and after it."""
PACE_S = 0.04
"""At least 4 s of publishing after the stop began, longer than a node's clean shutdown takes."""


@dataclass(frozen=True)
class Cluster:
    root: Path
    env: dict[str, str]
    """The cluster's .infra/env."""
    services: Services
    up_seconds: float

    def infra(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """``infra/infra.py --root ROOT ARGS`` (the cluster's own state; S3 is the session's)."""
        return run_infra(self.root, self.services, *args, timeout=timeout)


def run_infra(root: Path, services: Services, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    process = start_infra(root, services, *args)
    out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def start_infra(root: Path, services: Services, *args: str) -> subprocess.Popen[str]:
    """``infra/infra.py --root ROOT ARGS`` without Kafka settings of its own (S3: the session's, external)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_")}
    env.update(
        BERNSTEIN_S3_ENDPOINT=services.s3.endpoint,
        BERNSTEIN_S3_ACCESS_KEY=services.s3.access_key,
        BERNSTEIN_S3_SECRET_KEY=services.s3.secret_key,
        BERNSTEIN_S3_BUCKET=services.s3.bucket,
    )
    command = [sys.executable, str(INFRA), "--root", str(root), *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture(scope="module")
def cluster(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A three-node cluster under a temporary root, as secure as the session's broker; stopped after the module."""
    root = tmp_path_factory.mktemp("cluster")
    started = time.monotonic()
    up = run_infra(root, services, "up", "--brokers", "3", *(["--secure"] if services.secure else []), timeout=240)
    try:
        assert up.returncode == 0, f"infra up --brokers 3 failed:\n{up.stdout}\n{up.stderr}"
        up_seconds = time.monotonic() - started
        env = read_env(root / ".infra" / "env")
        config_file = Path(env["BERNSTEIN_KAFKA_CONFIG_FILE"]) if services.secure else None
        with pytest.MonkeyPatch.context() as patch:
            # this process's clients are the cluster's admin; topics get the cluster's replication settings
            if config_file is not None:
                patch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(config_file))
            for name in ("BERNSTEIN_TOPIC_REPLICATION_FACTOR", "BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS"):
                patch.setenv(name, env[name])
            own = Services(env["BERNSTEIN_KAFKA_BOOTSTRAP"], services.s3, root / ".infra" / "env", config_file)
            yield Cluster(root, env, own, up_seconds)
    finally:
        down = run_infra(root, services, "down", timeout=120)
        assert down.returncode == 0, f"infra down failed:\n{down.stdout}\n{down.stderr}"


INTERNAL = ("__transaction_state", "__consumer_offsets")
"""One partition each here: its leader coordinates every transaction (every group) of the cluster."""


def partition_leaders(bootstrap: str, topic: str) -> tuple[int, list[int]]:
    """(leader, in-sync replicas) of partition 0 of ``topic``, as the cluster's metadata says."""
    metadata = AdminClient(client_config(bootstrap)).list_topics(topic, timeout=15)
    partition = metadata.topics[topic].partitions[0]
    return int(partition.leader), sorted(partition.isrs)


def leaders(bootstrap: str, names: list[str]) -> dict[str, tuple[int, list[int]]]:
    return {name: partition_leaders(bootstrap, name) for name in names}


def stop_scheduler(scheduler: SchedulerProcess) -> int:
    """SIGTERM (a clean stop after its last commit) and its exit code; SIGKILL if it does not stop within 60 s."""
    if scheduler.alive():
        scheduler.proc.send_signal(signal.SIGTERM)
    try:
        return scheduler.wait(60)
    except subprocess.TimeoutExpired:
        scheduler.stop()
        raise AssertionError(f"the scheduler did not stop on SIGTERM:\n{scheduler.text()}") from None


class Feeder(threading.Thread):
    """Publishes SUBMISSIONS signed stages over RUNS through the emitter SDK, paced, then closes every run."""

    def __init__(self, emitter: Emitter) -> None:
        super().__init__(daemon=True)
        self.emitter = emitter
        self.published = 0
        self.error: BaseException | None = None
        self.go_on = threading.Event()

    def run(self) -> None:
        try:
            for n in range(SUBMISSIONS):
                if n == STOP_AFTER:
                    self.go_on.wait(120)
                run_id = RUNS[n % len(RUNS)]
                page = self.emitter.capture("file", f"f{n}.py", f"print({n})\n".encode())
                self.emitter.publish(
                    run_id=run_id,
                    stage_id=f"st-{n}",
                    role="developer",
                    result=ActivityResult.build("coding", b"diff %d" % n, [page]),
                )
                self.published += 1
                time.sleep(PACE_S)
            for run_id in RUNS:
                self.emitter.close_run(run_id)
        except BaseException as exc:  # reported by the test thread
            self.error = exc


def wait_for(what: str, condition: Any, timeout: float, scheduler: SchedulerProcess | None = None) -> float:
    started = time.monotonic()
    while not condition():
        if scheduler is not None:
            assert scheduler.alive(), f"the scheduler exited with {scheduler.proc.returncode}:\n{scheduler.text()}"
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout:.0f}s" + (
            f"\n{scheduler.text()}" if scheduler else ""
        )
        time.sleep(0.1)
    return time.monotonic() - started


@pytest.mark.timeout(420)
def test_scheduler_keeps_committing_when_a_broker_stops(
    cluster: Cluster,
    prefix: str,
    install_keys: InstallKeys,
    producer_keys: ProducerKeys,
    manifest: Path,
    trusted: TrustedKeys,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = cluster.services
    bootstrap = services.bootstrap
    timings = {"cluster up": cluster.up_seconds}
    assert len(bootstrap.split(",")) == 3, bootstrap
    assert (cluster.env["BERNSTEIN_TOPIC_REPLICATION_FACTOR"], cluster.env["BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS"]) == ("3", "2")
    topics = Topics(prefix)
    ensure_topics(bootstrap, topics)
    for topic in describe_topics(bootstrap, list(topics.all)):
        assert (topic.name, topic.replicas, topic.config["min.insync.replicas"]) == (topic.name, 3, "2")

    env = {**os.environ, **bernstein_env(services, prefix, install_keys, producer_keys, manifest)}
    logs = tmp_path / "logs"
    logs.mkdir()
    store = S3BlobStore(services.s3)
    scheduler = SchedulerProcess(1, env, logs)
    try:
        scheduler.wait_started(timeout=90)
        settings = Settings(kafka_bootstrap=bootstrap, s3=services.s3, topics=topics)
        if services.secure:  # the emitter is the producer principal; this process stays the admin
            monkeypatch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(services.principal_file("producer")))
        emitter = Emitter.from_settings(settings, producer=producer_keys, store=store)
        if services.config_file is not None:
            monkeypatch.setenv("BERNSTEIN_KAFKA_CONFIG_FILE", str(services.config_file))
        with emitter:
            flow_started = time.monotonic()
            feeder = Feeder(emitter)
            feeder.start()
            wait_for(f"{STOP_AFTER} submissions published", lambda: feeder.published >= STOP_AFTER or not feeder.is_alive(), 90)
            assert feeder.error is None, feeder.error
            wait_for("the first submissions committed", lambda: committed_offset(bootstrap, topics) >= 20, 90, scheduler)

            # the node that coordinates the scheduler's transactions (the leader of __transaction_state)
            watched = [*INTERNAL, *topics.all]
            before = leaders(bootstrap, watched)
            assert all(isr == [1, 2, 3] for _, isr in before.values()), before
            victim = before["__transaction_state"][0]  # node N runs as broker N (node.id=N)
            led = [name for name, (leader, _) in before.items() if leader == victim]
            stop_started = time.monotonic()
            feeder.go_on.set()  # submissions flow on while the node stops
            stopped = cluster.infra("node", "stop", str(victim))
            assert stopped.returncode == 0, f"{stopped.stdout}\n{stopped.stderr}"
            timings["node stop"] = time.monotonic() - stop_started
            at_stop = committed_offset(bootstrap, topics)
            published_at_stop = feeder.published
            assert feeder.is_alive() and published_at_stop < SUBMISSIONS, "the node must stop while submissions flow"
            print(
                f"\nstopped node {victim}, leader of {', '.join(led)}, after {published_at_stop} published, {at_stop} committed"
            )

            # every leadership moved off the stopped node; every partition still has min.insync.replicas=2 in sync
            after = leaders(bootstrap, watched)
            others = sorted({1, 2, 3} - {victim})
            assert {name: (leader in others, isr) for name, (leader, isr) in after.items()} == {
                name: (True, others) for name in watched
            }

            wait_for("a commit after the stop", lambda: committed_offset(bootstrap, topics) > at_stop, 90, scheduler)
            timings["first commit after the stop began"] = time.monotonic() - stop_started

            total = SUBMISSIONS + len(RUNS)
            wait_for("every submission and close committed", lambda: committed_offset(bootstrap, topics) >= total, 180, scheduler)
            feeder.join(30)
            assert feeder.error is None, feeder.error
            assert committed_offset(bootstrap, topics) == total
            timings["submissions flowing"] = time.monotonic() - flow_started
    finally:
        code = stop_scheduler(scheduler)
    text = scheduler.text()
    assert code == 0, text
    assert "Traceback" not in text, text
    final = [line for line in text.splitlines() if "stopped:" in line]
    assert final and f"consumed {SUBMISSIONS + len(RUNS)} journalled {SUBMISSIONS} refused 0" in final[-1], text

    # every stage journalled exactly once, in the order published per run
    journal = read_partition(bootstrap, topics, "journal")
    stages = [r.inner["stage_id"] for r in journal if "stage_id" in r.inner]
    assert sorted(stages, key=lambda s: int(s.split("-")[1])) == [f"st-{n}" for n in range(SUBMISSIONS)]

    # the node comes back (it boots while the runs are verified) and rejoins the journal's replicas at the end
    restart_started = time.monotonic()
    restarting = start_infra(cluster.root, cluster.services, "node", "start", str(victim))

    # every run is closed and sealed: `bernstein activity verify` exits 0 (an open run is exit 5), run in parallel
    verify_started = time.monotonic()
    trust_file = tmp_path / "trusted-keys.json"
    trusted.write(trust_file)
    verifying = {}
    for run_id in RUNS:
        args = ["activity", "verify", run_id, "--from", "kafka", "--cas", "s3", "--trusted-keys", str(trust_file)]
        verifying[run_id] = subprocess.Popen(
            [sys.executable, "-m", "bernstein", *args],
            cwd=REPO,
            env=as_component(args, env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for run_id, process in verifying.items():
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0, f"{run_id}: exit {process.returncode}\n{out}\n{err}"
        assert "verified" in out, out
    timings["verify 3 runs"] = time.monotonic() - verify_started

    out, err = restarting.communicate(timeout=180)
    assert restarting.returncode == 0, f"{out}\n{err}"
    wait_for(
        "the restarted node back in sync",
        lambda: all(isr == [1, 2, 3] for _, isr in leaders(bootstrap, watched).values()),
        60,
    )
    timings["node start until in sync"] = time.monotonic() - restart_started
    status = cluster.infra("status")
    assert status.returncode == 0, status.stdout + status.stderr
    nodes = [line for line in status.stdout.splitlines() if line.startswith("infra: kafka-")]
    assert len(nodes) == 3 and all(" running " in line and line.endswith("ready=yes") for line in nodes), status.stdout
    print("; ".join(f"{what} {seconds:.1f}s" for what, seconds in timings.items()))


def test_topics_replicated_as_on_one_broker_are_refused_on_the_cluster(
    cluster: Cluster,
    prefix: str,
    install_keys: InstallKeys,
    producer_keys: ProducerKeys,
    manifest: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Topics made with the single broker's settings (RF 1): the scheduler, run in the cluster's root, reads RF 3 and
    min ISR 2 from that root's .infra/env and refuses to start on them (exit 3, each topic and setting named)."""
    bootstrap = cluster.services.bootstrap
    topics = Topics(prefix)
    monkeypatch.setenv("BERNSTEIN_TOPIC_REPLICATION_FACTOR", "1")
    monkeypatch.setenv("BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS", "1")
    ensure_topics(bootstrap, topics)
    assert {(t.replicas, t.config["min.insync.replicas"]) for t in describe_topics(bootstrap, list(topics.all))} == {(1, "1")}

    env = {k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_TOPIC_")}
    env.update(bernstein_env(cluster.services, prefix, install_keys, producer_keys, manifest))
    args = [sys.executable, "-m", "bernstein", "scheduler", "run", "--idle-exit", "0.5"]
    refused = subprocess.run(args, env=as_component(args, env), cwd=cluster.root, capture_output=True, text=True, timeout=120)

    assert refused.returncode == 3, refused.stderr
    assert "Traceback" not in refused.stderr
    for topic in topics.all:
        assert f"{topic}: replication factor=1 is below BERNSTEIN_TOPIC_REPLICATION_FACTOR=3" in refused.stderr
        assert f"{topic}: min.insync.replicas=1 is below BERNSTEIN_TOPIC_MIN_INSYNC_REPLICAS=2" in refused.stderr
