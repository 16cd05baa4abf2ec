"""Helpers for the verifier's tamper suite and round-trip tests.

``build_realistic_run`` publishes a realistic pair of interleaved runs through
the real emitter, runs the real scheduler over them in-process (Kafka
transactions), and exports the main run with ``bernstein topic export`` into a
pristine dump. It is built once per test process (``realistic_run`` memoizes
it) and shared by every module that needs it.

The rest edits dumps at the byte level: dump lines are JSON with base64
``key``/``value`` fields; an edit decodes the value, changes real bytes and
re-encodes it, so the verifier sees exactly what an attacker with write access
to the dump files could produce.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bernstein.schemas import codec
from bernstein.schemas.canonical import content_hash, journal_entry_hash, seal_signing_input, sha256_digest
from bernstein.substrate.keys import Ed25519Signer, InstallKeys, ProducerKeys, TrustedKeys, init_keys
from tests.conftest import as_component, bernstein_env
from tests.support.prefixes import fresh_prefix
from tests.support.producer_setup import identity
from tests.support.producers import TEST_PRODUCERS, encode_signed_close, encode_signed_submission, producer_trust, registry

REPO = Path(__file__).resolve().parents[2]
BERNSTEIN = REPO / ".venv" / "bin" / "bernstein"

MAIN_RUN = "run-main"
SIDE_RUN = "run-side"
EMPTY_RUN = "run-empty"
"""A run that was closed without any activity: its journal holds only a final seal."""
MAIN_STAGES = tuple(f"stage-{i}" for i in range(6))
SIDE_STAGES = tuple(f"side-{i}" for i in range(3))
SCREENSHOT_STAGE = "stage-2"
PAGE_STAGE = "stage-3"
SEAL_EVERY = 3


# ---------------------------------------------------------------------------
# the realistic run
# ---------------------------------------------------------------------------


@dataclass
class RealisticRun:
    """Everything a test needs to find, re-export or re-verify the shared run."""

    bootstrap: str
    prefix: str
    keys: InstallKeys
    trust_file: Path
    """Pinned keys: the install's Ed25519 public key and its audit HMAC key."""
    dump: Path
    """The pristine dump of both runs (never edit it; copy it first)."""
    env: dict[str, str]
    """Environment for ``bernstein`` subprocesses against these topics and keys."""
    blobs: dict[str, bytes] = field(default_factory=dict)
    """Every evidence blob by digest."""
    observations: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    """stage id -> its observations (kind, ref, content_hash) as published."""
    refused_stage: str = ""


def _bytes_of(label: str, size: int) -> bytes:
    """Deterministic pseudo-random bytes (binary, not text)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{label}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


def fake_png(label: str, size: int = 6000) -> bytes:
    """Screenshot-like bytes: a PNG signature and IHDR chunk, then binary noise."""
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00\x00\x05\x00\x00\x00\x03\x20\x08\x06\x00\x00\x00"
    return header + _bytes_of(label, size - len(header))


def _file_text(stage: str, name: str) -> bytes:
    lines = [f"# {stage}: {name}", "def handler(event):", f"    return {{'stage': '{stage}', 'file': '{name}'}}", ""]
    return "\n".join(lines).encode()


def build_realistic_run(services: Any, workdir: Path) -> RealisticRun:
    """Publish, schedule and export two interleaved runs; return where everything is."""
    from bernstein.consumers.core.model import SchedulerConfig
    from bernstein.consumers.core.step import SchedulerCore
    from bernstein.consumers.manifest import parse_roles
    from bernstein.consumers.shell import SchedulerShell
    from bernstein.producers.activity import ActivityResult
    from bernstein.producers.emitter import Emitter
    from bernstein.substrate.cas import S3BlobStore
    from bernstein.substrate.config import Topics
    from bernstein.substrate.kafka import ensure_topics

    prefix = fresh_prefix()
    topics = Topics(prefix)
    keys = init_keys(workdir / "keys")
    trust_file = workdir / "trusted-keys.json"
    TrustedKeys.from_install(keys).merged(producer_trust("coder@tamper-suite")).write(trust_file)
    ensure_topics(services.bootstrap, topics, partitions=1)
    store = S3BlobStore(services.s3)
    emitter = Emitter(bootstrap=services.bootstrap, store=store, topics=topics, producer=identity("coder@tamper-suite"))
    run = RealisticRun(
        bootstrap=services.bootstrap,
        prefix=prefix,
        keys=keys,
        trust_file=trust_file,
        dump=workdir / "pristine",
        env=cli_env(services, prefix, keys),
    )

    def observe(kind: str, ref: str, data: bytes) -> Any:
        obs = emitter.capture(kind, ref, data)
        run.blobs[obs.content_hash] = data
        return obs

    def main_stage(i: int) -> Any:
        stage = MAIN_STAGES[i]
        obs = [observe("file", f"src/{stage}/{name}", _file_text(stage, name)) for name in ("handler.py", "test_handler.py")]
        if i % 2 == 0:
            obs.append(observe("file", f"src/{stage}/README.md", f"notes for {stage}\n".encode()))
        if stage == SCREENSHOT_STAGE:
            obs.append(observe("screenshot", f"screens/{stage}/after.png", fake_png(f"{stage}-after")))
            obs.append(observe("screenshot", f"screens/{stage}/before.png", fake_png(f"{stage}-before", 4500)))
        if stage == PAGE_STAGE:
            page = f"<!doctype html><html><body><h1>API docs</h1><p>{stage} consulted this page.</p></body></html>\n".encode()
            obs.append(observe("page", "https://docs.example.org/api/handlers", page))
        run.observations[stage] = [o.to_record() for o in obs]
        artifact = f"diff --git a/src/{stage}/handler.py b/src/{stage}/handler.py\n+# {stage} done\n".encode()
        return ActivityResult.build("coding", artifact, obs)

    def side_stage(i: int) -> Any:
        stage = SIDE_STAGES[i]
        obs = [observe("file", f"side/{stage}/{name}", _file_text(stage, name)) for name in ("a.py", "b.py")]
        run.observations[stage] = [o.to_record() for o in obs]
        return ActivityResult.build("coding", f"side artifact {stage}\n".encode(), obs)

    published = 0
    side = 0
    first_result = None
    for i in range(len(MAIN_STAGES)):
        result = main_stage(i)
        first_result = first_result or result
        emitter.publish(run_id=MAIN_RUN, stage_id=MAIN_STAGES[i], role="developer", result=result)
        published += 1
        if i % 2 == 1 and side < len(SIDE_STAGES):
            emitter.publish(run_id=SIDE_RUN, stage_id=SIDE_STAGES[side], role="developer", result=side_stage(side))
            side += 1
            published += 1
        if i == 3:
            # A redundant stage: the same evidence as stage-0 (refused, audited, never journalled).
            run.refused_stage = "stage-0-again"
            emitter.publish(run_id=MAIN_RUN, stage_id=run.refused_stage, role="developer", result=first_result)
            published += 1
    emitter.close_run(SIDE_RUN)
    emitter.close_run(EMPTY_RUN)
    emitter.close_run(MAIN_RUN)
    published += 3
    emitter.close()

    roles = parse_roles((REPO / "config" / "roles.toml").read_text(encoding="utf-8"))
    core = SchedulerCore(
        SchedulerConfig(
            roles=roles,
            signer=keys.signer,
            audit_key=keys.audit.secret,
            audit_key_id=keys.audit.key_id,
            seal_every=SEAL_EVERY,
            producers=TEST_PRODUCERS,
        )
    )
    shell = SchedulerShell(bootstrap=services.bootstrap, topics=topics, partition=0, core=core, progress=None)
    counters = shell.run(until=lambda c: c.consumed >= published, idle_exit=60)
    if counters.consumed < published:
        raise RuntimeError(f"scheduler consumed {counters.consumed} of {published} submissions")

    result = bernstein(
        ["topic", "export", "--run", MAIN_RUN, "--run", SIDE_RUN, "--run", EMPTY_RUN, "--out", str(run.dump)], run.env
    )
    if result.returncode != 0:
        raise RuntimeError(f"export failed: {result.stdout}\n{result.stderr}")
    return run


_BUILT: dict[str, RealisticRun] = {}


def realistic_run(services: Any, tmp_path_factory: Any) -> RealisticRun:
    """The shared run, built once per test process."""
    key = services.bootstrap
    if key not in _BUILT:
        _BUILT[key] = build_realistic_run(services, tmp_path_factory.mktemp("realistic-run"))
    return _BUILT[key]


def cli_env(
    services: Any, prefix: str, keys: InstallKeys, producer: ProducerKeys | None = None, manifest: Path | None = None
) -> dict[str, str]:
    """The offline environment plus the BERNSTEIN_* variables for these services, prefix and keys (and no others)."""
    return {**offline_env(), **bernstein_env(services, prefix, keys, producer, manifest)}


def offline_env() -> dict[str, str]:
    """The environment with every BERNSTEIN_* variable (every endpoint) removed."""
    return {k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_")}


def bernstein(
    args: list[str], env: dict[str, str], *, cwd: Path | None = None, prefix_cmd: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real console script."""
    return subprocess.run(
        [*(prefix_cmd or []), str(BERNSTEIN), *args],
        env=as_component(args, env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )


def verify_dump(
    run: RealisticRun,
    dump: Path,
    run_id: str = MAIN_RUN,
    *,
    json_output: bool = True,
    trust_file: Path | None = None,
    cwd: Path | None = None,
) -> tuple[int, Any, str]:
    """``bernstein activity verify RUN --from DUMP`` offline; (exit code, parsed JSON or text, stderr)."""
    args = ["activity", "verify", run_id, "--from", str(dump), "--trusted-keys", str(trust_file or run.trust_file)]
    if json_output:
        args.append("--json")
    # Outside the repository, so that no .infra/env is found either: no endpoint is known.
    result = bernstein(args, offline_env(), cwd=cwd or dump.parent)
    if json_output:
        try:
            document = json.loads(result.stdout)
        except json.JSONDecodeError:
            raise AssertionError(
                f"verify printed no JSON (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
            ) from None
        return result.returncode, document, result.stderr
    return result.returncode, result.stdout, result.stderr


def copy_dump(pristine: Path, destination: Path) -> Path:
    target = destination / "dump"
    shutil.copytree(pristine, target)
    return target


# ---------------------------------------------------------------------------
# dump files: lines, values
# ---------------------------------------------------------------------------


def topic_file(dump: Path, stream: str, partition: int = 0) -> Path:
    return dump / "topics" / stream / f"{partition}.jsonl"


def load_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def save_lines(path: Path, items: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(json.dumps(item, separators=(",", ":")).encode() + b"\n" for item in items))


def value_of(item: dict[str, Any]) -> bytes:
    return base64.b64decode(item["value"])


def set_value(item: dict[str, Any], value: bytes) -> None:
    item["value"] = base64.b64encode(value).decode()


def key_of(item: dict[str, Any]) -> bytes | None:
    return None if item.get("key") is None else base64.b64decode(item["key"])


def replace_once(data: bytes, old: bytes, new: bytes) -> bytes:
    """Replace the single occurrence of ``old`` (same length) in ``data``."""
    assert len(old) == len(new), "a byte flip keeps the length"
    assert data.count(old) == 1, f"{old!r} occurs {data.count(old)} times"
    return data.replace(old, new)


def forge_main_refusal(dump: Path) -> tuple[bytes, int]:
    """Edit the dump's one refusal of MAIN_RUN (its code REDUNDANT_STAGE becomes REDUNDANT_STAGX); (forged value, offset)."""
    path = topic_file(dump, "refusals")
    items = load_lines(path)
    (index,) = [i for i, item in enumerate(items) if key_of(item) == MAIN_RUN.encode()]
    forged = replace_once(value_of(items[index]), b"REDUNDANT_STAGE", b"REDUNDANT_STAGX")
    set_value(items[index], forged)
    save_lines(path, items)
    return forged, int(items[index]["offset"])


def flip_char(data: bytes, at: int) -> tuple[bytes, bytes, bytes]:
    """Change the hex digit / ASCII letter at ``at`` to another printable one; (data, old, new)."""
    old = data[at : at + 1]
    new = b"0" if old != b"0" else b"1"
    return data[:at] + new + data[at + 1 :], old, new


def xor_byte(data: bytes, at: int, mask: int = 0x01) -> bytes:
    return data[:at] + bytes([data[at] ^ mask]) + data[at + 1 :]


# ---------------------------------------------------------------------------
# decoded views of journal and audit lines
# ---------------------------------------------------------------------------


@dataclass
class JournalLine:
    index: int
    """Position of the line in the dump file."""
    offset: int
    run_id: str
    kind: str
    """"entry" or "seal"."""
    envelope: dict[str, Any]
    record: dict[str, Any]
    """The decoded JournalEntry or RunSeal."""


def journal_lines(items: list[dict[str, Any]]) -> list[JournalLine]:
    c = codec.default_codec()
    out = []
    for index, item in enumerate(items):
        decoded = c.decode(value_of(item))
        inner = c.decode(decoded.record["payload"]).record
        kind = "entry" if decoded.schema.name == codec.JOURNAL_RECORD else "seal"
        out.append(JournalLine(index, item["offset"], inner["run_id"], kind, decoded.record, inner))
    return out


def entry_line(items: list[dict[str, Any]], run_id: str, seq: int) -> JournalLine:
    (line,) = [j for j in journal_lines(items) if j.run_id == run_id and j.kind == "entry" and j.record["seq"] == seq]
    return line


def seal_lines(items: list[dict[str, Any]], run_id: str) -> list[JournalLine]:
    return [j for j in journal_lines(items) if j.run_id == run_id and j.kind == "seal"]


@dataclass
class AuditLine:
    index: int
    offset: int
    envelope: dict[str, Any]
    entry: dict[str, Any]


def audit_lines(items: list[dict[str, Any]]) -> list[AuditLine]:
    c = codec.default_codec()
    out = []
    for index, item in enumerate(items):
        envelope = c.decode(value_of(item)).record
        out.append(AuditLine(index, item["offset"], envelope, c.decode(envelope["payload"]).record))
    return out


def audit_line_for(items: list[dict[str, Any]], run_id: str, event: str, journal_seq: int) -> AuditLine:
    (line,) = [
        a
        for a in audit_lines(items)
        if a.entry["run_id"] == run_id and a.entry["event"] == event and a.entry["journal_seq"] == journal_seq
    ]
    return line


def entry_hash_of(payload: bytes) -> str:
    return journal_entry_hash(payload)


# ---------------------------------------------------------------------------
# seals and keys
# ---------------------------------------------------------------------------


def resign_seal(value: bytes, signer: Ed25519Signer, *, payload: bytes | None = None) -> bytes:
    """The SealRecord ``value`` re-signed by ``signer`` (optionally over a new payload)."""
    c = codec.default_codec()
    envelope = c.decode(value, expect=frozenset({codec.SEAL_RECORD})).record
    body = envelope["payload"] if payload is None else payload
    return c.encode(
        codec.SEAL_RECORD,
        {"payload": body, "key_id": signer.key_id, "signature": signer.sign(seal_signing_input(body))},
    )


def write_public_keys(dump: Path, signer: Ed25519Signer) -> None:
    """Put ``signer``'s public key, alone, into the dump's informational key file."""
    document = TrustedKeys(ed25519={signer.key_id: signer.public_key_raw}).to_json()
    (dump / "keys" / "public-keys.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------
# CAS blobs in a dump
# ---------------------------------------------------------------------------


def blob_path(dump: Path, digest: str) -> Path:
    hex_ = digest.removeprefix("sha256:")
    return dump / "cas" / "sha256" / hex_[:2] / hex_


def digest_of(data: bytes) -> str:
    return content_hash(data)


__all__ = [
    "MAIN_RUN",
    "SIDE_RUN",
    "EMPTY_RUN",
    "MAIN_STAGES",
    "SIDE_STAGES",
    "SCREENSHOT_STAGE",
    "PAGE_STAGE",
    "SEAL_EVERY",
    "RealisticRun",
    "realistic_run",
    "sha256_digest",
    "sys",
]


# ---------------------------------------------------------------------------
# a read-only view of the pristine dump (where each record sits)
# ---------------------------------------------------------------------------


def merkle_words(leaves: int, heads: int) -> str:
    """The audit line's clause for a recomputed Merkle log (none when no checkpoint signs a tree head)."""
    if not heads:
        return ""
    return f"; its Merkle log of {leaves} lea{'f' if leaves == 1 else 'ves'} reproduces {heads} signed tree head{'' if heads == 1 else 's'}"


class DumpView:
    """Decoded journal and audit records of a dump, for computing expected verdicts."""

    def __init__(self, dump: Path) -> None:
        self.dump = dump
        self.journal_items = load_lines(topic_file(dump, "journal"))
        self.audit_items = load_lines(topic_file(dump, "audit"))
        self.journal = journal_lines(self.journal_items)
        self.audit = audit_lines(self.audit_items)

    def entry(self, seq: int, run_id: str = MAIN_RUN) -> JournalLine:
        return entry_line(self.journal_items, run_id, seq)

    def checkpoints(self) -> list[dict[str, Any]]:
        """The decoded payloads of the dump's checkpoints (partition 0), in order."""
        path = topic_file(self.dump, "checkpoints")
        if not path.exists():
            return []
        c = codec.default_codec()
        return [dict(c.decode(c.decode(value_of(item)).record["payload"]).record) for item in load_lines(path)]

    def checkpoint_words(self, *, whole: bool | None = None) -> str:
        """What the verifier's OK audit line ends with: the signed checkpoints, the records none covers yet and, for a
        source holding the whole journal partition, the Merkle log's leaves and the tree heads it reproduced.
        ``whole`` None: whether this dump is one (its manifest names no runs); True for a live source whose partition
        holds exactly this dump's records (a dump of every run the partition holds)."""
        checkpoints = self.checkpoints()
        covered = checkpoints[-1]["audit_seq"] if checkpoints else 0
        n, m = len(checkpoints), len(self.audit) - covered
        words = f"{n} signed checkpoint{'' if n == 1 else 's'}, {m} record{'' if m == 1 else 's'} not covered by a checkpoint yet"
        if whole is None:
            whole = json.loads((self.dump / "manifest.json").read_text(encoding="utf-8")).get("runs") is None
        heads = sum("tree_size" in checkpoint for checkpoint in checkpoints)
        if whole:
            names = (codec.split_envelope(value_of(item))[0] for item in self.journal_items)
            words += merkle_words(sum(name in (codec.JOURNAL_RECORD, codec.SEAL_RECORD) for name in names), heads)
        return words

    def seals(self, run_id: str = MAIN_RUN) -> list[JournalLine]:
        return seal_lines(self.journal_items, run_id)

    def refusal_lines(self, run_id: str = MAIN_RUN) -> list[str]:
        """The report's ``REFUSED`` lines of ``run_id``, from the dump's Refusal.v2 records (partition 0)."""
        path = topic_file(self.dump, "refusals")
        c = codec.default_codec()
        lines = []
        for item in load_lines(path) if path.exists() else []:
            if key_of(item) != run_id.encode():
                continue
            r = c.decode(value_of(item)).record
            assert r["authenticated"], "the suite's refusals all come after the producer's signature verified"
            stage = f" stage {r['stage_id']}" if r["stage_id"] else ""
            kind = f" [{r['kind']}]" if r["kind"] else ""
            lines.append(
                f"  REFUSED {r['code']}{stage}{kind} (refusals partition 0, offset {item['offset']}) -- "
                f"by {r['producer']} (key {r['key_id']})"
            )
        return lines

    def entry_hash(self, seq: int, run_id: str = MAIN_RUN) -> str:
        return str(self.entry(seq, run_id).envelope["entry_hash"])

    def audit_result(self, seq: int, run_id: str = MAIN_RUN) -> AuditLine:
        return audit_line_for(self.audit_items, run_id, "activity.result", seq)

    def crossings(self, run_id: str = MAIN_RUN) -> int:
        """How many audit records mirror a record of ``run_id``."""
        return sum(1 for a in self.audit if a.entry["run_id"] == run_id)

    def journal_crossings(self, run_id: str = MAIN_RUN) -> int:
        """How many audit records mirror a journal record of ``run_id`` (its results and seals, not its refusals)."""
        return sum(1 for a in self.audit if a.entry["run_id"] == run_id and a.entry["event"] != "activity.refused")

    def audit_refusal(self, run_id: str = MAIN_RUN) -> AuditLine:
        """The audit record mirroring ``run_id``'s one refusal."""
        (line,) = [a for a in self.audit if a.entry["run_id"] == run_id and a.entry["event"] == "activity.refused"]
        return line

    def audit_seal(self, seal: JournalLine) -> AuditLine:
        (line,) = [
            a
            for a in self.audit
            if a.entry["event"] == "run.sealed"
            and a.entry["record_hash"] == sha256_digest(value_of(self.journal_items[seal.index]))
        ]
        return line

    def stage(self, stage_id: str) -> JournalLine:
        (line,) = [j for j in self.journal if j.kind == "entry" and j.record["stage_id"] == stage_id]
        return line

    def observation(self, stage_id: str, *, kind: str | None = None, ref_suffix: str = "") -> dict[str, str]:
        found = [
            o
            for o in self.stage(stage_id).record["observations"]
            if (kind is None or o["kind"] == kind) and o["ref"].endswith(ref_suffix)
        ]
        return dict(found[0])


# ---------------------------------------------------------------------------
# synthetic dumps straight from the pure scheduler core (no Kafka)
# ---------------------------------------------------------------------------


SYNTHETIC_PRODUCER = "synthetic@bench"
"""Signs the synthetic run's submissions (a test identity: ``tests.support.producers``)."""


def synthetic_dump(root: Path, entries: int, *, run_id: str = "run-big", seal_every: int = 1000) -> TrustedKeys:
    """A dump of one run with ``entries`` accepted coding stages, as the real scheduler core writes it.

    Returns the keys to pin. No CAS is written (verify with ``cas=None``): the
    records are real, only the evidence bytes are absent.
    """
    from bernstein.consumers.core.model import InputRecord, SchedulerConfig
    from bernstein.consumers.core.step import SchedulerCore, initial_state
    from bernstein.schemas.canonical import artifact_hash, hmac_key_id
    from bernstein.verifier.sources import DUMP_FORMAT, StoredRecord, encode_dump_line

    signer = Ed25519Signer.from_seed(hashlib.sha256(b"synthetic-signer").digest())
    secret = hashlib.sha256(b"synthetic-audit").digest()
    config = SchedulerConfig(
        roles={"developer": "coding"},
        signer=signer,
        audit_key=secret,
        audit_key_id=hmac_key_id(secret),
        seal_every=seal_every,
        producers=registry(SYNTHETIC_PRODUCER),
    )
    core = SchedulerCore(config)
    state = initial_state(config, 0)
    prefix = "synthetic"
    streams = ("journal", "refusals", "audit", "deadletter", "checkpoints")
    topic_names = {
        "journal": f"{prefix}.activity.journal",
        "refusals": f"{prefix}.activity.refusals",
        "audit": f"{prefix}.audit",
        "deadletter": f"{prefix}.activity.deadletter",
        "checkpoints": f"{prefix}.checkpoints",
    }
    for stream in streams:
        (root / "topics" / stream).mkdir(parents=True, exist_ok=True)
    handles = {stream: (root / "topics" / stream / "0.jsonl").open("wb") for stream in streams}
    offsets = dict.fromkeys(streams, 0)
    producer = {"id": SYNTHETIC_PRODUCER, "sdk": "bernstein-python/0.1.0"}
    try:
        for i in range(entries + 1):
            if i < entries:
                artifact = f"artifact {i}\n".encode()
                observations = [
                    {
                        "kind": "file",
                        "ref": f"src/file-{i}-{j}.py",
                        "content_hash": sha256_digest(f"obs {i} {j}".encode()),
                        "size": len(f"obs {i} {j}".encode()),
                    }
                    for j in range(3)
                ]
                value = encode_signed_submission(
                    {
                        "submission_id": f"sub-{i}",
                        "run_id": run_id,
                        "stage_id": f"stage-{i}",
                        "role": "developer",
                        "producer": producer,
                        "kind": "coding",
                        "artifact": artifact,
                        "artifact_hash": artifact_hash(artifact),
                        "evidence_set_hash": evidence_set_hash_of(o["content_hash"] for o in observations),
                        "observations": observations,
                        "terminal_state": "completed",
                        "reason_code": "ok",
                        "occurred_at_ms": 1_700_000_000_000 + i,
                    }
                )
            else:
                value = encode_signed_close(
                    {"submission_id": "close", "run_id": run_id, "producer": producer, "occurred_at_ms": 1_700_000_000_000 + i}
                )
            record = InputRecord(
                topic=f"{prefix}.activity.submissions",
                partition=0,
                offset=i,
                timestamp_ms=1_700_000_000_000 + i,
                key=run_id.encode(),
                value=value,
            )
            state, outputs = core.step(state, record)
            for out in outputs:
                stream = out.stream.value
                stored = StoredRecord(
                    stream, topic_names[stream], 0, offsets[stream], out.timestamp_ms, out.key, out.value, out.headers
                )
                handles[stream].write(encode_dump_line(stored))
                offsets[stream] += 1
    finally:
        for handle in handles.values():
            handle.close()
    (root / "manifest.json").write_text(json.dumps({"format": DUMP_FORMAT, "runs": [run_id]}) + "\n", encoding="utf-8")
    if offsets["journal"] != entries + entries // seal_every + 1:
        raise AssertionError(f"synthetic run has {offsets['journal']} journal records (refusals: {offsets['refusals']})")
    pinned = TrustedKeys(ed25519={signer.key_id: signer.public_key_raw}, hmac={config.audit_key_id: secret})
    return pinned.merged(producer_trust(producer["id"]))


def evidence_set_hash_of(hashes: Any) -> str:
    from bernstein.schemas.canonical import evidence_set_hash

    return evidence_set_hash(hashes)
