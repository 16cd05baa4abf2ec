"""A compromised agent host ("Checks"): with everything one producer host holds, try to forge.

Producer ``mallory@agents`` is taken over. Its host holds its producer key directory
(``bernstein keys init --producer``: the Ed25519 producer key, the lineage HMAC key, the redaction
HMAC key) and its Kafka credentials (the producer principal when the broker is secured). It knows
everything public: the other producer's public key (it is in the manifest and in every trust file),
the scheduler's key ids (they are in every record) and, to give it the best chance, every record of
the topics. With only that, it tries to

* forge a seal (a RunSeal signed with its producer key: under its own key id, and under the
  scheduler's seal key id) and append it to the journal topic;
* forge an audit record (MACed with its lineage key, the only HMAC key it has: under that key's id,
  under the scheduler's audit key id, under its producer key's id);
* submit another producer's activity (``alice@agents``: claiming her name, claiming her key id);
* submit a stage under a role it was not granted;
* submit with a key it made itself, or without a signature;
* write a journal entry straight to the journal topic (hash-chained and signed by its own key,
  under a role it was not granted).

Each attempt is stopped by the broker (ACL: the producer principal may write only to the
submissions topic), refused by the scheduler (a typed refusal code, read back from the refusals
topic), or caught by ``bernstein activity verify`` (exit 2 and the exact problem code). The
attempts are a table (``ATTEMPTS``): one test per row asserts exactly which layers stopped it and
with which code, and the table of outcomes is printed at the end of the module.

On a plaintext broker (``infra/up`` without ``--secure``) there are no ACLs: the forged journal and
audit records are written by the producer's own client and the table says the broker let them
through; the verifier still names each.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from bernstein.commands.keys import manifest_snippet, producer_manifest_keys
from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter, encode_signed_submission
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    audit_record_mac,
    journal_entry_hash,
    seal_signing_input,
    submission_signing_input,
    submission_statement,
)
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import client_config, client_config_as, delivery_error
from bernstein.substrate.keys import Ed25519Signer, InstallKeys, ProducerKeys, load_keys, load_producer_keys
from bernstein.verifier.sources import StoredRecord, encode_dump_line
from tests.support import tamper as kit
from tests.support.kafka import Rec, fresh_topics, read_partition, submission_record
from tests.support.pipeline import verify_dump_json
from tests.support.prefixes import fresh_prefix
from tests.support.principals import producer_principal, secure
from tests.support.producer_setup import ROLES_TOML

MALLORY: Final = "mallory@agents"
"""The compromised producer host."""
ALICE: Final = "alice@agents"
"""Another producer, honest."""
ALICE_RUN, ALICE_RUN_2 = "run-alice", "run-alice-2"
MALLORY_RUN, MALLORY_OPEN_RUN = "run-mallory", "run-mallory-open"
RUNS: Final = (ALICE_RUN, ALICE_RUN_2, MALLORY_RUN, MALLORY_OPEN_RUN)

BROKER, SCHEDULER, VERIFIER = "broker", "scheduler", "verifier"
DUMP_COPY: Final = "n/a: written to a copy of the dump"
SECTIONS: Final = ("chain", "seal", "audit", "producers")
"""The sections of ``activity verify``'s report that check records (the stages check evidence)."""


# ---------------------------------------------------------------------------
# the deployment and the attack session
# ---------------------------------------------------------------------------


def write_manifest(path: Path, mallory: ProducerKeys, alice: ProducerKeys) -> None:
    """config/roles.toml's roles; both producers may take only ``developer``."""
    entries = [manifest_snippet(p.name, producer_manifest_keys(p.ring), roles=["developer"]) for p in (mallory, alice)]
    path.write_text(ROLES_TOML.read_text(encoding="utf-8").rstrip() + "\n\n" + "\n\n".join(entries) + "\n", encoding="utf-8")


def bernstein_ok(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = kit.bernstein(args, env)
    assert result.returncode == 0, f"bernstein {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


@dataclass
class Layer:
    """What one layer did with one attempt: ``stopped`` it (with ``code``) or let it through."""

    layer: str
    stopped: bool
    code: str = ""
    detail: str = ""


@dataclass
class Session:
    """The deployment, and what each layer did with each attempt (filled in by the ``session`` fixture)."""

    services: Any
    topics: Topics
    env: dict[str, str]
    keys: InstallKeys
    mallory: ProducerKeys
    alice: ProducerKeys
    trust: Path
    workdir: Path
    secure: bool
    outcomes: dict[str, list[Layer]] = field(default_factory=dict)
    documents: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    """attempt -> (verify's exit code, its JSON report) after the forgery."""
    forged: dict[str, StoredRecord] = field(default_factory=dict)
    """attempt -> the forged record as it was written (topic, offset, bytes)."""
    baseline: dict[str, int] = field(default_factory=dict)
    """run -> verify's exit code before any forgery."""
    refusals: dict[str, dict[str, Any]] = field(default_factory=dict)
    """stage id -> the scheduler's Refusal record."""
    journalled: set[str] = field(default_factory=set)
    """Stage ids with a journal entry (before any forgery)."""
    broker_end: dict[str, tuple[int, int]] = field(default_factory=dict)
    """attempt -> the topic's end offset before and after the producer principal's refused write."""
    audit_head: Rec | None = None
    """The audit chain's last record before any forged audit record (each forgery links to it)."""

    def add(self, attempt: str, layer: Layer) -> None:
        self.outcomes.setdefault(attempt, []).append(layer)


def producer_client(s: Session) -> Any:
    """The compromised host's own Kafka client: its credentials (the producer principal on a secured broker)."""
    extra = {"acks": "all", "enable.idempotence": True}
    if s.secure:
        config = client_config_as(s.services.principal_file("producer"), s.services.bootstrap, **extra)
    else:
        config = client_config(s.services.bootstrap, **extra)
    return Producer({**config, "message.timeout.ms": 15000})


def high_watermark(s: Session, topic: str) -> int:
    """The topic's end offset (partition 0), read by the test's own client."""
    consumer = Consumer(client_config(s.services.bootstrap, **{"group.id": "tests.compromised"}))
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15, cached=False)[1])
    finally:
        consumer.close()


def admin_client(s: Session) -> Any:
    """The test's own client (the Kafka admin on a secured broker): writes what the broker kept the producer from."""
    return Producer({**client_config(s.services.bootstrap, acks="all"), "message.timeout.ms": 15000})


def produce(client: Any, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> tuple[Any, Any]:
    """Produce one record and wait for its delivery report: (error or None, message)."""
    outcome: list[tuple[Any, Any]] = []
    client.produce(topic, key=key, value=value, headers=headers, on_delivery=lambda err, msg: outcome.append((err, msg)))
    assert client.flush(30) == 0, "no delivery report within 30 s"
    (result,) = outcome
    return result


def write_forgery(s: Session, attempt: str, stream: str, key: bytes, value: bytes, ce_type: bytes) -> None:
    """The compromised host writes ``value`` to ``stream``'s topic with its own credentials. Where the broker
    refuses it (typed: ``KafkaNotAuthorized``) nothing reaches the topic (its end offset does not move), and the
    test's admin client writes the same bytes (an attacker who got past the broker), so that the verifier's
    layer is exercised too."""
    topic = s.topics.by_stream(stream)
    headers = [("ce_specversion", b"1.0"), ("ce_id", b"forged"), ("ce_source", b"bernstein/scheduler"), ("ce_type", ce_type)]
    end = high_watermark(s, topic)
    err, msg = produce(producer_client(s), topic, key, value, headers)
    if err is None:
        s.add(attempt, Layer(BROKER, False, detail="plaintext broker: no ACLs" if not s.secure else "accepted"))
    else:
        typed = delivery_error(err, topic)  # the typed refusal
        s.add(attempt, Layer(BROKER, True, err.name(), f"{type(typed).__name__} {typed.code}: {typed}"))
        s.broker_end[attempt] = (end, high_watermark(s, topic))
        err, msg = produce(admin_client(s), topic, key, value, headers)
        assert err is None, err
    s.forged[attempt] = StoredRecord(stream, topic, msg.partition(), msg.offset(), msg.timestamp()[1], key, value)


def verify_dump(s: Session, dump: Path, run_id: str) -> tuple[int, dict[str, Any]]:
    return verify_dump_json(dump, run_id, s.trust)


def export(s: Session, out: Path, *runs: str) -> Path:
    bernstein_ok(["topic", "export", *[a for run_id in runs for a in ("--run", run_id)], "--out", str(out)], s.env)
    return out


def payload(rec: Rec) -> dict[str, Any]:
    return dict(codec.decode(rec.record["payload"]).record)


def journal_of(s: Session, run_id: str) -> list[Rec]:
    return [rec for rec in read_partition(s.services.bootstrap, s.topics, "journal") if rec.key == run_id.encode()]


def result_of(emitter: Emitter, label: str) -> ActivityResult:
    page = emitter.capture("file", f"src/{label}.py", f"# {label}\n".encode())
    return ActivityResult.build("coding", f"diff for {label}\n".encode(), [page])


@pytest.fixture(scope="module")
def session(services: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    workdir = tmp_path_factory.mktemp("compromised")
    prefix = fresh_prefix()
    topics = fresh_topics(services.bootstrap, prefix)
    keys_dir, manifest = workdir / "scheduler-keys", workdir / "roles.toml"
    base = kit.offline_env()
    bernstein_ok(["keys", "init", "--dir", str(keys_dir)], base)
    for name, directory in ((MALLORY, "mallory-keys"), (ALICE, "alice-keys")):
        bernstein_ok(["keys", "init", "--producer", name, "--dir", str(workdir / directory)], base)
    mallory, alice = load_producer_keys(workdir / "mallory-keys"), load_producer_keys(workdir / "alice-keys")
    write_manifest(manifest, mallory, alice)
    keys = load_keys(keys_dir)
    env = kit.cli_env(services, prefix, keys, mallory, manifest)
    trust = workdir / "trust.json"
    bernstein_ok(["keys", "trust", "--dir", str(keys_dir), "--manifest", str(manifest), "--out", str(trust)], env)
    s = Session(services, topics, env, keys, mallory, alice, trust, workdir, secure=secure(services))
    store = S3BlobStore(services.s3)

    # 1. honest activity, then the compromised host's submissions, through the scheduler (a subprocess)
    with producer_principal(services):
        by_alice = Emitter(bootstrap=services.bootstrap, store=store, topics=topics, producer=alice)
        by_mallory = Emitter(bootstrap=services.bootstrap, store=store, topics=topics, producer=mallory)
    with by_alice, by_mallory:
        for run_id in (ALICE_RUN, ALICE_RUN_2):
            for i in range(2):
                by_alice.publish(
                    run_id=run_id, stage_id=f"alice-{i}", role="developer", result=result_of(by_alice, f"{run_id}-{i}")
                )
        for run_id, count in ((MALLORY_RUN, 2), (MALLORY_OPEN_RUN, 1)):
            for i in range(count):
                label = f"{run_id}-{i}"
                by_mallory.publish(run_id=run_id, stage_id=f"mallory-{i}", role="developer", result=result_of(by_mallory, label))
        for attempt in SCHEDULER_ATTEMPTS:
            run_id, value = attempt.submission(s, store)
            by_mallory.publish_raw(run_id, value)
        by_alice.close_run(ALICE_RUN)
        by_alice.close_run(ALICE_RUN_2)
        by_mallory.close_run(MALLORY_RUN)
    ran = bernstein_ok(["scheduler", "run", "--idle-exit", "3", "--progress-every", "60"], env)
    assert "consumed 15 journalled 7 refused 5" in ran.stderr, ran.stderr
    refusals = read_partition(services.bootstrap, topics, "refusals")
    s.refusals = {rec.record["stage_id"]: rec.record for rec in refusals}
    assert len(s.refusals) == len(refusals) == len(SCHEDULER_ATTEMPTS)
    s.journalled = {
        payload(rec)["stage_id"]
        for rec in read_partition(services.bootstrap, topics, "journal")
        if rec.schema == codec.JOURNAL_RECORD
    }
    for attempt in SCHEDULER_ATTEMPTS:
        refusal = s.refusals.get(attempt.stage_id)
        journalled = attempt.stage_id in s.journalled
        s.add(
            attempt.name, Layer(SCHEDULER, refusal is not None and not journalled, refusal["code"] if refusal else "journalled")
        )

    # 2. before any forgery every run verifies (the open one is open)
    pristine = export(s, workdir / "pristine", *RUNS)
    for run_id in RUNS:
        s.baseline[run_id] = verify_dump(s, pristine, run_id)[0]

    # 3. forgeries written to the journal topic; each run exported and verified
    for forgery in JOURNAL_ATTEMPTS:
        stream, key, value, ce_type = forgery.forge(s)
        write_forgery(s, forgery.name, stream, key, value, ce_type)
    forged = export(s, workdir / "forged", *RUNS)
    for forgery in JOURNAL_ATTEMPTS:
        s.documents[forgery.name] = verify_dump(s, forged, forgery.run_id)

    # 4. forged audit records: one on the live audit topic (verified live), the others each in a copy of the pristine dump
    s.audit_head = read_partition(services.bootstrap, topics, "audit")[-1]
    for forgery in AUDIT_ATTEMPTS:
        stream, key, value, ce_type = forgery.forge(s)
        if forgery.live:
            write_forgery(s, forgery.name, stream, key, value, ce_type)
            s.documents[forgery.name] = verify_live(s, forgery.run_id)
        else:
            dump = workdir / forgery.name
            shutil.copytree(pristine, dump)
            s.forged[forgery.name] = append_to_dump(dump, stream, key, value)
            s.add(forgery.name, Layer(BROKER, False, detail=DUMP_COPY))
            s.documents[forgery.name] = verify_dump(s, dump, forgery.run_id)
    for forgery in (*JOURNAL_ATTEMPTS, *AUDIT_ATTEMPTS):
        code, document = s.documents[forgery.name]
        found = [document[section]["problem"]["code"] for section in SECTIONS if document[section]["problem"]]
        s.add(forgery.name, Layer(VERIFIER, code == 2, f"exit {code}: {', '.join(found)}"))

    yield s


def verify_live(s: Session, run_id: str) -> tuple[int, dict[str, Any]]:
    """``bernstein activity verify RUN --from kafka --cas s3 --json`` against the live topics."""
    args = ["activity", "verify", run_id, "--from", "kafka", "--cas", "s3", "--trusted-keys", str(s.trust), "--json"]
    result = kit.bernstein(args, s.env)
    try:
        return result.returncode, json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"verify printed no JSON (exit {result.returncode}):\n{result.stdout}\n{result.stderr}") from None


def append_to_dump(dump: Path, stream: str, key: bytes, value: bytes) -> StoredRecord:
    """Append a record to a dump's topic file, at the next offset."""
    path = kit.topic_file(dump, stream)
    lines = kit.load_lines(path)
    last = lines[-1]
    record = StoredRecord(stream, last["topic"], 0, int(last["offset"]) + 1, int(last["timestamp"]) + 1, key, value)
    with path.open("ab") as handle:
        handle.write(encode_dump_line(record))
    return record


def table(s: Session) -> list[str]:
    """The attempts, and what each layer did with each."""
    lines = ["", f"compromised producer host ({MALLORY}; broker {'secured' if s.secure else 'plaintext'}): attempts"]
    lines.append(f"  {'attempt':<50} {'broker':<36} {'scheduler':<38} verifier")
    for attempt in ATTEMPT_NAMES:
        cells = dict.fromkeys((BROKER, SCHEDULER, VERIFIER), "-")
        for layer in s.outcomes.get(attempt, []):
            if layer.stopped:
                cells[layer.layer] = f"STOPPED {layer.code}"
            else:
                cells[layer.layer] = layer.detail if layer.detail == DUMP_COPY else f"passed ({layer.detail or layer.code})"
        lines.append(f"  {attempt:<50} {cells[BROKER]:<36} {cells[SCHEDULER]:<38} {cells[VERIFIER]}")
    return lines


# ---------------------------------------------------------------------------
# the attempts
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SchedulerAttempt:
    """A submission the compromised host publishes on the submissions topic (where it may write)."""

    name: str
    stage_id: str
    code: str
    build: Callable[[Session, S3BlobStore], tuple[str, bytes]]

    def submission(self, s: Session, store: S3BlobStore) -> tuple[str, bytes]:
        return self.build(s, store)


def _record(
    s: Session, store: S3BlobStore, *, run_id: str, stage_id: str, producer_id: str, role: str = "developer"
) -> dict[str, Any]:
    return submission_record(
        run_id=run_id,
        stage_id=stage_id,
        role=role,
        producer_id=producer_id,
        artifact=f"forged artifact {stage_id}\n".encode(),
        pages=(f"forged page {stage_id}".encode(),),
        occurred_at_ms=int(time.time() * 1000),
        store=store,
    )


def _as_alice_by_name(s: Session, store: S3BlobStore) -> tuple[str, bytes]:
    """producer.id says alice; signed (validly) with mallory's own key."""
    record = _record(s, store, run_id=ALICE_RUN, stage_id="forged-alice-name", producer_id=ALICE)
    return ALICE_RUN, encode_signed_submission(record, s.mallory.signer)


def _as_alice_by_key(s: Session, store: S3BlobStore) -> tuple[str, bytes]:
    """producer.id alice and alice's key id (public, in the manifest), signed with mallory's key."""
    record = _record(s, store, run_id=ALICE_RUN, stage_id="forged-alice-key", producer_id=ALICE)
    alice_key = s.alice.signer.key_id
    signature = s.mallory.signer.sign(submission_signing_input(submission_statement(record, alice_key)))
    return ALICE_RUN, codec.encode(
        codec.ACTIVITY_SUBMISSION_V3, {**record, "producer_key_id": alice_key, "producer_signature": signature}
    )


def _role_not_granted(s: Session, store: S3BlobStore) -> tuple[str, bytes]:
    """A stage under role ``operator``, which mallory was not granted (only ``developer``)."""
    record = _record(s, store, run_id=MALLORY_RUN, stage_id="forged-operator", producer_id=MALLORY, role="operator")
    return MALLORY_RUN, encode_signed_submission(record, s.mallory.signer)


def _own_new_key(s: Session, store: S3BlobStore) -> tuple[str, bytes]:
    """Signed with a key mallory generated itself (never registered)."""
    record = _record(s, store, run_id=MALLORY_RUN, stage_id="forged-new-key", producer_id=MALLORY)
    return MALLORY_RUN, encode_signed_submission(record, Ed25519Signer.generate())


def _unsigned(s: Session, store: S3BlobStore) -> tuple[str, bytes]:
    """An ActivitySubmission.v2: no producer signature at all."""
    record = _record(s, store, run_id=MALLORY_RUN, stage_id="forged-unsigned", producer_id=MALLORY)
    return MALLORY_RUN, codec.encode(codec.ACTIVITY_SUBMISSION_V2, record)


SCHEDULER_ATTEMPTS: Final = (
    SchedulerAttempt("another producer's activity (its name)", "forged-alice-name", "PRODUCER_MISMATCH", _as_alice_by_name),
    SchedulerAttempt(
        "another producer's activity (its key id)", "forged-alice-key", "SUBMISSION_SIGNATURE_INVALID", _as_alice_by_key
    ),
    SchedulerAttempt("a stage under a role not granted", "forged-operator", "PRODUCER_ROLE_NOT_ALLOWED", _role_not_granted),
    SchedulerAttempt("a submission signed by a key it made", "forged-new-key", "PRODUCER_KEY_UNKNOWN", _own_new_key),
    SchedulerAttempt("an unsigned submission", "forged-unsigned", "SUBMISSION_UNSIGNED", _unsigned),
)


@dataclass(frozen=True)
class ForgedRecord:
    """A record the compromised host builds with its own keys and tries to write to an output topic."""

    name: str
    run_id: str
    forge: Callable[[Session], tuple[str, bytes, bytes, bytes]]
    """-> (stream, key, value, ce_type)"""
    live: bool = False


def _forged_seal(s: Session, run_id: str, key_id: str) -> tuple[str, bytes, bytes, bytes]:
    """A final RunSeal.v2 of ``run_id`` covering only its first entry (the rest hidden), signed with mallory's
    producer key and naming ``key_id``."""
    records = journal_of(s, run_id)
    entries = [rec for rec in records if rec.schema == codec.JOURNAL_RECORD]
    last_seal = payload([rec for rec in records if rec.schema == codec.SEAL_RECORD][-1])
    seal = codec.encode(
        codec.RUN_SEAL_V2,
        {
            **last_seal,
            "entry_count": 1,
            "head_hash": entries[0].record["entry_hash"],
            "sealed_at_ms": int(time.time() * 1000),
            "closed_by": None,
        },
    )
    value = codec.encode(
        codec.SEAL_RECORD, {"payload": seal, "key_id": key_id, "signature": s.mallory.signer.sign(seal_signing_input(seal))}
    )
    return "journal", run_id.encode(), value, b"bernstein.run.sealed"


def _seal_own_key(s: Session) -> tuple[str, bytes, bytes, bytes]:
    return _forged_seal(s, ALICE_RUN, s.mallory.signer.key_id)


def _seal_scheduler_key_id(s: Session) -> tuple[str, bytes, bytes, bytes]:
    return _forged_seal(s, ALICE_RUN_2, s.keys.signer.key_id)


def _journal_entry(s: Session) -> tuple[str, bytes, bytes, bytes]:
    """The next entry of mallory's open run, under role ``operator`` (not granted), chained to the run's head and
    signed by mallory's producer key: what the scheduler would have refused, written past it."""
    (last,) = [rec for rec in journal_of(s, MALLORY_OPEN_RUN) if rec.schema == codec.JOURNAL_RECORD][-1:]
    entry = payload(last)
    entry.update(
        seq=entry["seq"] + 1,
        prev_hash=last.record["entry_hash"],
        submission_id="forged-journal-entry",
        stage_id="forged-journal-entry",
        role="operator",
        occurred_at_ms=int(time.time() * 1000),
        producer_key_id=s.mallory.signer.key_id,
    )
    entry["producer_signature"] = s.mallory.signer.sign(
        submission_signing_input(submission_statement(entry, s.mallory.signer.key_id))
    )
    body = codec.encode(codec.JOURNAL_ENTRY_V3, entry)
    value = codec.encode(codec.JOURNAL_RECORD, {"payload": body, "entry_hash": journal_entry_hash(body)})
    return "journal", MALLORY_OPEN_RUN.encode(), value, b"bernstein.activity.result"


def _forged_audit(s: Session, key_id: str) -> tuple[str, bytes, bytes, bytes]:
    """The audit chain's next record: mallory's run close mirrored as sealed again, linked to the chain's head,
    MACed with mallory's lineage key (its only HMAC key) and naming ``key_id``."""
    last = s.audit_head
    assert last is not None
    entry = {**payload(last), "seq": payload(last)["seq"] + 1, "prev_mac": last.record["mac"], "run_id": MALLORY_RUN}
    body = codec.encode(codec.AUDIT_ENTRY, entry)
    value = codec.encode(
        codec.AUDIT_RECORD_V2,
        {"key_id": key_id, "payload": body, "mac": audit_record_mac(s.mallory.lineage.secret, key_id, body)},
    )
    return "audit", MALLORY_RUN.encode(), value, b"bernstein.audit.run.sealed"


JOURNAL_ATTEMPTS: Final = (
    ForgedRecord("a seal signed with its producer key", ALICE_RUN, _seal_own_key),
    ForgedRecord("a seal naming the scheduler's seal key", ALICE_RUN_2, _seal_scheduler_key_id),
    ForgedRecord("a journal entry written to the journal", MALLORY_OPEN_RUN, _journal_entry),
)
AUDIT_ATTEMPTS: Final = (
    ForgedRecord(
        "an audit record MACed with its lineage key",
        MALLORY_RUN,
        lambda s: _forged_audit(s, s.mallory.lineage.key_id),
        live=True,
    ),
    ForgedRecord(
        "an audit record naming the scheduler's audit key",
        MALLORY_RUN,
        lambda s: _forged_audit(s, s.keys.audit.key_id),
    ),
    ForgedRecord(
        "an audit record naming its producer key",
        MALLORY_RUN,
        lambda s: _forged_audit(s, s.mallory.signer.key_id),
    ),
)
ATTEMPT_NAMES: Final = tuple(a.name for a in (*SCHEDULER_ATTEMPTS, *JOURNAL_ATTEMPTS, *AUDIT_ATTEMPTS))


# ---------------------------------------------------------------------------
# the table, one row per test
# ---------------------------------------------------------------------------


def test_honest_runs_verify_before_any_forgery(session: Session) -> None:
    """The baseline: every run verifies (the open run is open), so each verdict below is the forgery's."""
    assert session.baseline == {ALICE_RUN: 0, ALICE_RUN_2: 0, MALLORY_RUN: 0, MALLORY_OPEN_RUN: 5}


@pytest.mark.parametrize("attempt", SCHEDULER_ATTEMPTS, ids=lambda a: a.stage_id)
def test_the_scheduler_refuses_with_a_typed_code(session: Session, attempt: SchedulerAttempt) -> None:
    """Published on the submissions topic (the one topic the producer may write): refused, never journalled."""
    refusal = session.refusals[attempt.stage_id]
    assert (refusal["code"], refusal["run_id"]) == (attempt.code, ALICE_RUN if "alice" in attempt.stage_id else MALLORY_RUN)
    assert attempt.stage_id not in session.journalled
    assert session.outcomes[attempt.name] == [Layer(SCHEDULER, True, attempt.code)]
    expected_field = {
        "PRODUCER_MISMATCH": ("producer.id", ALICE, MALLORY),
        "SUBMISSION_SIGNATURE_INVALID": ("producer_signature", None, None),
        "PRODUCER_ROLE_NOT_ALLOWED": ("role", "operator", "developer"),
        "PRODUCER_KEY_UNKNOWN": ("producer_key_id", None, ""),
        "SUBMISSION_UNSIGNED": ("producer_signature", codec.ACTIVITY_SUBMISSION_V2, codec.ACTIVITY_SUBMISSION_V3),
    }[attempt.code]
    field_, declared, recomputed = expected_field
    assert refusal["field"] == field_
    if declared is not None:
        assert refusal["declared"] == declared
    if recomputed is not None:
        assert refusal["recomputed"] == recomputed


def _problem(document: dict[str, Any], section: str) -> dict[str, Any] | None:
    problem = document[section]["problem"]
    return None if problem is None else {k: v for k, v in problem.items() if k != "message"}


def _broker_layer(s: Session, attempt: ForgedRecord) -> Layer:
    if s.secure:
        topic = s.topics.by_stream(s.forged[attempt.name].stream)
        typed = (
            f"KafkaNotAuthorized E_KAFKA_NOT_AUTHORIZED: Kafka refused this client's principal to write to topic {topic} "
            "(TOPIC_AUTHORIZATION_FAILED): check BERNSTEIN_KAFKA_CONFIG_FILE (which principal this client authenticates "
            "as) and the deployment's ACLs (`bernstein kafka acls --prefix P`)"
        )
        return Layer(BROKER, True, "TOPIC_AUTHORIZATION_FAILED", typed)
    return Layer(BROKER, False, detail="plaintext broker: no ACLs")


def _expected_problems(s: Session, name: str) -> dict[str, dict[str, Any]]:
    """The exact problems ``activity verify`` must name for forgery ``name`` (all other sections verify)."""
    forged = s.forged[name]
    assert forged.value is not None
    envelope = codec.decode(forged.value).record
    inner = codec.decode(envelope["payload"]).record
    mallory_key = s.mallory.signer.key_id
    if name.startswith("a seal"):
        first = (
            {"code": "KEY_PURPOSE_MISMATCH", "expected": "seal", "recomputed": "producer"}
            if envelope["key_id"] == mallory_key
            else {"code": "SEAL_SIGNATURE_INVALID"}
        )
        return {
            "seal": {**first, "stream": "journal", "offset": forged.offset},
            # the forged seal has no run.sealed record in the audit chain the scheduler MACed
            "audit": {
                "code": "AUDIT_TRUNCATED",
                "stream": "journal",
                "offset": forged.offset,
                "seq": inner["entry_count"],
                "audit_seq": inner["audit_seq"],
            },
        }
    if name == "a journal entry written to the journal":
        # hash-chained and signed by a pinned producer key, so chain and producers verify; but the
        # scheduler never saw it, so no audit record mirrors it
        return {"audit": {"code": "AUDIT_MISSING_ENTRY", "stream": "journal", "offset": forged.offset, "seq": inner["seq"]}}
    where = {"stream": "audit", "offset": forged.offset, "audit_seq": inner["seq"]}
    if envelope["key_id"] == s.mallory.lineage.key_id:
        return {
            "audit": {
                "code": "AUDIT_KEY_NOT_PINNED",
                **where,
                "expected": s.keys.audit.key_id,
                "recomputed": s.mallory.lineage.key_id,
            }
        }
    if envelope["key_id"] == s.keys.audit.key_id:
        real = audit_record_mac(s.keys.audit.secret, s.keys.audit.key_id, envelope["payload"])
        return {"audit": {"code": "AUDIT_MAC_MISMATCH", **where, "expected": envelope["mac"], "recomputed": real}}
    assert envelope["key_id"] == mallory_key
    return {"audit": {"code": "KEY_PURPOSE_MISMATCH", **where, "expected": "audit", "recomputed": "producer"}}


@pytest.mark.parametrize("attempt", (*JOURNAL_ATTEMPTS, *AUDIT_ATTEMPTS), ids=lambda a: a.name.replace(" ", "-"))
def test_a_forged_record_is_stopped_by_the_broker_or_named_by_the_verifier(session: Session, attempt: ForgedRecord) -> None:
    """Built from the producer host's keys only. Written with its own credentials: refused by the broker
    where it is secured (then written past it with the admin's); verified: exit 2 and exactly these problems."""
    s = session
    code, document = s.documents[attempt.name]
    expected = _expected_problems(s, attempt.name)
    assert code == 2 and document["verdict"] == "mismatch"
    for section in SECTIONS:
        assert _problem(document, section) == expected.get(section), section
        assert document[section]["further_problems"] == 0, section
    broker = [layer for layer in s.outcomes[attempt.name] if layer.layer == BROKER]
    if attempt.live or attempt in JOURNAL_ATTEMPTS:
        assert broker == [_broker_layer(s, attempt)]
        if s.secure:  # nothing of the producer's write reached the topic
            before, after = s.broker_end[attempt.name]
            assert before == after <= s.forged[attempt.name].offset
    else:
        assert broker == [Layer(BROKER, False, detail=DUMP_COPY)]
    verifier = [layer for layer in s.outcomes[attempt.name] if layer.layer == VERIFIER]
    assert verifier == [Layer(VERIFIER, True, f"exit 2: {', '.join(expected[k]['code'] for k in SECTIONS if k in expected)}")]


def test_every_attempt_was_stopped_by_some_layer(session: Session, capsys: pytest.CaptureFixture[str]) -> None:
    """No row of the table got through every layer; the table is printed (also when pytest captures output)."""
    with capsys.disabled():
        print("\n".join(table(session)))
    assert list(session.outcomes) == list(ATTEMPT_NAMES)
    for name, layers in session.outcomes.items():
        assert any(layer.stopped for layer in layers), (name, layers)
