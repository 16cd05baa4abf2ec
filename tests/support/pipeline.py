"""Helpers for the modality pipeline suites (research, data/ops) through the real broker and S3.

A ``Pipeline`` is one isolated deployment on the shared services: a fresh
topic prefix, its own install keys, a pinned-keys file and the environment
for ``bernstein`` subprocesses. Agents are driven through the real CLI
(``bernstein research run``, ``bernstein data run``, ...); the scheduler runs
in-process over the submissions topic (Kafka transactions); runs are exported
with ``bernstein topic export`` and verified with ``bernstein activity verify``
exactly as an operator would.

The dump helpers edit copies of an exported dump at the byte level (CAS
blobs, journal lines), reusing ``tests.support.tamper`` for the dump format.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bernstein.schemas import codec
from bernstein.schemas.canonical import journal_entry_hash
from bernstein.substrate.keys import InstallKeys, ProducerKeys, init_keys, init_producer_keys
from tests.conftest import as_component
from tests.support import tamper as kit
from tests.support.prefixes import fresh_prefix
from tests.support.producer_setup import PRODUCER_NAME, identity, trusted_keys, write_manifest

REPO = kit.REPO
VERIFIED = "verified -- every activity reconstructs from the journal."


def sha256_of(data: bytes) -> str:
    """An independent ``sha256:<hex>`` (hashlib, not the project's helper)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------
# one isolated deployment on the shared broker and S3
# ---------------------------------------------------------------------------


@dataclass
class Pipeline:
    services: Any
    workdir: Path
    prefix: str
    keys: InstallKeys
    trust_file: Path
    env: dict[str, str]
    """Environment for ``bernstein`` subprocesses: these topics, these keys, the real endpoints."""
    producer: ProducerKeys
    """The agents' producer keys (``bernstein research|data|ops run`` sign with them), registered in ``manifest``."""
    manifest: Path
    """The manifest the scheduler runs with: roles, ``producer`` and the test identities."""
    counters: Any = None

    @classmethod
    def create(cls, services: Any, workdir: Path) -> Pipeline:
        from bernstein.substrate.config import Topics
        from bernstein.substrate.kafka import ensure_topics

        prefix = fresh_prefix()
        keys = init_keys(workdir / "keys")
        producer = init_producer_keys(workdir / "producer-keys", PRODUCER_NAME)
        manifest = write_manifest(workdir / "roles.toml", producer)
        trust_file = workdir / "trusted-keys.json"
        trusted_keys(keys, manifest).write(trust_file)
        ensure_topics(services.bootstrap, Topics(prefix), partitions=1)
        env = kit.cli_env(services, prefix, keys, producer, manifest)
        return cls(services, workdir, prefix, keys, trust_file, env, producer, manifest)

    @property
    def bootstrap(self) -> str:
        return str(self.services.bootstrap)

    @property
    def topics(self) -> Any:
        from bernstein.substrate.config import Topics

        return Topics(self.prefix)

    # -- agents -----------------------------------------------------------------

    def cli(self, args: Sequence[str], *, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``bernstein ARGS`` against this deployment (cwd: the repository)."""
        return kit.bernstein(list(args), {**self.env, **(extra_env or {})}, cwd=REPO)

    def cli_parallel(
        self, commands: Sequence[Sequence[str]], *, extra_env: dict[str, str] | None = None
    ) -> list[subprocess.CompletedProcess[str]]:
        """Several ``bernstein`` invocations at once (independent runs); results in order."""
        env = {**self.env, **(extra_env or {})}
        procs = [
            subprocess.Popen(
                [str(kit.BERNSTEIN), *args],
                env=as_component(args, env),
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for args in commands
        ]
        results = []
        for args, proc in zip(commands, procs, strict=True):
            out, err = proc.communicate(timeout=240)
            results.append(subprocess.CompletedProcess([str(kit.BERNSTEIN), *args], proc.returncode, out, err))
        return results

    def emitter(self) -> Any:
        """The real emitter SDK on these topics and the S3 bucket (use as a context manager)."""
        from bernstein.producers.emitter import Emitter
        from bernstein.substrate.cas import S3BlobStore

        return Emitter(
            bootstrap=self.bootstrap, store=S3BlobStore(self.services.s3), topics=self.topics, producer=identity("tests@pipeline")
        )

    def close_runs(self, *run_ids: str) -> None:
        """Close (and so seal) runs through the real emitter SDK."""
        with self.emitter() as emitter:
            for run_id in run_ids:
                emitter.close_run(run_id)

    # -- the topics -------------------------------------------------------------

    def records(self, stream: str) -> list[Any]:
        """Every record of ``stream`` (partition 0), read_committed."""
        from bernstein.verifier.kafka_source import KafkaSource

        return list(KafkaSource(self.bootstrap, self.topics).records(stream, 0))

    def live_merkle(self) -> str:
        """The audit line's Merkle log clause when verifying from the live topics: every entry and seal of the journal
        partition, and every v2 checkpoint, counted from the records themselves."""
        from bernstein.schemas import codec

        names = [codec.split_envelope(r.value)[0] for r in self.records("journal")]
        leaves = sum(name in (codec.JOURNAL_RECORD, codec.SEAL_RECORD) for name in names)
        c = codec.default_codec()
        heads = sum(
            c.schema_of(c.decode(r.value).record["payload"]).name == codec.PARTITION_CHECKPOINT_V2
            for r in self.records("checkpoints")
        )
        return kit.merkle_words(leaves, heads)

    def submission_runs(self) -> list[str]:
        """The run id (record key) of every record on the submissions topic, in offset order."""
        return [(r.key or b"").decode() for r in self.records("submissions")]

    # -- the scheduler ----------------------------------------------------------

    def schedule(self) -> Any:
        """Run the real scheduler in-process until it has consumed every submission published so far."""
        from bernstein.consumers.core.model import SchedulerConfig
        from bernstein.consumers.core.step import SchedulerCore
        from bernstein.consumers.manifest import load_manifest
        from bernstein.consumers.shell import SchedulerShell

        published = len(self.records("submissions"))
        manifest = load_manifest(self.manifest)
        core = SchedulerCore(
            SchedulerConfig(
                roles=manifest.roles,
                signer=self.keys.signer,
                audit_key=self.keys.audit.secret,
                audit_key_id=self.keys.audit.key_id,
                producers=manifest.producers,
            )
        )
        shell = SchedulerShell(bootstrap=self.bootstrap, topics=self.topics, partition=0, core=core, progress=None)
        counters = shell.run(until=lambda c: c.consumed >= published, idle_exit=60)
        if counters.consumed < published:
            raise RuntimeError(f"the scheduler consumed {counters.consumed} of {published} submissions")
        self.counters = counters
        return counters

    # -- export and verify ------------------------------------------------------

    def export(self, run_ids: Sequence[str], out: Path) -> Path:
        args = ["topic", "export", *[a for r in run_ids for a in ("--run", r)], "--out", str(out)]
        result = self.cli(args)
        if result.returncode != 0:
            raise RuntimeError(f"export failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return out

    def verify_live(self, run_id: str, *, json_output: bool = False) -> subprocess.CompletedProcess[str]:
        """``bernstein activity verify RUN --from kafka --cas s3`` against the live topics and bucket."""
        args = ["activity", "verify", run_id, "--from", "kafka", "--cas", "s3", "--trusted-keys", str(self.trust_file)]
        return self.cli([*args, *(["--json"] if json_output else [])])


def verify_dump(
    dump: Path,
    run_id: str,
    trust_file: Path,
    *,
    json_output: bool = False,
    prefix_cmd: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``bernstein activity verify RUN --from DUMP`` with every BERNSTEIN_* endpoint unset, outside the repository."""
    args = ["activity", "verify", run_id, "--from", str(dump), "--trusted-keys", str(trust_file)]
    return kit.bernstein([*args, *(["--json"] if json_output else [])], kit.offline_env(), cwd=dump.parent, prefix_cmd=prefix_cmd)


def verify_dump_json(dump: Path, run_id: str, trust_file: Path) -> tuple[int, dict[str, Any]]:
    result = verify_dump(dump, run_id, trust_file, json_output=True)
    try:
        return result.returncode, json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"verify printed no JSON (exit {result.returncode}):\n{result.stdout}\n{result.stderr}") from None


def stage_json(document: dict[str, Any], stage_id: str) -> dict[str, Any]:
    (stage,) = [s for s in document["stages"] if s["stage_id"] == stage_id]
    return dict(stage)


def netns_prefix() -> list[str] | None:
    """A command prefix that runs a process without network (a fresh network namespace), or None."""
    for prefix in (["unshare", "-rn"], ["unshare", "-n"]):
        if prefix == ["unshare", "-n"] and os.geteuid() != 0:
            continue
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def can_connect(address: str, prefix_cmd: list[str] | None = None) -> bool:
    host, port = address.rsplit(":", 1)
    probe = [sys.executable, "-c", f"import socket; socket.create_connection(({host!r}, {int(port)}), timeout=3)"]
    return subprocess.run([*(prefix_cmd or []), *probe], capture_output=True, timeout=30).returncode == 0


# ---------------------------------------------------------------------------
# the expected report header (computed from the dump's own records)
# ---------------------------------------------------------------------------


def _plural(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def expected_header(dump: Path, run_id: str, keys: InstallKeys, *, merkle: str | None = None) -> list[str]:
    """The report's first lines for an untampered run: run, chain, seal, audit. ``merkle``: the audit line's Merkle log
    clause of a live source (``Pipeline.live_merkle``); None: the dump's own (none for a dump of selected runs)."""
    view = kit.DumpView(dump)
    checkpoints = view.checkpoint_words() if merkle is None else view.checkpoint_words(whole=False) + merkle
    entries = [j for j in view.journal if j.run_id == run_id and j.kind == "entry"]
    seals = view.seals(run_id)
    run_audit = [a for a in view.audit if a.entry["run_id"] == run_id]
    return [
        f"Activity verify run={run_id}",
        f"  OK chain ({_plural(len(entries), 'entry', 'entries')} on partition 0, head {entries[-1].envelope['entry_hash']})",
        f"  OK seal (final seal covers {_plural(len(entries), 'entry', 'entries')}, {_plural(len(seals), 'seal')} "
        f"signed by pinned key {keys.signer.key_id}{closed_by(view, run_id)})",
        f"  OK audit ({_plural(len(view.audit), 'record')} on the partition, MACs verified with pinned key {keys.audit.key_id}; "
        f"{len(run_audit)} of this run agree with the journal; {checkpoints})",
        producers_line(view, run_id, keys),
        *view.refusal_lines(run_id),
    ]


def closed_by(view: kit.DumpView, run_id: str) -> str:
    """The seal line's ``, closed by NAME (key K)``: the signed RunClose the run's final seal carries."""
    closes = [s.record["closed_by"] for s in view.seals(run_id) if s.record.get("final") and s.record.get("closed_by")]
    return "".join(f", closed by {c['producer_id']} (key {c['key_id']})" for c in closes)


def by_line(dump: Path, run_id: str, stage_id: str) -> str:
    """The report's line under a stage naming who made it: the producer and key its journal entry names."""
    record = entry(dump, run_id, stage_id).record
    return f"    by {record['producer_id']} (key {record['producer_key_id']})"


def producers_line(view: kit.DumpView, run_id: str, keys: InstallKeys) -> str:
    """The report's producers line, from the run's own records: each signed entry (JournalEntry.v3) and the final
    seal's ``closed_by`` (a signed RunClose.v2), and which key ids signed or MACed what."""
    signers = {
        (j.record["producer_key_id"], j.record["producer_id"]) for j in view.journal if j.run_id == run_id and j.kind == "entry"
    }
    closes = [s.record["closed_by"] for s in view.seals(run_id) if s.record.get("closed_by")]
    signers |= {(c["key_id"], c["producer_id"]) for c in closes}
    signed = sum(1 for j in view.journal if j.run_id == run_id and j.kind == "entry") + len(closes)
    producers = ", ".join(f"{key_id} ({name})" for key_id, name in sorted(signers))
    checkpoint = keys.signer.key_id if view.checkpoints() else "none"
    return (
        f"  OK producers ({_plural(signed, 'producer signature')} verified with pinned producer keys; keys: "
        f"seal {keys.signer.key_id}; checkpoint {checkpoint}; audit {keys.audit.key_id}; producer {producers})"
    )


# ---------------------------------------------------------------------------
# reading and editing a dump
# ---------------------------------------------------------------------------


def entry(dump: Path, run_id: str, stage_id: str) -> kit.JournalLine:
    """The journal entry of ``stage_id`` in ``run_id``."""
    (line,) = [
        j
        for j in kit.journal_lines(kit.load_lines(kit.topic_file(dump, "journal")))
        if j.run_id == run_id and j.kind == "entry" and j.record["stage_id"] == stage_id
    ]
    return line


def entries(dump: Path, run_id: str) -> list[kit.JournalLine]:
    return [
        j for j in kit.journal_lines(kit.load_lines(kit.topic_file(dump, "journal"))) if j.run_id == run_id and j.kind == "entry"
    ]


def refusals(dump: Path, run_id: str) -> list[dict[str, Any]]:
    """The decoded Refusal records of ``run_id`` in the dump, in topic order."""
    records = [codec.decode(kit.value_of(item)).record for item in kit.load_lines(kit.topic_file(dump, "refusals"))]
    return [r for r in records if r["run_id"] == run_id]


def read_blob(dump: Path, digest: str) -> bytes:
    return kit.blob_path(dump, digest).read_bytes()


def overwrite_blob(dump: Path, digest: str, data: bytes) -> None:
    """Replace the bytes filed under ``digest`` (the file name stays: a tampered blob)."""
    path = kit.blob_path(dump, digest)
    assert path.is_file(), f"{digest} is not in {dump}"
    path.write_bytes(data)


def store_blob(dump: Path, data: bytes) -> str:
    """File ``data`` under its own hash, as an attacker re-storing a forged blob would."""
    digest = sha256_of(data)
    path = kit.blob_path(dump, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


@dataclass
class Rejournalled:
    """An entry whose artifact_hash was repointed (and its entry hash recomputed) by an attacker."""

    seq: int
    offset: int
    old_entry_hash: str
    new_entry_hash: str
    new_artifact_hash: str
    next_offset: int | None = None
    """Offset of the run's next journal entry (whose prev_hash still names the old hash)."""
    audit_seq: int = -1
    """Audit seq of the activity.result record that mirrors the original entry."""


def rejournal_artifact(dump: Path, run_id: str, stage_id: str, artifact: bytes) -> Rejournalled:
    """Store ``artifact`` under its hash and repoint the stage's journal entry at it.

    The entry's payload is re-encoded with the new ``artifact_hash`` and its
    stored entry hash recomputed, so the entry is self-consistent; only its
    links (the next entry's prev_hash, the audit mirror) still name the original.
    """
    digest = store_blob(dump, artifact)
    journal = kit.topic_file(dump, "journal")
    items = kit.load_lines(journal)
    target = entry(dump, run_id, stage_id)
    c = codec.default_codec()
    record = dict(target.record)
    record["artifact_hash"] = digest
    payload = c.encode(c.schema_of(target.envelope["payload"]).name, record)  # v1 or v2, as journalled
    new_hash = journal_entry_hash(payload)
    kit.set_value(items[target.index], c.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": new_hash}))
    kit.save_lines(journal, items)
    later = [j for j in entries(dump, run_id) if j.record["seq"] == target.record["seq"] + 1]
    audit = kit.audit_line_for(kit.load_lines(kit.topic_file(dump, "audit")), run_id, "activity.result", target.record["seq"])
    return Rejournalled(
        seq=target.record["seq"],
        offset=target.offset,
        old_entry_hash=str(target.envelope["entry_hash"]),
        new_entry_hash=new_hash,
        new_artifact_hash=digest,
        next_offset=later[0].offset if later else None,
        audit_seq=int(audit.entry["seq"]),
    )


def canonical(document: Any) -> bytes:
    """RFC 8785 bytes by the independent ``rfc8785`` package (not the project's encoder)."""
    import rfc8785

    return bytes(rfc8785.dumps(document))


# ---------------------------------------------------------------------------
# a page server that records what was requested
# ---------------------------------------------------------------------------


@contextmanager
def serve_recording(directory: Path) -> Iterator[tuple[str, list[str]]]:
    """``demo.site_server`` (same handler: MIME types, /old-notes redirect) plus a log of request paths."""
    sys.path.insert(0, str(REPO))
    from demo.site_server import _Handler

    requests: list[str] = []
    lock = threading.Lock()

    class Recording(_Handler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            with lock:
                requests.append(f"{self.command} {self.path} {code}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Recording, directory=str(directory)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="pipeline-site", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
