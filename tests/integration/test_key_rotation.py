"""Key rotation end to end ("Checks"): the seal key, the audit key and a producer key are
rotated while submissions flow; the scheduler restarts; every run verifies with the exported
trusted-keys file; a run verified with only the old or only the new keys fails with named verdicts;
a revoked producer key is refused.

Real parts only: the scheduler is ``bernstein scheduler run`` (a subprocess, stopped with SIGTERM
and started again), keys are made, rotated and exported with ``bernstein keys``, a feeder thread
publishes signed submissions through the emitter SDK with the producer host's key directory (and
rotates that key itself, as the producer host would), and every run is checked with
``bernstein activity verify --from kafka --cas s3``.

The timeline (T_seal < T_audit < T_producer < R, each taken from the key rings and manifest):

1. scheduler S1 (old keys) journals the first submissions of three runs;
2. S1 stops (SIGTERM) while the feed goes on; the scheduler's seal and audit keys are rotated
   (``keys rotate --purpose seal|audit``), the feeder rotates its producer key
   (``keys rotate --producer``) and signs with the new one from then on, and the manifest gets
   the producer's ring as ``keys rotate`` printed it (old key ends at T_producer, new key from it);
3. S2 starts: the backlog stamped before T_seal / T_audit is still sealed / MACed with the old
   keys (their private parts were kept), everything later with the new ones;
4. every run is closed; S2 stops; the newest producer key is revoked in the manifest (its
   ``valid_until_ms`` set to now, R); S3 starts and refuses what either producer key signs after
   its lifetime (PRODUCER_KEY_NOT_VALID, read back from the refusals topic).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bernstein.commands.keys import manifest_snippet, producer_manifest_keys
from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter
from bernstein.schemas import codec
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import KeyPurpose, KeyRing, ProducerKeys, load_keys, load_producer_keys, load_ring
from tests.support import tamper as kit
from tests.support.kafka import Rec, fresh_topics, read_partition
from tests.support.pipeline import VERIFIED, verify_dump_json
from tests.support.prefixes import fresh_prefix
from tests.support.principals import component_env, producer_principal
from tests.support.producer_setup import ROLES_TOML

PRODUCER = "rotating-worker@it"
RUNS = ("run-rot-0", "run-rot-1", "run-rot-2")
REVOKED_RUN = "run-rot-revoked"
SEAL_EVERY = 2
CHECKPOINT_EVERY = 6
FEED_INTERVAL = 0.1
"""Seconds between two submissions of the feeder."""


# ---------------------------------------------------------------------------
# the deployment: scheduler keys, a producer host, the manifest, the scheduler process
# ---------------------------------------------------------------------------


def write_manifest(path: Path, ring: KeyRing, *, revoked_at_ms: int | None = None) -> None:
    """config/roles.toml's roles and the producer with every key of its ``ring`` (``keys rotate``'s snippet).

    ``revoked_at_ms``: the newest key's lifetime ends there (the operator revokes it in the manifest).
    """
    assert ring.producer is not None
    keys = producer_manifest_keys(ring)
    if revoked_at_ms is not None:
        keys[-1] = {**keys[-1], "valid_until_ms": revoked_at_ms, "status": "revoked"}
    entry = manifest_snippet(ring.producer, keys, roles=["developer"])
    path.write_text(ROLES_TOML.read_text(encoding="utf-8").rstrip() + "\n\n" + entry + "\n", encoding="utf-8")


class Scheduler:
    """``bernstein scheduler run`` as a subprocess; its stderr (progress lines) is collected by a thread."""

    def __init__(self, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                str(kit.BERNSTEIN),
                "scheduler",
                "run",
                "--seal-every",
                str(SEAL_EVERY),
                "--checkpoint-every",
                str(CHECKPOINT_EVERY),
                "--progress-every",
                "0.2",
            ],
            cwd=kit.REPO,
            env=component_env(["scheduler", "run"], env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def consumed(self) -> int:
        found = [int(m.group(1)) for line in list(self.lines) for m in [re.search(r"consumed (\d+) ", line)] if m]
        return found[-1] if found else 0

    def wait_consumed(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.consumed() < count:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the scheduler consumed {self.consumed()} of {count}:\n{self.log}")
            time.sleep(0.05)

    def stop(self) -> str:
        """SIGTERM, then its whole log; it must stop cleanly (exit 0, no traceback)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        self._reader.join(timeout=10)
        assert self.process.returncode == 0, self.log
        assert "Traceback" not in self.log, self.log
        return self.log


@dataclass
class Sent:
    run_id: str
    stage_id: str
    key_id: str
    offset: int


class Feeder(threading.Thread):
    """The producer host: publishes a signed submission every ``FEED_INTERVAL`` s, round robin over ``RUNS``;
    asked to (``rotate``), it rotates its own producer key with ``bernstein keys rotate --producer`` between
    two submissions and signs with the new key from then on."""

    def __init__(self, services: Any, store: S3BlobStore, topics: Topics, keys_dir: Path, env: dict[str, str]) -> None:
        super().__init__(name="feeder", daemon=True)
        self.services, self.store, self.topics, self.keys_dir, self.env = services, store, topics, keys_dir, env
        self.sent: list[Sent] = []
        self.error: BaseException | None = None
        self._stop_asked = threading.Event()
        self._rotate_asked = threading.Event()
        self._rotated = threading.Event()

    def run(self) -> None:
        try:
            self._feed()
        except BaseException as exc:  # reported by the test thread (join)
            self.error = exc

    def _emitter(self) -> tuple[ProducerKeys, Emitter]:
        keys = load_producer_keys(self.keys_dir)
        with producer_principal(self.services):
            return keys, Emitter(bootstrap=self.services.bootstrap, store=self.store, topics=self.topics, producer=keys)

    def _feed(self) -> None:
        keys, emitter = self._emitter()
        i = 0
        while not self._stop_asked.is_set():
            if self._rotate_asked.is_set() and not self._rotated.is_set():
                emitter.close()
                result = kit.bernstein(["keys", "rotate", "--producer", "--dir", str(self.keys_dir)], self.env)
                assert result.returncode == 0, result.stderr
                keys, emitter = self._emitter()
                self._rotated.set()
            run_id, stage_id = RUNS[i % len(RUNS)], f"stage-{i:03d}"
            page = emitter.capture("file", f"src/{stage_id}.py", f"# {stage_id}\nprint({i})\n".encode())
            result_ = ActivityResult.build("coding", f"diff for {stage_id}\n".encode(), [page])
            published = emitter.publish(run_id=run_id, stage_id=stage_id, role="developer", result=result_)
            self.sent.append(Sent(run_id, stage_id, keys.signer.key_id, published.offset))
            i += 1
            time.sleep(FEED_INTERVAL)
        emitter.close()

    def rotate(self, timeout: float = 30.0) -> None:
        self._rotate_asked.set()
        assert self._rotated.wait(timeout), "the feeder did not rotate its key"

    def wait_sent(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.sent) < count:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, f"the feeder sent {len(self.sent)} of {count}"
            time.sleep(0.02)

    def finish(self) -> None:
        self._stop_asked.set()
        self.join(timeout=30)
        assert self.error is None, self.error


@dataclass
class Rotated:
    """What the rotation left behind: the topics as read back, a dump of the runs, key rings, times, logs."""

    env: dict[str, str]
    keys_dir: Path
    manifest: Path
    ring: KeyRing
    """The scheduler's ring after both rotations."""
    producer_ring: KeyRing
    revoked_at_ms: int
    sent: list[Sent]
    streams: dict[str, list[Rec]]
    """Every record of submissions, journal, audit, checkpoints and refusals (partition 0), read back once."""
    dump: Path
    """``bernstein topic export`` of ``RUNS``."""
    logs: list[str]
    """The three schedulers' stderr."""
    workdir: Path

    def key(self, purpose: KeyPurpose, index: int) -> str:
        ring = self.producer_ring if purpose == KeyPurpose.PRODUCER else self.ring
        return ring.of(purpose)[index].key_id

    def rotated_at(self, purpose: KeyPurpose) -> int:
        ring = self.producer_ring if purpose == KeyPurpose.PRODUCER else self.ring
        until = ring.of(purpose)[0].validity.valid_until_ms
        assert until is not None
        return until

    def journal(self, run_id: str) -> list[Rec]:
        return [rec for rec in self.streams["journal"] if rec.key == run_id.encode()]


def bernstein_ok(args: list[str], env: dict[str, str]) -> str:
    result = kit.bernstein(args, env)
    assert result.returncode == 0, f"bernstein {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def rotated(services: Any, tmp_path_factory: pytest.TempPathFactory) -> Rotated:
    workdir = tmp_path_factory.mktemp("rotation")
    prefix = fresh_prefix()
    topics = fresh_topics(services.bootstrap, prefix)
    keys_dir, producer_dir, manifest = workdir / "scheduler-keys", workdir / "producer-keys", workdir / "roles.toml"
    base = kit.offline_env()
    bernstein_ok(["keys", "init", "--dir", str(keys_dir)], base)
    bernstein_ok(["keys", "init", "--producer", PRODUCER, "--dir", str(producer_dir)], base)
    write_manifest(manifest, load_ring(producer_dir))
    env = kit.cli_env(services, prefix, load_keys(keys_dir), load_producer_keys(producer_dir), manifest)
    store = S3BlobStore(services.s3)
    feeder = Feeder(services, store, topics, producer_dir, env)
    logs: list[str] = []
    scheduler = Scheduler(env)
    try:
        feeder.start()
        # 1. the old keys
        feeder.wait_sent(9)
        scheduler.wait_consumed(9)
        logs.append(scheduler.stop())
        time.sleep(0.3)  # submissions stamped before the rotation wait for the restarted scheduler
        # 2. rotations while the feed goes on (the scheduler is down: a backlog builds up)
        bernstein_ok(["keys", "rotate", "--purpose", "seal", "--dir", str(keys_dir)], env)
        time.sleep(0.2)  # a few submissions between the two rotations
        bernstein_ok(["keys", "rotate", "--purpose", "audit", "--dir", str(keys_dir)], env)
        feeder.rotate()
        write_manifest(manifest, load_ring(producer_dir))
        # 3. the restart: the backlog, then the new keys
        before = len(feeder.sent)
        scheduler = Scheduler(env)
        feeder.wait_sent(before + 9)
        feeder.finish()
        with producer_principal(services):
            closer = Emitter(bootstrap=services.bootstrap, store=store, topics=topics, producer=load_producer_keys(producer_dir))
        with closer as em:
            for run_id in RUNS:
                em.close_run(run_id)
        published = len(feeder.sent) + len(RUNS)
        scheduler.wait_consumed(published - consumed_by(logs[0]))
        logs.append(scheduler.stop())
        # 4. the operator revokes the producer's newest key in the manifest and restarts the scheduler
        revoked_at = int(time.time() * 1000)
        write_manifest(manifest, load_ring(producer_dir), revoked_at_ms=revoked_at)
        time.sleep(0.01)
        scheduler = Scheduler(env)
        producer = load_producer_keys(producer_dir)
        (old_key, _) = producer.ring.of(KeyPurpose.PRODUCER)
        assert old_key.signer is not None, "a retired (not revoked) producer key keeps its private part"
        with producer_principal(services):
            late = Emitter(bootstrap=services.bootstrap, store=store, topics=topics, producer=producer)
        with late as em:
            for label, signer in (("new", producer.signer), ("old", old_key.signer)):
                page = em.capture("file", f"src/after-revocation-{label}.py", f"# signed by the {label} key\n".encode())
                em.signer = signer  # the producer host still holds both keys
                em.publish(
                    run_id=REVOKED_RUN,
                    stage_id=f"after-revocation-{label}",
                    role="developer",
                    result=ActivityResult.build("coding", f"diff {label}\n".encode(), [page]),
                )
        scheduler.wait_consumed(2)
        logs.append(scheduler.stop())
    finally:
        feeder.finish()
        if scheduler.process.poll() is None:
            scheduler.process.kill()
    streams = {s: read_partition(services.bootstrap, topics, s) for s in ("journal", "audit", "checkpoints", "refusals")}
    streams["submissions"] = read_partition(services.bootstrap, topics, "submissions")
    assert len(streams["submissions"]) == published + 2
    dump = workdir / "dump"
    bernstein_ok(["topic", "export", *[a for run_id in RUNS for a in ("--run", run_id)], "--out", str(dump)], env)
    return Rotated(
        env=env,
        keys_dir=keys_dir,
        manifest=manifest,
        ring=load_ring(keys_dir),
        producer_ring=load_ring(producer_dir),
        revoked_at_ms=revoked_at,
        sent=feeder.sent,
        streams=streams,
        dump=dump,
        logs=logs,
        workdir=workdir,
    )


def consumed_by(log: str) -> int:
    """What a scheduler consumed, from its final ``stopped:`` line."""
    (final,) = [line for line in log.splitlines() if "stopped:" in line]
    match = re.search(r"consumed (\d+) ", final)
    assert match, final
    return int(match.group(1))


@pytest.fixture(scope="module")
def trust(rotated: Rotated) -> Path:
    """``bernstein keys trust --dir <scheduler keys> --manifest <roles.toml>``, after the rotations and the revocation."""
    out = rotated.workdir / "trust.json"
    bernstein_ok(
        ["keys", "trust", "--dir", str(rotated.keys_dir), "--manifest", str(rotated.manifest), "--out", str(out)], rotated.env
    )
    return out


def payload(rec: Rec) -> dict[str, Any]:
    """The decoded payload of an output envelope (JournalRecord, SealRecord, AuditRecord, CheckpointRecord)."""
    return dict(codec.decode(rec.record["payload"]).record)


def verify(r: Rotated, run_id: str, trust_file: Path) -> tuple[int, dict[str, Any]]:
    """``bernstein activity verify RUN --from <dump> --json``, offline, against the export of the runs."""
    return verify_dump_json(r.dump, run_id, trust_file)


def trust_subset(source: Path, out: Path, key_ids: set[str]) -> Path:
    """The exported trusted-keys file with only ``key_ids`` kept (everything else of the file unchanged)."""
    document = json.loads(source.read_text(encoding="utf-8"))
    document["keys"] = [k for k in document["keys"] if k["key_id"] in key_ids]
    assert {k["key_id"] for k in document["keys"]} == key_ids
    out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return out


def first(records: list[Rec], key_id: str) -> Rec:
    """The first of ``records`` (in offset order) signed or MACed by ``key_id``."""
    return next(rec for rec in records if rec.record["key_id"] == key_id)


# ---------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------


def test_the_scheduler_restarted_across_the_rotation_and_chose_keys_by_input_timestamp(rotated: Rotated) -> None:
    """Each seal, checkpoint and audit record is signed or MACed by the key whose lifetime holds its input's
    Kafka timestamp, including the backlog the restarted scheduler found (stamped before the rotation)."""
    r = rotated
    t_seal, t_audit, t_producer = (r.rotated_at(p) for p in (KeyPurpose.SEAL, KeyPurpose.AUDIT, KeyPurpose.PRODUCER))
    assert t_seal < t_audit < t_producer < r.revoked_at_ms
    old_seal, new_seal = r.key(KeyPurpose.SEAL, 0), r.key(KeyPurpose.SEAL, 1)
    old_audit, new_audit = r.key(KeyPurpose.AUDIT, 0), r.key(KeyPurpose.AUDIT, 1)
    assert "seal keys: 1, audit keys: 1" in r.logs[0]
    for log in r.logs[1:]:  # the restarts rebuilt their state from what the earlier schedulers wrote
        assert "seal keys: 2, audit keys: 2" in log and "state rebuilt from" in log, log
    submissions = {rec.offset: rec for rec in r.streams["submissions"]}
    seals = [rec for rec in r.streams["journal"] if rec.schema == codec.SEAL_RECORD]
    for seal in seals:
        assert seal.record["key_id"] == (old_seal if seal.timestamp_ms < t_seal else new_seal), seal.offset
        assert seal.timestamp_ms == submissions[payload(seal)["last_input_offset"]].timestamp_ms  # its input's
    for checkpoint in r.streams["checkpoints"]:
        assert checkpoint.record["key_id"] == (old_seal if checkpoint.timestamp_ms < t_seal else new_seal)
    for rec in r.streams["audit"]:
        assert rec.record["key_id"] == (old_audit if rec.timestamp_ms < t_audit else new_audit), rec.offset
    for stream in ("journal", "checkpoints"):
        assert {rec.record["key_id"] for rec in r.streams[stream] if rec.schema != codec.JOURNAL_RECORD} == {old_seal, new_seal}
    assert {rec.record["key_id"] for rec in r.streams["audit"]} == {old_audit, new_audit}
    # the backlog: inputs stamped before the seal rotation that only the restarted scheduler consumed
    first_after_restart = consumed_by(r.logs[0])
    backlog = [rec for rec in r.streams["submissions"][first_after_restart:] if rec.timestamp_ms < t_seal]
    assert backlog, "no submission stamped before the rotation waited for the restarted scheduler"
    sealed_backlog = [s for s in seals if s.timestamp_ms < t_seal and payload(s)["last_input_offset"] >= first_after_restart]
    assert all(s.record["key_id"] == old_seal for s in sealed_backlog)
    # the producer key: every submission before the producer's rotation signed with the old key, after with the new
    for sent in r.sent:
        stamped = submissions[sent.offset].timestamp_ms
        assert sent.key_id == r.key(KeyPurpose.PRODUCER, 0 if stamped < t_producer else 1)
    assert not [rec for rec in r.streams["refusals"] if rec.record["run_id"] in RUNS]


def test_every_run_verifies_with_the_exported_trust_file_and_names_both_keys_of_each_kind(rotated: Rotated, trust: Path) -> None:
    r = rotated
    old_producer, new_producer = r.key(KeyPurpose.PRODUCER, 0), r.key(KeyPurpose.PRODUCER, 1)
    pinned = {k["key_id"]: k for k in json.loads(trust.read_text(encoding="utf-8"))["keys"]}
    assert {k: (v["purpose"], v["valid_from_ms"], v["valid_until_ms"]) for k, v in pinned.items()} == {
        r.key(KeyPurpose.SEAL, 0): ("seal", 0, r.rotated_at(KeyPurpose.SEAL)),
        r.key(KeyPurpose.SEAL, 1): ("seal", r.rotated_at(KeyPurpose.SEAL), None),
        r.key(KeyPurpose.AUDIT, 0): ("audit", 0, r.rotated_at(KeyPurpose.AUDIT)),
        r.key(KeyPurpose.AUDIT, 1): ("audit", r.rotated_at(KeyPurpose.AUDIT), None),
        old_producer: ("producer", 0, r.rotated_at(KeyPurpose.PRODUCER)),
        new_producer: ("producer", r.rotated_at(KeyPurpose.PRODUCER), r.revoked_at_ms),  # the manifest's revocation
    }
    both = {p: sorted({r.key(p, 0), r.key(p, 1)}) for p in (KeyPurpose.SEAL, KeyPurpose.AUDIT)}
    for run_id in RUNS:
        code, document = verify(r, run_id, trust)
        assert code == 0, json.dumps({k: v for k, v in document.items() if k != "stages"}, indent=2)
        records = r.journal(run_id)
        assert sorted({rec.record["key_id"] for rec in records if rec.schema == codec.SEAL_RECORD}) == both[KeyPurpose.SEAL]
        assert document["keys"]["seal"] == both[KeyPurpose.SEAL]
        assert document["keys"]["checkpoint"] == both[KeyPurpose.SEAL]
        assert document["keys"]["audit"] == both[KeyPurpose.AUDIT]
        entries = [payload(rec) for rec in records if rec.schema == codec.JOURNAL_RECORD]
        sent = {s.stage_id: s.key_id for s in r.sent if s.run_id == run_id}
        assert sorted(e["stage_id"] for e in entries) == sorted(sent)
        assert [e["producer_key_id"] for e in entries] == [sent[e["stage_id"]] for e in entries]
        counts = {old_producer: 0, new_producer: 1}  # the run close (new key), kept in the final seal
        for e in entries:
            counts[e["producer_key_id"]] += 1
        assert min(counts.values()) > 1, counts
        assert document["keys"]["producer"] == sorted(
            [{"key_id": k, "producer": PRODUCER, "records": n} for k, n in counts.items()], key=lambda k: str(k["key_id"])
        )
    # and the live topics, as an auditor with access to Kafka and S3 checks them
    result = kit.bernstein(["activity", "verify", RUNS[0], "--from", "kafka", "--cas", "s3", "--trusted-keys", str(trust)], r.env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == VERIFIED


@pytest.mark.parametrize("purpose", [KeyPurpose.SEAL, KeyPurpose.AUDIT, KeyPurpose.PRODUCER], ids=str)
@pytest.mark.parametrize("kept", ["old", "new"])
def test_only_the_old_or_only_the_new_key_fails_with_a_named_verdict(
    rotated: Rotated, trust: Path, tmp_path: Path, purpose: KeyPurpose, kept: str
) -> None:
    """The exported file with one purpose's other key left out: exit 2, and the section of that key names
    the first record it signed or MACed, the key that is missing and the one that is pinned; the rest verifies."""
    r = rotated
    run_id = RUNS[0]
    keep, drop = (r.key(purpose, 0), r.key(purpose, 1)) if kept == "old" else (r.key(purpose, 1), r.key(purpose, 0))
    others = {r.key(p, i) for p in (KeyPurpose.SEAL, KeyPurpose.AUDIT, KeyPurpose.PRODUCER) if p != purpose for i in (0, 1)}
    code, document = verify(r, run_id, trust_subset(trust, tmp_path / f"{purpose}-{kept}-only.json", others | {keep}))
    assert code == 2, json.dumps({k: v for k, v in document.items() if k != "stages"}, indent=2)
    assert (document["verdict"], document["exit_code"]) == ("mismatch", 2)
    failing: dict[str, dict[str, Any]] = {}
    if purpose == KeyPurpose.SEAL:
        seal = first([rec for rec in r.journal(run_id) if rec.schema == codec.SEAL_RECORD], drop)
        failing["seal"] = {"code": "SEAL_KEY_NOT_PINNED", "stream": "journal", "offset": seal.offset}
        checkpoint = first(r.streams["checkpoints"], drop)
        failing["audit"] = {
            "code": "CHECKPOINT_KEY_NOT_PINNED",
            "stream": "checkpoints",
            "offset": checkpoint.offset,
            "audit_seq": payload(checkpoint)["audit_seq"],
        }
    elif purpose == KeyPurpose.AUDIT:
        record = first(r.streams["audit"], drop)
        failing["audit"] = {
            "code": "AUDIT_KEY_NOT_PINNED",
            "stream": "audit",
            "offset": record.offset,
            "audit_seq": payload(record)["seq"],
        }
    else:
        entry = next(
            rec for rec in r.journal(run_id) if rec.schema == codec.JOURNAL_RECORD and payload(rec)["producer_key_id"] == drop
        )
        failing["producers"] = {
            "code": "PRODUCER_KEY_NOT_PINNED",
            "stream": "journal",
            "offset": entry.offset,
            "seq": payload(entry)["seq"],
        }
    for section in ("chain", "seal", "audit", "producers"):
        problem = document[section]["problem"]
        if section not in failing:
            assert (document[section]["ok"], problem) == (True, None), section
            continue
        assert document[section]["ok"] is False
        assert {k: v for k, v in problem.items() if k != "message"} == {**failing[section], "expected": keep, "recomputed": drop}
        assert drop in problem["message"] and "not among the pinned" in problem["message"]
    assert all(stage["ok"] for stage in document["stages"])  # the evidence itself is intact


def test_a_producer_key_used_after_its_lifetime_is_refused(rotated: Rotated) -> None:
    """After the revocation, a submission signed with the revoked key and one signed with the retired key are
    refused PRODUCER_KEY_NOT_VALID (the refusals topic holds exactly these two), naming the input's timestamp
    and the key's lifetime."""
    r = rotated
    submissions = {rec.offset: rec for rec in r.streams["submissions"]}
    t_producer = r.rotated_at(KeyPurpose.PRODUCER)
    lifetimes = {
        "new": (r.key(KeyPurpose.PRODUCER, 1), f"[{t_producer}, {r.revoked_at_ms})"),
        "old": (r.key(KeyPurpose.PRODUCER, 0), f"[0, {t_producer})"),
    }
    refused = [rec.record for rec in r.streams["refusals"]]
    assert [(x["run_id"], x["stage_id"], x["code"], x["field"]) for x in refused] == [
        (REVOKED_RUN, "after-revocation-new", "PRODUCER_KEY_NOT_VALID", "producer_key_id"),
        (REVOKED_RUN, "after-revocation-old", "PRODUCER_KEY_NOT_VALID", "producer_key_id"),
    ]
    for x in refused:
        key_id, lifetime = lifetimes[x["stage_id"].rsplit("-", 1)[1]]
        stamped = submissions[x["input"]["offset"]].timestamp_ms
        assert stamped >= r.revoked_at_ms
        assert (x["declared"], x["recomputed"]) == (str(stamped), lifetime)
        assert x["message"] == (
            f"producer key {key_id} of {PRODUCER!r} signs inputs stamped {lifetime}; this input is stamped "
            f"{stamped} (retired, revoked or not yet valid)"
        )
    assert "consumed 2 journalled 0 refused 2" in r.logs[2]
