"""Fault injection: a store or broker that does not answer is an outage, never tampering ("Checks").

One real run is built per module: coding stages and a browser session (recorded with the fake driver)
published as signed submissions into fresh topics of the real (secured) broker and journalled by the
real scheduler, every blob in a bucket of the module's own in the real MinIO (unversioned: a changed
blob stays changed), and exported once into a dump. Then ``activity verify`` (text and ``--json``),
``topic export``, ``browser replay``, ``audit follow --once`` and the scheduler's rebuild run against
stores and brokers that fail (``tests/support/faults.py``):

- S3 unreachable (nothing listens), answering 500 or 403 (a fake S3), behind a proxy that holds every
  response back far beyond the deadline, behind a proxy that cuts every response mid-body or inside its
  headers, and a proxy that stopped listening; Kafka unreachable (a closed port);
- each command ends within ``BOUND``, which follows from the deadline (``BERNSTEIN_S3_TIMEOUT`` and
  ``BERNSTEIN_KAFKA_CONNECT_TIMEOUT``, 2 s each) plus start-up; never with exit 2, a tamper alert or a
  latch; always naming the outage (``STORE_UNAVAILABLE`` and its ``failure`` in ``--json``, the store's
  endpoint and what to check); never with a traceback;
- the follower and the scheduler do not touch S3 at all (a failing store changes nothing for them);
- the same run, genuinely tampered (blob bytes changed in MinIO, a forged audit record), still exits 2,
  naming the stage, the action or the record.

The fault runs are independent commands, so they run a few at a time (``outcomes``, once per module);
each one's time is its own, measured around its process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from bernstein.commands.common import without_endpoint_line
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell
from bernstein.producers.activity import ActivityResult, observe
from bernstein.producers.computer_use import Frame, ProposedAction, ScriptedAgent
from bernstein.producers.computer_use.session import ComputerUseSession
from bernstein.producers.emitter import encode_signed_close
from bernstein.substrate.cas import Failure, S3BlobStore, S3Settings
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import init_keys, init_producer_keys
from tests.conftest import REPO, Services, principal_env
from tests.support import tamper as kit
from tests.support.audit_forge import edited
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, InMemoryScheduler, RecordingPublisher
from tests.support.faults import FailingS3, FaultProxy, closed_port
from tests.support.kafka import fresh_topics, produce_all, read_partition
from tests.support.prefixes import fresh_prefix
from tests.support.producer_setup import write_manifest

RUN: Final = "run-faults"
SESSION: Final = "browser-0"
CODING_STAGES: Final = 3
STAGES: Final = (*(f"stage-{i}" for i in range(CODING_STAGES)), SESSION)
DEADLINE: Final = 2.0
"""BERNSTEIN_S3_TIMEOUT and BERNSTEIN_KAFKA_CONNECT_TIMEOUT of every command here."""
BOUND: Final = 20.0 + 2 * DEADLINE
"""The most one command may take when a store or broker fails: start-up and reading the topics (a few seconds,
several more with a few commands at once on a busy 2-core machine) plus one request's deadline, whose attempts
share it. Waiting the client's own timeouts (60 s a read before), or asking blob after blob (4 stages, 20 blobs),
would take far longer; the delaying proxy holds each answer back ``HELD`` seconds."""
HELD: Final = 120.0
WORKERS: Final = 4
FLOW: Final = [
    ProposedAction("navigate", "http://site/signup.html"),
    ProposedAction("type", "#name", "Ada Lovelace"),
    ProposedAction("check", "#terms"),
    ProposedAction("submit", "#submit"),
]
EXPECTED: Final = {
    "unreachable": Failure.UNREACHABLE,
    "stopped": Failure.UNREACHABLE,
    "server_error": Failure.SERVER_ERROR,
    "access_denied": Failure.ACCESS_DENIED,
    "held_back": Failure.TIMEOUT,
    "cut_mid_body": Failure.INTERRUPTED,
    "cut_in_headers": Failure.INTERRUPTED,
}
"""Each way the store fails, and the ``failure`` the outage must be named as."""
FAULTS: Final = ("unreachable", "server_error", "access_denied", "held_back", "cut_mid_body")
"""The faults every command meets; ``activity verify --json`` meets all of ``EXPECTED``."""


@dataclass
class Run:
    """The module's run: where it is, how to reach it, and which blobs to change."""

    services: Services
    prefix: str
    store: S3BlobStore
    """The module's own bucket (unversioned)."""
    trust: Path
    dump: Path
    """The run exported whole (records and blobs); verified with ``--cas s3`` it reads its blobs from the store."""
    env: dict[str, str]
    """The admin's environment for ``bernstein`` against the run (each command runs as its own principal)."""
    tmp: Path
    stage_blobs: dict[str, str]
    """stage id -> the digest of its first observation."""
    screenshot: str
    """The digest of the browser session's second screenshot (action 1's)."""

    def with_store(self, endpoint: str) -> dict[str, str]:
        return {**self.env, "BERNSTEIN_S3_ENDPOINT": endpoint}

    def with_broker(self, bootstrap: str) -> dict[str, str]:
        return {**self.env, "BERNSTEIN_KAFKA_BOOTSTRAP": bootstrap}


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    took: float

    @property
    def said(self) -> str:
        return f"exit {self.code} after {self.took:.1f}s\n{self.stdout}\n{self.stderr}"

    def json(self) -> Any:
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError:
            raise AssertionError(f"no JSON on stdout: {self.said}") from None


def bernstein(args: list[str], env: dict[str, str], principal: str, services: Services) -> Result:
    """``bernstein ARGS`` as ``principal`` (its own client properties on the secured broker), timed."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bernstein", *args],
        env=principal_env(env, services, principal),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return Result(done.returncode, done.stdout, done.stderr, time.monotonic() - began)


def frames(n: int) -> list[Frame]:
    return [
        Frame(
            screenshot=b"\x89PNG\r\n\x1a\n" + f"frame-{i}".encode() * 400,
            aria_snapshot=f'- heading "Step {i}"\n',
            url=f"http://site/{i}",
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def run(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    began = time.monotonic()
    tmp = tmp_path_factory.mktemp("faults")
    prefix = fresh_prefix()
    topics = fresh_topics(services.bootstrap, prefix)
    own = S3Settings(services.s3.endpoint, services.s3.access_key, services.s3.secret_key, f"faults-{os.urandom(4).hex()}")
    store = S3BlobStore(own)
    store.ensure_bucket()  # unversioned: a changed blob cannot be read back from an older version
    install = init_keys(tmp / "keys")
    producer = init_producer_keys(tmp / "producer-keys", "navigator@faults")
    memory = InMemoryScheduler(producer, keys=install, roles={"navigator": "browser", "developer": "coding"})
    publisher = RecordingPublisher(producer)

    stage_blobs = {}
    for i in range(CODING_STAGES):
        files = [(f"src/stage-{i}/{name}", f"# stage {i}: {name}\n".encode() * 40) for name in ("a.py", "b.py")]
        artifact = f"diff for stage {i}\n".encode()
        for data in (*(data for _, data in files), artifact):
            store.put(data)
        result = ActivityResult.build("coding", artifact, [observe("file", ref, data) for ref, data in files])
        stage_blobs[f"stage-{i}"] = result.observations[0].content_hash
        publisher.publish_result(RUN, f"stage-{i}", "developer", result)
    session = ComputerUseSession(
        RUN, SESSION, keys=producer, store=store, publisher=publisher, worker_id=producer.name, worktree=tmp / "worktree"
    )
    outcome = session.run(ScriptedAgent(FLOW), FakeDriverFactory(FakeDriver(frames(len(FLOW) + 1))))
    assert outcome.ok, outcome.error
    close = encode_signed_close(
        submission_id=f"close-{RUN}", run_id=RUN, producer_id=producer.name, occurred_at_ms=0, signer=producer.signer
    )
    values = [*publisher.values(), (RUN, close)]
    produce_all(services.bootstrap, topics.submissions, [(run_id.encode(), value) for run_id, value in values])
    shell = SchedulerShell(
        bootstrap=services.bootstrap, topics=topics, partition=0, core=SchedulerCore(memory.core.config), progress=None
    )
    assert shell.run(until=lambda c: c.consumed >= len(values), idle_exit=60).consumed == len(values)
    assert read_partition(services.bootstrap, topics, "refusals") == []

    print(f"\nrun built in {time.monotonic() - began:.1f}s")
    trust = tmp / "trusted-keys.json"
    memory.trusted().write(trust)
    env = {
        **kit.cli_env(services, prefix, install, manifest=write_manifest(tmp / "roles.toml", producer)),
        "BERNSTEIN_S3_BUCKET": own.bucket,
        "BERNSTEIN_S3_TIMEOUT": str(DEADLINE),
        "BERNSTEIN_KAFKA_CONNECT_TIMEOUT": str(DEADLINE),
        # every command here is a fresh interpreter: compiled modules cached outside the tree, not compiled each time
        "PYTHONPYCACHEPREFIX": str(tmp_path_factory.mktemp("pycache")),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    dump = tmp / "dump"
    exported = bernstein(["topic", "export", "--run", RUN, "--out", str(dump)], env, "auditor", services)
    assert exported.code == 0, exported.said
    print(f"exported in {exported.took:.1f}s")
    yield Run(services, prefix, store, trust, dump, env, tmp, stage_blobs, outcome.records[1].screenshot_hash)
    try:  # housekeeping: the module's bucket and its blobs
        client = store._client
        for item in client.list_objects(own.bucket, recursive=True):
            client.remove_object(own.bucket, item.object_name)
        client.remove_bucket(own.bucket)
    except Exception as exc:  # noqa: BLE001 - must not turn the module's result into an error
        print(f"\nleft bucket {own.bucket} in place: {exc}", file=sys.stderr)


@dataclass
class Stores:
    """One failing endpoint per fault (each proxy keeps its mode), the passing proxy, and a failing store that
    only the follower and the scheduler are pointed at (its request count says whether they asked it)."""

    urls: dict[str, str]
    passing: FaultProxy
    quiet: FailingS3


@pytest.fixture(scope="module")
def stores(services: Services) -> Iterator[Stores]:
    host, port = services.s3.endpoint.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    target = (host, int(port))
    proxies = {name: FaultProxy(target) for name in ("passing", "held_back", "cut_mid_body", "cut_in_headers", "stopped")}
    failing = {status: FailingS3(status) for status in (500, 403)}
    quiet = FailingS3(500)
    urls = {
        "unreachable": f"http://127.0.0.1:{closed_port()}",
        "server_error": failing[500].url,
        "access_denied": failing[403].url,
        "held_back": proxies["held_back"].delaying(HELD).url,
        "cut_mid_body": proxies["cut_mid_body"].cutting(16, body=True).url,
        "cut_in_headers": proxies["cut_in_headers"].cutting(40, body=False).url,
        "stopped": proxies["stopped"].refusing().url,
    }
    yield Stores(urls, proxies["passing"], quiet)
    for proxy in proxies.values():
        proxy.close()
    for server in (*failing.values(), quiet):
        server.close()


Step = tuple[list[str], dict[str, str], str]
"""One command: its arguments, its environment, the principal it runs as."""


def jobs(run: Run, stores: Stores) -> dict[str, list[Step]]:
    """The fault matrix: name -> the commands of one job, run one after the other (most jobs are one command)."""
    trust = ["--trusted-keys", str(run.trust)]
    from_dump = ["--from", str(run.dump), "--cas", "s3"]
    found: dict[str, list[Step]] = {}
    for fault, url in stores.urls.items():
        found[f"verify-json/{fault}"] = [
            (["activity", "verify", RUN, *from_dump, *trust, "--json"], run.with_store(url), "auditor")
        ]
    for fault in ("unreachable", "held_back"):
        args = ["activity", "verify", RUN, *from_dump, *trust]
        found[f"verify-text/{fault}"] = [(args, run.with_store(stores.urls[fault]), "auditor")]
    args = ["activity", "verify", RUN, *trust, "--json"]
    found["verify-kafka/held_back"] = [(args, run.with_store(stores.urls["held_back"]), "auditor")]
    for fault in FAULTS:
        url = stores.urls[fault]
        out = str(run.tmp / f"export-{fault}")
        found[f"export/{fault}"] = [(["topic", "export", "--run", RUN, "--out", out], run.with_store(url), "auditor")]
        found[f"replay/{fault}"] = [(["browser", "replay", RUN, *from_dump, *trust, "--json"], run.with_store(url), "auditor")]
    broker = run.with_broker(f"127.0.0.1:{closed_port()}")
    found["kafka-down/verify"] = [(["activity", "verify", RUN, *trust, "--json"], broker, "auditor")]
    found["kafka-down/export"] = [
        (["topic", "export", "--run", RUN, "--out", str(run.tmp / "export-kafka-down")], broker, "auditor")
    ]
    found["kafka-down/replay"] = [(["browser", "replay", RUN, *trust, "--json"], broker, "auditor")]
    follow = ["audit", "follow", "--once", *trust, "--state", str(run.tmp / "follow")]
    found["follow"] = [  # one state directory: the second run resumes from the first one's checkpoint, the third too
        (follow, run.with_store(stores.quiet.url), "auditor"),
        (follow, broker, "auditor"),
        (follow, run.env, "auditor"),
    ]
    found["scheduler"] = [
        (["scheduler", "run", "--partition", "0", "--idle-exit", "1"], run.with_store(stores.quiet.url), "scheduler"),
        (["scheduler", "run", "--partition", "0"], broker, "scheduler"),
    ]
    found["baseline"] = [(["activity", "verify", RUN, *trust, "--json"], run.with_store(stores.passing.passing().url), "auditor")]
    found["usage"] = [(["activity", "verify", RUN, *from_dump, *trust], {**run.env, "BERNSTEIN_S3_TIMEOUT": "soon"}, "auditor")]
    return found


def in_turn(steps: list[Step], services: Services) -> list[Result]:
    return [bernstein(args, env, principal, services) for args, env, principal in steps]


@pytest.fixture(scope="module")
def outcomes(run: Run, stores: Stores) -> dict[str, list[Result]]:
    """Every job of ``jobs``, a few at a time; the longest sequences first."""
    todo = sorted(jobs(run, stores).items(), key=lambda item: -len(item[1]))
    began = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = {name: pool.submit(in_turn, steps, run.services) for name, steps in todo}
        done = {name: future.result() for name, future in futures.items()}
    print(f"\n{len(done)} jobs in {time.monotonic() - began:.1f}s:")  # shown with -s: the measured times
    for name, results in done.items():
        print(f"  {name:28} " + ", ".join(f"exit {r.code} {r.took:4.1f}s" for r in results))
    return done


def assert_an_outage(result: Result, expected_exit: int, endpoint: str) -> None:
    """Never a tamper verdict; the expected exit within the bound; the endpoint named; no traceback."""
    assert result.code != 2, f"an outage judged as tampering: {result.said}"
    assert result.code == expected_exit, result.said
    assert result.took < BOUND, f"{result.took:.1f}s (bound {BOUND:.0f}s): the outage was waited out: {result.said}"
    assert "Traceback" not in result.stderr + result.stdout, result.said
    # named by the error itself, not only by the first stderr line (which names every endpoint a command uses)
    said = result.stdout + without_endpoint_line(result.stderr)
    assert endpoint in said, f"the store {endpoint} is not named: {result.said}"


# ---------------------------------------------------------------------------
# activity verify
# ---------------------------------------------------------------------------


def test_the_run_verifies_through_the_passing_proxy(outcomes: dict[str, list[Result]]) -> None:
    """The baseline: from Kafka, every stage and the session verified, the proxy in the path."""
    result = outcomes["baseline"][0]
    assert result.code == 0, result.said
    stages = result.json()["stages"]
    assert [s["stage_id"] for s in stages] == list(STAGES)
    assert all(s["ok"] and s["evidence_reattached"] for s in stages)


@pytest.mark.parametrize("fault", list(EXPECTED))
def test_verify_json_names_the_outage_and_is_not_fully_verified(
    outcomes: dict[str, list[Result]], stores: Stores, fault: str
) -> None:
    result, endpoint = outcomes[f"verify-json/{fault}"][0], stores.urls[fault]
    assert_an_outage(result, 6, endpoint)
    document = result.json()
    assert document["verdict"] == "not_fully_verified" and document["exit_code"] == 6
    assert all(document[part]["ok"] for part in ("chain", "seal", "audit", "producers"))  # the records were judged
    stages = document["stages"]
    assert [s["stage_id"] for s in stages] == list(STAGES)
    for stage in stages:
        assert not stage["ok"] and stage["unchecked"].startswith("STORE_UNAVAILABLE: ") and "problems" not in stage, stage
        data = stage["data"]
        assert (data["code"], data["failure"], data["endpoint"]) == ("STORE_UNAVAILABLE", EXPECTED[fault], endpoint), stage
        assert data["hint"] and data["store"].startswith("s3 bucket faults-"), stage
    assert stages[0]["data"]["error"] in stages[0]["unchecked"] and stages[0]["data"]["hint"] in stages[0]["unchecked"]


def test_verify_from_kafka_with_a_stalled_store_is_not_fully_verified(outcomes: dict[str, list[Result]], stores: Stores) -> None:
    result = outcomes["verify-kafka/held_back"][0]
    assert_an_outage(result, 6, stores.urls["held_back"])
    assert {s["data"]["failure"] for s in result.json()["stages"]} == {Failure.TIMEOUT}


@pytest.mark.parametrize("fault", ["unreachable", "held_back"])
def test_verify_text_says_not_checked_never_mismatch(outcomes: dict[str, list[Result]], stores: Stores, fault: str) -> None:
    result, endpoint = outcomes[f"verify-text/{fault}"][0], stores.urls[fault]
    assert_an_outage(result, 6, endpoint)
    lines = result.stdout.splitlines()
    assert not any("MISMATCH" in line for line in lines), result.stdout
    assert lines[-1].startswith(f"not fully verified -- not checked: {len(STAGES)} stages;"), lines[-1]
    unchecked = [line for line in lines if line.startswith("  NOT CHECKED ")]
    assert len(unchecked) == len(STAGES) and all("STORE_UNAVAILABLE" in line for line in unchecked), result.stdout
    assert endpoint in unchecked[0] and all("nothing more was asked" in line for line in unchecked[1:]), result.stdout


def test_a_deadline_that_is_not_a_number_is_a_usage_error(outcomes: dict[str, list[Result]]) -> None:
    result = outcomes["usage"][0]
    assert result.code == 3 and "BERNSTEIN_S3_TIMEOUT='soon' is not a number of seconds" in result.stderr, result.said


# ---------------------------------------------------------------------------
# topic export and browser replay
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fault", FAULTS)
def test_export_stops_on_the_outage_and_lists_nothing_as_missing(
    outcomes: dict[str, list[Result]], stores: Stores, run: Run, fault: str
) -> None:
    result = outcomes[f"export/{fault}"][0]
    assert_an_outage(result, 3, stores.urls[fault])
    assert "is incomplete" in result.stderr and "export again once the store answers" in result.stderr, result.said
    assert not (run.tmp / f"export-{fault}" / "manifest.json").exists()  # no dump that reads as whole, or as tampered


@pytest.mark.parametrize("fault", FAULTS)
def test_replay_names_the_outage_never_a_divergence(outcomes: dict[str, list[Result]], stores: Stores, fault: str) -> None:
    result = outcomes[f"replay/{fault}"][0]
    assert_an_outage(result, 3, stores.urls[fault])
    assert f"STORE_UNAVAILABLE ({EXPECTED[fault]})" in result.stderr, result.said
    assert result.stdout == ""  # no replay document: nothing was judged


# ---------------------------------------------------------------------------
# Kafka unreachable
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["verify", "export", "replay"])
def test_an_unreachable_broker_is_named_never_judged(outcomes: dict[str, list[Result]], command: str) -> None:
    result = outcomes[f"kafka-down/{command}"][0]
    assert result.code == 3 and result.took < BOUND, result.said
    assert "cannot reach Kafka at 127.0.0.1:" in result.stderr and "Traceback" not in result.stderr, result.said
    assert result.stdout == ""  # no report, so no verdict


# ---------------------------------------------------------------------------
# audit follow and the scheduler's rebuild: Kafka only
# ---------------------------------------------------------------------------


def alerts_of(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_the_follower_reads_no_store_and_an_unreachable_broker_leaves_no_alert_or_latch(
    outcomes: dict[str, list[Result]], stores: Stores, run: Run
) -> None:
    with_failing_store, broker_down, resumed = outcomes["follow"]
    assert (with_failing_store.code, alerts_of(with_failing_store)) == (0, []), with_failing_store.said
    assert stores.quiet.requests == 0  # neither the follower nor the scheduler touches S3: their faults are Kafka's
    assert (broker_down.code, alerts_of(broker_down)) == (3, []) and broker_down.took < BOUND, broker_down.said
    assert "cannot reach Kafka at 127.0.0.1:" in broker_down.stderr and "Traceback" not in broker_down.stderr
    assert not list((run.tmp / "follow").glob("*latches*")), list((run.tmp / "follow").iterdir())
    # resumed from the checkpoint the outage left as it was: no false rewrite, nothing new
    assert (resumed.code, alerts_of(resumed)) == (0, []), resumed.said


def test_the_scheduler_rebuilds_without_the_store_and_an_unreachable_broker_is_no_tampering(
    outcomes: dict[str, list[Result]], stores: Stores
) -> None:
    rebuilt, broker_down = outcomes["scheduler"]
    said = (rebuilt.stdout + rebuilt.stderr).lower()
    assert rebuilt.code == 0 and "state rebuilt from" in said and "corrupt" not in said, rebuilt.said
    assert stores.quiet.requests == 0  # the scheduler never touches S3
    said = (broker_down.stdout + broker_down.stderr).lower()
    assert broker_down.code == 3 and broker_down.took < BOUND and "traceback" not in said, broker_down.said
    assert "cannot reach kafka at 127.0.0.1:" in said and not any(word in said for word in ("corrupt", "tamper", "rewritten"))


# ---------------------------------------------------------------------------
# the same run, tampered: still exit 2, naming what changed
# ---------------------------------------------------------------------------


def test_blobs_changed_in_the_store_are_still_a_mismatch_naming_the_stage_and_the_action(run: Run, stores: Stores) -> None:
    digest = run.stage_blobs["stage-1"]
    true_bytes, shot = run.store.get(digest), run.store.get(run.screenshot)
    run.store.overwrite_for_test(digest, true_bytes.replace(b"stage 1", b"stage X", 1))
    run.store.overwrite_for_test(run.screenshot, shot[:-1] + bytes([shot[-1] ^ 1]))
    try:
        env = run.with_store(stores.passing.passing().url)
        trust = ["--trusted-keys", str(run.trust)]
        commands = {
            "kafka": ["activity", "verify", RUN, *trust, "--json"],
            "dump": ["activity", "verify", RUN, "--from", str(run.dump), "--cas", "s3", *trust, "--json"],
            "replay": ["browser", "replay", RUN, "--from", str(run.dump), "--cas", "s3", *trust, "--json"],
        }
        with ThreadPoolExecutor(WORKERS) as pool:
            futures = {name: pool.submit(bernstein, args, env, "auditor", run.services) for name, args in commands.items()}
            results = {name: future.result() for name, future in futures.items()}
    finally:
        run.store.overwrite_for_test(digest, true_bytes)
        run.store.overwrite_for_test(run.screenshot, shot)
    for name in ("kafka", "dump"):
        result = results[name]
        assert result.code == 2, result.said
        failed = [s for s in result.json()["stages"] if not s["ok"]]
        assert [s["stage_id"] for s in failed] == ["stage-1", SESSION] and not any(s.get("unchecked") for s in failed)
        assert "content hash mismatch" in failed[0]["reason"] and digest in failed[0]["reason"], failed[0]
        assert "screenshot_changed" in failed[1]["reason"], failed[1]
    replayed = results["replay"]
    assert replayed.code == 2, replayed.said
    (session,) = replayed.json()["sessions"]
    assert (session["divergence"]["reason"], session["divergence"]["action_index"]) == ("screenshot_changed", 1)


def test_a_forged_audit_record_still_alerts_and_fails_verify(run: Run) -> None:
    """Last in the module: the forged record stays in the topic."""
    topics = Topics(run.prefix)
    last = read_partition(run.services.bootstrap, topics, "audit")[-1]
    (offset,) = produce_all(run.services.bootstrap, topics.audit, [(b"forged", edited(last.value or b"", run_id="run-evil"))])
    trust = ["--trusted-keys", str(run.trust)]
    with ThreadPoolExecutor(2) as pool:
        following = pool.submit(
            bernstein, ["audit", "follow", "--once", *trust, "--state", str(run.tmp / "forged")], run.env, "auditor", run.services
        )
        verifying = pool.submit(bernstein, ["activity", "verify", RUN, *trust, "--json"], run.env, "auditor", run.services)
        followed, verified = following.result(), verifying.result()
    assert followed.code == 2 and [(a["alert"], a["offset"]) for a in alerts_of(followed)] == [("mac_mismatch", offset)], (
        followed.said
    )
    assert verified.code == 2 and verified.json()["audit"]["problem"]["code"] == "AUDIT_MAC_MISMATCH", verified.said
