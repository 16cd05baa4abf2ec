"""``bernstein audit follow`` against the real (secured) broker and a real scheduler ("Checks").

The scheduler is the transaction shell, in-process on a thread (as in test_scheduler_kafka);
the follower is ``bernstein audit follow`` in a subprocess under the auditor's principal, with
the trusted-keys file `bernstein keys trust` exports. Forged records go into the audit topic
through a plain (non-transactional) producer of the Kafka admin.

A deleted-looking gap: Kafka cannot delete a record in the middle of a partition (only a prefix,
with DeleteRecords), so the gap is what the follower would see after such a deletion: a record
MACed with the scheduler's audit key (the test holds it, as a thief of the key would) whose seq
skips three and whose prev_mac is the chain head. A rewritten topic (deleted, recreated and
refilled without one record) is the other way to delete a record; the restart test does it
and the follower reports the rewrite and then the gap.
"""

from __future__ import annotations

import io
import json
import os
import queue
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

from bernstein.commands.common import without_endpoint_line
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell
from bernstein.schemas.partitioning import partition_for
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import ensure_topics
from bernstein.substrate.keys import InstallKeys, TrustedKeys
from tests.conftest import REPO, Services, principal_env
from tests.support.audit_forge import chain, edited, entry, parts, remac
from tests.support.audit_forge import genuine as genuine_record
from tests.support.kafka import (
    encode_close,
    encode_submission,
    fresh_topics,
    produce_all,
    read_partition,
    scheduler_config,
    wait_stable,
)
from tests.support.metrics import http_status, scrape_metrics

ALERT_WITHIN = 5.0


class Scheduler:
    """The scheduler shell on a thread, until ``stop``."""

    def __init__(self, bootstrap: str, topics: Topics, keys: InstallKeys, partition: int = 0) -> None:
        self._stop = threading.Event()
        self.log = io.StringIO()
        self.shell = SchedulerShell(
            bootstrap=bootstrap, topics=topics, partition=partition, core=SchedulerCore(scheduler_config(keys)), progress=self.log
        )
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.shell.run(until=lambda _c: self._stop.is_set())
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and self.error is None, f"scheduler: {self.error}\n{self.log.getvalue()}"


class Follower:
    """``bernstein audit follow`` in a subprocess; its alert lines and progress lines, as they come."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        command = [sys.executable, "-m", "bernstein", "audit", "follow", "--progress", "--checkpoint-every", "0.2", *args]
        self.process = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.alerts: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.progress: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        """Partitions assigned and revoked."""
        self.stderr: list[str] = []
        threading.Thread(target=self._read_alerts, daemon=True).start()
        threading.Thread(target=self._read_progress, daemon=True).start()

    def _read_alerts(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.alerts.put((time.monotonic(), json.loads(line)))

    def _read_progress(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if line.startswith('{"event":"checked"'):
                self.progress.append(json.loads(line))
            elif line.startswith('{"event":'):
                self.events.append(json.loads(line))
            else:
                self.stderr.append(line)

    def drain(self) -> list[dict[str, Any]]:
        while True:
            try:
                self.seen.append(self.alerts.get_nowait()[1])
            except queue.Empty:
                return self.seen

    def wait_alert(self, kind: str, offset: int, since: float, timeout: float = ALERT_WITHIN) -> float:
        """Seconds from ``since`` until the alert ``kind`` at ``offset`` came (fails after ``timeout``)."""
        deadline = since + timeout
        while True:
            try:
                at, alert = self.alerts.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {kind} alert at offset {offset} within {timeout} s; got {self.seen}; stderr: {''.join(self.stderr)}"
                ) from None
            self.seen.append(alert)
            if alert["alert"] == kind and alert["offset"] == offset:
                return at - since

    def wait_kind(self, kind: str, timeout: float) -> dict[str, Any]:
        """The first alert of ``kind`` (already seen or coming within ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while True:
            for alert in self.drain():
                if alert["alert"] == kind:
                    return alert
            assert time.monotonic() < deadline, f"no {kind} alert within {timeout} s; got {self.seen}"
            time.sleep(0.05)

    def wait_checked(self, last_offset: int, timeout: float = 30.0, partition: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while not any(p["last_offset"] >= last_offset and p["partition"] == partition for p in self.progress):
            assert self.process.poll() is None, f"follower exited {self.process.returncode}: {''.join(self.stderr)}"
            assert time.monotonic() < deadline, f"follower did not check up to {last_offset}: {self.progress[-3:]}"
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        code = self.process.wait(30)
        time.sleep(0.1)  # the reader threads take the last lines
        self.drain()
        return code


@dataclass
class Deployment:
    services: Services
    topics: Topics
    keys: InstallKeys
    trusted_file: Path
    env: dict[str, str]
    """The auditor's environment (its principal's client properties on the secured broker)."""
    tmp: Path

    def traffic(self, runs: int, stages: int, *, tag: str = "a") -> None:
        items: list[tuple[bytes | None, bytes | None]] = []
        for r in range(runs):
            run_id = f"run-{tag}-{r}"
            items += [
                (run_id.encode(), encode_submission(run_id=run_id, stage_id=f"s{s}", pages=(f"page {run_id}/{s}".encode(),)))
                for s in range(stages)
            ]
            items.append((run_id.encode(), encode_close(run_id)))
        produce_all(self.services.bootstrap, self.topics.submissions, items)

    def audit(self) -> list[Any]:
        return read_partition(self.services.bootstrap, self.topics, "audit")

    def wait_audited(self, count: int, timeout: float = 60.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        while True:
            records = self.audit()
            if len(records) >= count:
                return records
            assert time.monotonic() < deadline, f"the scheduler wrote {len(records)} of {count} audit records"
            time.sleep(0.2)

    def forge(self, value: bytes, key: bytes | None = b"forged") -> tuple[int, float]:
        """Append ``value`` to the audit topic as the admin; (its offset, the moment it was acknowledged)."""
        offset = produce_all(self.services.bootstrap, self.topics.audit, [(key, value)])[0]
        return offset, time.monotonic()

    def follow(self, *args: str, state: str = "state") -> Follower:
        return Follower(self.env, "--trusted-keys", str(self.trusted_file), "--state", str(self.tmp / state), *args)

    def once(self, *args: str, state: str = "once") -> tuple[int, list[dict[str, Any]], str]:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "bernstein",
                "audit",
                "follow",
                "--once",
                "--progress",
                "--trusted-keys",
                str(self.trusted_file),
            ]
            + ["--state", str(self.tmp / state), *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        stderr = without_endpoint_line(result.stderr)  # the endpoints event comes first
        return result.returncode, [json.loads(line) for line in result.stdout.splitlines()], stderr


@pytest.fixture
def deployment(
    services: Services, prefix: str, install_keys: InstallKeys, cli_env: dict[str, str], tmp_path: Path
) -> Iterator[Deployment]:
    topics = fresh_topics(services.bootstrap, prefix)
    trusted_file = tmp_path / "trusted-keys.json"
    trusted_file.write_text(json.dumps(TrustedKeys.from_install(install_keys).to_json()))
    yield Deployment(services, topics, install_keys, trusted_file, principal_env(cli_env, services, "auditor"), tmp_path)


def kinds(alerts: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    return [(a["alert"], a["offset"]) for a in alerts]


def test_clean_traffic_raises_nothing_and_once_exits_0(deployment: Deployment) -> None:
    scheduler = Scheduler(deployment.services.bootstrap, deployment.topics, deployment.keys)
    follower = deployment.follow("--instance-id", "clean")
    try:
        deployment.traffic(runs=20, stages=9)
        audit = deployment.wait_audited(200)
        follower.wait_checked(audit[-1].offset)
    finally:
        scheduler.stop()
        assert follower.stop() == 0, (follower.seen, "".join(follower.stderr))
    assert follower.seen == []
    assert sum(p["records"] for p in follower.progress) == 200 and follower.progress[-1]["next_seq"] == 200
    code, alerts, err = deployment.once()
    assert (code, alerts) == (0, []), err
    assert '"records":200' in err
    code, alerts, err = deployment.once()  # from its checkpoint: the last record is read again, nothing new
    assert (code, alerts, err) == (0, [], "")
    code, alerts, err = deployment.once("--check-journal", state="journal")  # every mirrored record is there
    assert (code, alerts) == (0, []), err
    text = subprocess.run(
        [sys.executable, "-m", "bernstein", "audit", "follow", "--once", "--format", "text"]
        + ["--trusted-keys", str(deployment.trusted_file), "--state", str(deployment.tmp / "text")],
        env=deployment.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = text.stdout.splitlines()
    assert text.returncode == 0 and lines[-1] == "checked 200 records, 0 alerts", text.stderr
    assert len(lines) == 201 and all(line.endswith(" ok") for line in lines[:-1])
    assert lines[0] == f"{deployment.topics.audit}[0]@0 seq 0 activity.result run-a-0 ok"


def test_forged_gap_and_wrong_key_records_alert_within_5_s_while_the_scheduler_runs(deployment: Deployment) -> None:
    scheduler = Scheduler(deployment.services.bootstrap, deployment.topics, deployment.keys)
    follower = deployment.follow()
    expected: list[tuple[str, int]] = []
    try:
        deployment.traffic(runs=3, stages=5)
        audit = deployment.wait_audited(18)
        follower.wait_checked(audit[-1].offset)
        last = audit[-1].value
        fields, key_id, head = parts(last)

        # a record forged with a plain producer: a genuine record's payload edited, its MAC kept
        offset, at = deployment.forge(edited(last, run_id="run-evil"))
        assert follower.wait_alert("mac_mismatch", offset, at) < ALERT_WITHIN
        expected.append(("mac_mismatch", offset))

        # a wrong-key MAC: the next record, MACed with a key that is not the scheduler's (under its key id)
        following = {**fields, "seq": fields["seq"] + 1, "prev_mac": head}
        wrong = remac(genuine_record(deployment.keys.audit.secret, key_id, following)[0], os.urandom(32))
        offset, at = deployment.forge(wrong)
        assert follower.wait_alert("mac_mismatch", offset, at) < ALERT_WITHIN
        expected.append(("mac_mismatch", offset))

        # a record under an audit key nobody pinned
        offset, at = deployment.forge(remac(last, os.urandom(32), "hmac-sha256-key:unpinned"))
        assert follower.wait_alert("unknown_key", offset, at) < ALERT_WITHIN
        expected.append(("unknown_key", offset))

        # the scheduler goes on: its records still link (nothing forged moved the chain)
        deployment.traffic(runs=1, stages=2, tag="b")
        audit = deployment.wait_audited(21)
        follower.wait_checked(audit[-1].offset)

        # a deleted-looking gap: seqs skipped by a record MACed with the real key, linked to the head
        fields, key_id, head = parts(audit[-1].value)
        skipping = {**fields, "seq": fields["seq"] + 4, "prev_mac": head}
        offset, at = deployment.forge(genuine_record(deployment.keys.audit.secret, key_id, skipping)[0])
        assert follower.wait_alert("gap", offset, at) < ALERT_WITHIN
        expected.append(("gap", offset))
    finally:
        scheduler.stop()
        code = follower.stop()
    assert kinds(follower.seen) == expected
    assert code == 2
    code, alerts, _ = deployment.once()
    assert code == 2 and kinds(alerts) == expected


def _ranges_cover_exactly(progress: list[dict[str, Any]], offsets: list[int]) -> None:
    """The checked ranges (of one partition) follow each other without overlap and hold every record once."""
    covered: list[int] = []
    for p in sorted(progress, key=lambda p: int(p["first_offset"])):
        inside = [o for o in offsets if p["first_offset"] <= o <= p["last_offset"]]
        assert len(inside) == p["records"], p
        assert not covered or inside[0] > covered[-1], f"range {p} overlaps what was checked before"
        covered += inside
    assert covered == offsets


def test_a_killed_follower_resumes_without_rechecking_or_skipping_and_reports_a_break_made_while_down(
    deployment: Deployment,
) -> None:
    scheduler = Scheduler(deployment.services.bootstrap, deployment.topics, deployment.keys)
    follower = deployment.follow("--instance-id", "one")

    def stream() -> None:  # 3000 submissions, a run of 50 every 50 ms: the stream lasts seconds on any machine
        for i in range(60):
            deployment.traffic(runs=1, stages=49, tag=f"p{i}")
            time.sleep(0.05)

    publisher = threading.Thread(target=stream, daemon=True)
    try:
        publisher.start()
        follower.wait_checked(0)
        assert follower.stop(signal.SIGKILL) == -signal.SIGKILL
        assert publisher.is_alive(), "the follower was killed after the stream ended: not mid-stream"
        first_run = list(follower.progress)
        publisher.join(120)
        # while it is down: a forged record
        current = deployment.audit()
        offset, _ = deployment.forge(edited(current[-1].value, run_id="run-evil"))
        deployment.traffic(runs=1, stages=9, tag="b")
        audit = deployment.wait_audited(3011)
        follower = deployment.follow("--instance-id", "one")
        follower.wait_checked(audit[-1].offset, timeout=60)
    finally:
        scheduler.stop()
        code = follower.stop()
    assert kinds(follower.seen) == [("mac_mismatch", offset)] and code == 2
    assert first_run and follower.progress
    offsets = [r.offset for r in deployment.audit()]
    assert len(offsets) == 3011
    _ranges_cover_exactly(first_run + follower.progress, offsets)


@pytest.mark.parametrize("padded", [False, True], ids=["record-vanished", "record-changed"])
def test_a_rewritten_topic_is_reported_on_resume_and_its_deleted_record_as_a_gap(deployment: Deployment, padded: bool) -> None:
    bootstrap = deployment.services.bootstrap
    scheduler = Scheduler(bootstrap, deployment.topics, deployment.keys)
    try:
        deployment.traffic(runs=2, stages=9)
        audit = deployment.wait_audited(20)
    finally:
        scheduler.stop()
    code, alerts, _ = deployment.once(state="rw")
    assert (code, alerts) == (0, [])
    # the attacker deletes the topic and writes it again without seq 5 (offsets shift: no transactions now)
    from confluent_kafka.admin import AdminClient

    from bernstein.substrate.kafka import client_config

    topic = deployment.topics.audit
    admin = AdminClient(client_config(bootstrap))
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while True:
        try:
            ensure_topics(bootstrap, deployment.topics)
            break
        except Exception:  # noqa: BLE001 - the deletion takes a moment
            assert time.monotonic() < deadline
            time.sleep(0.5)
    kept = [(r.key, r.value) for r in audit if parts(r.value)[0]["seq"] != 5]
    if padded:  # copies after them, so that the checkpoint's offset holds a record again (another one)
        kept += kept * (audit[-1].offset // len(kept) + 1)
    produce_all(bootstrap, topic, kept)
    wait_stable(bootstrap, topic)
    code, alerts, err = deployment.once(state="rw")
    assert code == 2, err
    assert [a["alert"] for a in alerts[:2]] == ["history_rewritten", "gap"]
    assert ("has changed" in alerts[0]["detail"]) is padded and ("has vanished" in alerts[0]["detail"]) is not padded
    assert alerts[0]["offset"] == audit[-1].offset and alerts[1]["offset"] == 5 and alerts[1]["expected_seq"] == 5
    assert {a["alert"] for a in alerts[2:]} == ({"out_of_order"} if padded else set())  # the copies replay seqs


def test_kafka_errors_are_typed_exit_3_never_a_traceback(deployment: Deployment, services: Services) -> None:
    # a consumer group the auditor is not granted
    follower = deployment.follow("--group", "not-granted")
    code = follower.process.wait(60)
    time.sleep(0.1)
    err = "".join(follower.stderr)
    assert code == 3 and "Read on consumer group 'not-granted'" in err and "Traceback" not in err, err
    # a principal that may not read the audit topic (the producer)
    env = principal_env(deployment.env, services, "producer")
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", "audit", "follow", "--once", "--trusted-keys", str(deployment.trusted_file)]
        + ["--state", str(deployment.tmp / "p")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3 and "refused this client's principal" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    # no broker at all
    env = {**deployment.env, "BERNSTEIN_KAFKA_BOOTSTRAP": "127.0.0.1:9"}
    env.pop("BERNSTEIN_KAFKA_CONFIG_FILE", None)
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", "audit", "follow", "--once", "--trusted-keys", str(deployment.trusted_file)]
        + ["--state", str(deployment.tmp / "q")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3 and "cannot reach Kafka at 127.0.0.1:9" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_two_followers_share_the_partitions_and_one_takes_over_when_the_other_leaves(
    services: Services, prefix: str, install_keys: InstallKeys, cli_env: dict[str, str], tmp_path: Path
) -> None:
    bootstrap = services.bootstrap
    topics = fresh_topics(bootstrap, prefix, partitions=2)
    trusted_file = tmp_path / "trusted-keys.json"
    trusted_file.write_text(json.dumps(TrustedKeys.from_install(install_keys).to_json()))
    deployment = Deployment(services, topics, install_keys, trusted_file, principal_env(cli_env, services, "auditor"), tmp_path)
    runs = {p: [r for r in (f"run-{i}" for i in range(200)) if partition_for(r.encode(), 2) == p][:4] for p in (0, 1)}

    def traffic(tag: str) -> None:
        for partition, run_ids in runs.items():
            items: list[tuple[bytes | None, bytes | None]] = [
                (r.encode(), encode_submission(run_id=r, stage_id=f"{tag}{s}", pages=(f"page {r}/{tag}{s}".encode(),)))
                for r in run_ids
                for s in range(10)
            ]
            produce_all(bootstrap, topics.submissions, items, partition=partition)

    def audited(partition: int, count: int) -> list[int]:
        deadline = time.monotonic() + 60
        while True:
            offsets = [r.offset for r in read_partition(bootstrap, topics, "audit", partition)]
            if len(offsets) >= count:
                return offsets
            assert time.monotonic() < deadline, f"partition {partition}: {len(offsets)} of {count} audit records"
            time.sleep(0.2)

    schedulers = [Scheduler(bootstrap, topics, install_keys, partition) for partition in (0, 1)]
    a = deployment.follow()
    b = deployment.follow()
    try:
        deadline = time.monotonic() + 60
        while not all(f.events and f.events[-1]["event"] == "assigned" and f.events[-1]["partitions"] for f in (a, b)):
            assert time.monotonic() < deadline, f"the group did not share the partitions: {a.events} {b.events}"
            time.sleep(0.1)
        assert sorted(a.events[-1]["partitions"] + b.events[-1]["partitions"]) == [0, 1]
        traffic("x")
        for partition in (0, 1):
            last = audited(partition, 40)[-1]
            owner = a if partition in a.events[-1]["partitions"] else b
            owner.wait_checked(last, partition=partition)
        assert a.stop() == 0  # leaves the group: b gets both partitions, from a's checkpoints
        traffic("y")
        for partition in (0, 1):
            b.wait_checked(audited(partition, 80)[-1], partition=partition)
    finally:
        for scheduler in schedulers:
            scheduler.stop()
        code = b.stop()
    assert a.seen == b.seen == [] and code == 0
    assert {"event": "assigned", "topic": topics.audit, "partitions": [0, 1]} in b.events
    for partition in (0, 1):
        ranges = [p for p in a.progress + b.progress if p["partition"] == partition]
        _ranges_cover_exactly(ranges, audited(partition, 80))


def test_check_journal_reports_a_mirror_the_journal_lacks_within_5_s(deployment: Deployment) -> None:
    scheduler = Scheduler(deployment.services.bootstrap, deployment.topics, deployment.keys)
    follower = deployment.follow("--check-journal")
    try:
        deployment.traffic(runs=2, stages=5)
        audit = deployment.wait_audited(12)
        follower.wait_checked(audit[-1].offset)
        # an audit record that links and verifies (the key's holder wrote it) but mirrors no journal record
        fields, key_id, head = parts(audit[-1].value)
        claim = {**fields, "seq": fields["seq"] + 1, "prev_mac": head, "event": "activity.result", "run_id": "run-a-0"}
        claim["record_hash"] = "sha256:" + "0" * 64
        offset, at = deployment.forge(genuine_record(deployment.keys.audit.secret, key_id, claim)[0])
        assert follower.wait_alert("journal_missing", offset, at) < ALERT_WITHIN
        deployment.traffic(runs=1, stages=3, tag="b")  # the scheduler goes on (its next seq repeats the claim's)
        follower.wait_checked(deployment.wait_audited(17)[-1].offset)
    finally:
        scheduler.stop()
        code = follower.stop()
    assert kinds(follower.seen)[0] == ("journal_missing", offset) and code == 2
    assert {a["alert"] for a in follower.seen[1:]} <= {"out_of_order", "chain_break"}  # the chain the claim forked
    code, alerts, _ = deployment.once("--check-journal")
    assert code == 2 and sorted(kinds(alerts)) == sorted(kinds(follower.seen))  # (journal alerts come when the journal is read)


def test_operational_alerts_dead_letter_refusal_burst_unsealed_run_and_silent_scheduler(deployment: Deployment) -> None:
    follower = deployment.follow("--refusal-burst", "3", "--unsealed-after", "1", "--silent-after", "1")
    scheduler = Scheduler(deployment.services.bootstrap, deployment.topics, deployment.keys)
    try:
        run = b"run-open"
        items: list[tuple[bytes | None, bytes | None]] = [
            (run, encode_submission(run_id="run-open", stage_id=f"s{i}", pages=(b"the same page",))) for i in range(4)
        ]  # s0 is journalled, s1..s3 are REDUNDANT_STAGE refusals; the run is never closed
        items.append((run, b"not a submission"))  # dead-lettered
        produce_all(deployment.services.bootstrap, deployment.topics.submissions, items)
        audit = deployment.wait_audited(5)
        refused = [r.offset for r in audit if parts(r.value)[0]["event"] == "activity.refused"]
        assert len(refused) == 3
        assert follower.wait_kind("refusal_burst", 10)["offset"] == refused[-1]
        assert follower.wait_kind("deadletter", 10)["offset"] == audit[-1].offset
        unsealed = follower.wait_kind("run_unsealed", 10)
        assert (unsealed["offset"], unsealed["run_id"]) == (None, "run-open")
    finally:
        scheduler.stop()
    produce_all(
        deployment.services.bootstrap,
        deployment.topics.submissions,
        [(b"run-late", encode_submission(run_id="run-late", stage_id="s0"))],
    )
    silent = follower.wait_kind("scheduler_silent", 10)
    assert (silent["offset"], silent["waiting"], silent["last_input"]) == (None, 1, 4)
    assert follower.stop() == 2
    assert sorted(a["alert"] for a in follower.seen) == ["deadletter", "refusal_burst", "run_unsealed", "scheduler_silent"]


def test_metrics_count_the_records_checked_and_the_alerts_raised(deployment: Deployment) -> None:
    scheduler = Scheduler(deployment.services.bootstrap, deployment.topics, deployment.keys)
    follower = deployment.follow("--metrics-port", "0")
    try:
        deadline = time.monotonic() + 30
        while not any(e.get("event") == "metrics_listening" for e in follower.events):
            assert time.monotonic() < deadline and follower.process.poll() is None, "".join(follower.stderr)
            time.sleep(0.05)
        url = next(e["url"] for e in follower.events if e.get("event") == "metrics_listening")
        deployment.traffic(runs=4, stages=4)
        audit = deployment.wait_audited(20)
        follower.wait_checked(audit[-1].offset)
        clean = scrape_metrics(url)
        p0 = f'partition="0",prefix="{deployment.topics.prefix}"'  # every sample names the deployment (labels sorted)
        assert clean[f"bernstein_audit_records_verified_total{{{p0}}}"] == len(audit) == 20
        assert all(v == 0 for k, v in clean.items() if k.startswith("bernstein_audit_alerts_total")), clean
        assert clean[f"bernstein_audit_lag_records{{{p0}}}"] == 0
        assert clean[f'bernstein_audit_ready{{prefix="{deployment.topics.prefix}"}}'] == 1
        assert clean[f"bernstein_audit_last_record_timestamp_seconds{{{p0}}}"] == audit[-1].timestamp_ms / 1000
        assert (http_status(url + "/healthz"), http_status(url + "/readyz")) == (200, 200)

        offset, at = deployment.forge(remac(audit[-1].value, os.urandom(32), "hmac-sha256-key:unpinned"))
        follower.wait_alert("unknown_key", offset, at)
        after = scrape_metrics(url)
        assert after[f'bernstein_audit_alerts_total{{kind="unknown_key",prefix="{deployment.topics.prefix}"}}'] == 1
        assert sum(v for k, v in after.items() if k.startswith("bernstein_audit_alerts_total")) == 1
        assert after[f"bernstein_audit_records_verified_total{{{p0}}}"] == 21
    finally:
        scheduler.stop()
        follower.stop()


def test_clean_traffic_of_100k_audit_records_raises_no_alert(services: Services, prefix: str) -> None:
    """The issue's clean-traffic check at its size: 100k signed submissions through the real scheduler."""
    from bench.follow import follower as follow_once
    from bench.scheduler import config as bench_config
    from bench.scheduler import publish
    from bernstein.consumers.core.native import make_core
    from bernstein.consumers.shell import ShellOptions

    count = 100_000
    topics = fresh_topics(services.bootstrap, prefix)
    publish(services.bootstrap, topics.submissions, count, "run")
    scheduler_config = bench_config()
    shell = SchedulerShell(
        bootstrap=services.bootstrap,
        topics=topics,
        partition=0,
        core=make_core(scheduler_config, 0, "auto"),
        options=ShellOptions(),
        progress=None,
    )
    counters = shell.run(until=lambda c: c.consumed >= count, idle_exit=60.0)
    assert counters.consumed == count and counters.refused == 0
    trusted = TrustedKeys(hmac={scheduler_config.audit_key_id: scheduler_config.audit_key})
    checked, _, alerts = follow_once(services.bootstrap, topics, trusted)
    assert alerts == []
    assert checked == count + counters.seals  # one audit record per journal record (entries and seals)


def test_a_time_based_alert_on_resume_keeps_the_checkpoint_on_its_record_no_false_rewrite(deployment: Deployment) -> None:
    """The hourly ``--once`` after a quiet spell: resumed from its checkpoint, the follower raises
    ``run_unsealed`` before it reads any new record and saves its checkpoint again. That checkpoint must still pin
    the record it names: the next start finds the same record, reports no ``history_rewritten`` and re-checks nothing."""
    scheduler = Scheduler(deployment.services.bootstrap, deployment.topics, deployment.keys)
    try:
        produce_all(
            deployment.services.bootstrap,
            deployment.topics.submissions,
            [(b"run-quiet", encode_submission(run_id="run-quiet", stage_id="s0"))],  # never closed
        )
        deployment.wait_audited(1)
    finally:
        scheduler.stop()

    def checked(stderr: str) -> list[dict[str, Any]]:
        events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
        return [e for e in events if e.get("event") == "checked"]

    code, alerts, stderr = deployment.once()
    assert code == 0 and alerts == [] and len(checked(stderr)) == 1, stderr
    time.sleep(1.5)
    code, alerts, stderr = deployment.once("--unsealed-after", "1")
    assert [a["alert"] for a in alerts] == ["run_unsealed"], (alerts, stderr)
    assert checked(stderr) == [], stderr  # nothing new was read before the alert
    code, alerts, stderr = deployment.once("--unsealed-after", "1")
    assert "history_rewritten" not in [a["alert"] for a in alerts] and code != 2, (alerts, stderr)
    assert checked(stderr) == [], stderr  # resumed where it was: nothing re-checked


def _wait_event(follower: Follower, event: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
    """The first ``--progress`` event named ``event`` with ``fields`` (already seen or coming within ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        for line in list(follower.events):
            if line.get("event") == event and all(line.get(k) == v for k, v in fields.items()):
                return line
        assert follower.process.poll() is None, f"follower exited {follower.process.returncode}: {''.join(follower.stderr)}"
        assert time.monotonic() < deadline, f"no {event} {fields} within {timeout} s: {follower.events}"
        time.sleep(0.05)


def _latched(url: str, prefix: str) -> dict[str, float]:
    """``bernstein_audit_tamper_latched`` of partition 0 by kind, as scraped."""
    found = {}
    for name, value in scrape_metrics(url).items():
        if name.startswith("bernstein_audit_tamper_latched{"):
            labels = dict(item.split("=", 1) for item in name[name.index("{") + 1 : -1].split(","))
            assert labels["prefix"] == f'"{prefix}"', name
            if labels["partition"] == '"0"':
                found[labels["kind"].strip('"')] = value
    return found


def test_a_chain_break_stays_latched_across_a_restart_until_acknowledged_with_audit_ack(deployment: Deployment) -> None:
    """a tamper finding latches (state directory and gauge), survives a restart, and is cleared only
    by `bernstein audit ack`, which logs who and why; a new finding of the kind latches again."""
    bootstrap, topics = deployment.services.bootstrap, deployment.topics
    secret, key_id = deployment.keys.audit.secret, deployment.keys.audit.key_id
    records = chain(secret, key_id, 0, [("activity.result", "run-1")] * 3)
    # seq 3, MACed with the real key (as a thief of the key would) but linked to seq 0, not to seq 2: a chain break
    broken, _ = genuine_record(secret, key_id, entry(0, 3, records[0][1]))
    offsets = produce_all(bootstrap, topics.audit, [(b"run-1", v) for v, _ in records] + [(b"run-1", broken)])
    state = deployment.tmp / "state"

    first = deployment.follow("--metrics-port", "0", "--instance-id", "latch")
    try:
        url = _wait_event(first, "metrics_listening")["url"]
        first.wait_alert("chain_break", offsets[3], time.monotonic(), timeout=30)
        latched = _wait_event(first, "latched", kind="chain_break")
        assert (latched["partition"], latched["first_offset"], latched["findings"]) == (0, offsets[3], 1)
        assert "--partition 0 --kind chain_break" in latched["ack"] and f"--state {state}" in latched["ack"]
        deadline = time.monotonic() + 10
        while _latched(url, topics.prefix).get("chain_break") != 1:
            assert time.monotonic() < deadline, _latched(url, topics.prefix)
            time.sleep(0.1)
        assert sum(_latched(url, topics.prefix).values()) == 1  # every other tamper kind served at 0
    finally:
        assert first.stop() == 2
    on_disk = json.loads((state / f"{topics.audit}.0.latches.json").read_text())
    assert [(x["kind"], x["id"], x["first"]["offset"]) for x in on_disk["latches"]] == [
        ("chain_break", latched["latch"], offsets[3])
    ]

    # restarted on the same state: nothing is checked again, and the latch is back, gauge and all
    second = deployment.follow("--metrics-port", "0", "--instance-id", "latch")
    try:
        url = _wait_event(second, "metrics_listening")["url"]
        held = _wait_event(second, "latch_held", kind="chain_break")
        assert held["latch"] == latched["latch"]
        deadline = time.monotonic() + 10
        while _latched(url, topics.prefix).get("chain_break") != 1:
            assert time.monotonic() < deadline, _latched(url, topics.prefix)
            time.sleep(0.1)

        def ack(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "bernstein", "audit", "ack", "--prefix", topics.prefix, "--state", str(state)]
                + ["--partition", "0", "--kind", "chain_break", *extra],
                env=deployment.env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
            )

        done = ack("--reason", "seq 3 forged in the test; the chain is otherwise intact", "--by", "tester")
        assert done.returncode == 0, done.stderr
        logged = json.loads(done.stdout)
        assert (logged["by"], logged["kind"], logged["partition"], logged["latch"], logged["findings"]) == (
            "tester",
            "chain_break",
            0,
            latched["latch"],
            1,
        )
        assert logged["reason"] == "seq 3 forged in the test; the chain is otherwise intact"
        assert logged["evidence"]["first"]["alert"] == "chain_break" and logged["evidence"]["first"]["offset"] == offsets[3]
        assert [json.loads(line) for line in (state / "acks.jsonl").read_text().splitlines()] == [logged]

        cleared = _wait_event(second, "latch_acknowledged", timeout=10, kind="chain_break")
        assert (cleared["by"], cleared["latch"]) == ("tester", latched["latch"])
        deadline = time.monotonic() + 10
        while _latched(url, topics.prefix).get("chain_break") != 0:
            assert time.monotonic() < deadline, _latched(url, topics.prefix)
            time.sleep(0.1)
        again = ack("--reason", "twice")
        assert again.returncode == 3 and "no chain_break finding is latched on" in again.stderr, again.stderr
        assert "Traceback" not in again.stderr and again.stdout == ""

        # a new break of the same kind latches again, under a new id
        offset, at = deployment.forge(genuine_record(secret, key_id, entry(0, 4, records[0][1]))[0])
        second.wait_alert("chain_break", offset, at, timeout=10)
        relatched = _wait_event(second, "latched", kind="chain_break", first_offset=offset)
        assert relatched["latch"] != latched["latch"]
        deadline = time.monotonic() + 10
        while _latched(url, topics.prefix).get("chain_break") != 1:
            assert time.monotonic() < deadline, _latched(url, topics.prefix)
            time.sleep(0.1)
    finally:
        code = second.stop()
    assert code == 2
    assert [a["alert"] for a in second.seen] == ["chain_break"]  # the restart re-checked nothing


def test_a_first_once_with_a_fresh_state_catches_a_scheduler_that_never_started(deployment: Deployment) -> None:
    """Submissions wait and no audit record was ever written: the hourly ``--once`` with a fresh ``--state`` raises
    ``scheduler_silent`` from the submissions' own timestamps, instead of starting its silence clock now."""
    produce_all(
        deployment.services.bootstrap,
        deployment.topics.submissions,
        [(b"run-waits", encode_submission(run_id="run-waits", stage_id="s0"))],
    )
    code, alerts, stderr = deployment.once("--silent-after", "60", state="fresh-young")
    assert (code, [a["alert"] for a in alerts]) == (0, []), stderr  # younger than the threshold: not yet
    time.sleep(2.5)
    code, alerts, stderr = deployment.once("--silent-after", "2", state="fresh-old")
    silent = [a for a in alerts if a["alert"] == "scheduler_silent"]
    assert [(a["partition"], a["waiting"], a["last_input"]) for a in silent] == [(0, 1, -1)], (alerts, stderr)
    assert code == 2, "an alert was raised (EXIT_ALERTS)"
    assert [a["alert"] for a in alerts] == ["scheduler_silent"], "operational only: nothing latches"
