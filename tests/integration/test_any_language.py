"""One run, four producers in three languages: Python, Go, TypeScript and ``bernstein submit``.

A single run on a 6-partition submissions topic gets one coding stage from each of the
Python emitter SDK, the Go SDK (``producers/go``, its ``bernstein-go-emit`` command), the
TypeScript SDK (``producers/typescript``, ``dist/bin/emit.js``) and the ``bernstein submit``
command, each under its own registered producer identity and the broker's producer
principal; the Go SDK closes it. Every record must land on the run's murmur2 partition, the
scheduler must journal every stage, and the exported run must verify (exit 0) with the
trusted-keys file.

Each SDK also publishes the scheduler-step vector ``artifact_hash_mismatch`` (a stage whose
artifact hash is deliberately wrong): each gets exactly the refusal the vector predicts.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bernstein.schemas import codec
from bernstein.schemas.canonical import sha256_digest
from bernstein.schemas.partitioning import partition_for
from bernstein.schemas.records import ENTRY_ACTIVITY_RESULT
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import InstallKeys, ProducerKeys, init_keys, init_producer_keys
from tests.conftest import bernstein_env, principal_env
from tests.support import tamper as kit
from tests.support.kafka import fresh_topics, read_partition
from tests.support.pipeline import verify_dump
from tests.support.prefixes import fresh_prefix
from tests.support.principals import producer_principal
from tests.support.producer_setup import trusted_keys, write_manifest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 6
GO_DIR = REPO / "producers" / "go"
GO_EMIT = GO_DIR / "bin" / "bernstein-go-emit"
TS_DIR = REPO / "producers" / "typescript"
TS_EMIT = TS_DIR / "dist" / "bin" / "emit.js"
STEPS = REPO / "schemas" / "vectors" / "steps.json"
LANGUAGES = ("python", "go", "typescript", "submit")


@dataclass
class Deployment:
    services: Any
    workdir: Path
    prefix: str
    topics: Topics
    keys: InstallKeys
    manifest: Path
    trust_file: Path
    producers: dict[str, ProducerKeys]

    def env(self, language: str) -> dict[str, str]:
        """The environment of ``language``'s producer: these topics and S3, its key directory, the producer principal."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_")}
        env = {**base, **bernstein_env(self.services, self.prefix, self.keys, self.producers[language], self.manifest)}
        return principal_env(env, self.services, "producer")


def _go_emit() -> list[str]:
    if not GO_EMIT.exists():  # make test builds it (producers/go/check.sh); build it when a test runs alone
        go = shutil.which("go") or "/usr/local/go/bin/go"
        subprocess.run([go, "build", "-o", str(GO_EMIT), "./cmd/bernstein-go-emit"], cwd=GO_DIR, check=True, timeout=600)
    return [str(GO_EMIT)]


def _ts_emit() -> list[str]:
    if not TS_EMIT.exists():  # make test builds it (producers/typescript/check.sh)
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=TS_DIR, check=True, timeout=600)
        subprocess.run(["npm", "run", "build"], cwd=TS_DIR, check=True, timeout=600)
    return ["node", str(TS_EMIT)]


def emit(command: Sequence[str], lines: Sequence[dict[str, Any]], env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    """Feed activity descriptions to a producer command; the JSON line it prints per published record."""
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    result = subprocess.run(list(command), input=stdin, env=env, cwd=cwd, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, f"{command[0]} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    published = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert len(published) == len(lines), f"{command[0]} published {len(published)} of {len(lines)}:\n{result.stdout}"
    return published


def mismatch_vector() -> dict[str, Any]:
    """The scheduler-step vector case ``artifact_hash_mismatch``: its submission and the refusal it gets."""
    steps = json.loads(STEPS.read_text(encoding="utf-8"))
    (case,) = [c for c in steps["cases"] if c["name"] == "artifact_hash_mismatch"]
    return dict(case)


def mismatch_description(case: dict[str, Any], run_id: str, stage_id: str) -> dict[str, Any]:
    """The vector's described ``stage`` (its artifact, its wrong hash, its observation), moved into run ``run_id``."""
    stage = dict(case["inputs"][-1]["stage"])
    assert stage["artifact_hash"] == case["inputs"][-1]["record"]["artifact_hash"]
    return {**stage, "run_id": run_id, "stage_id": stage_id}


def predicted_refusal(case: dict[str, Any]) -> dict[str, Any]:
    """The vector's refusal record (the output on the refusals stream of its last input)."""
    last = len(case["inputs"]) - 1
    (refusal,) = [o for o in case["outputs"] if o["stream"] == "refusals" and o.get("input_index", last) == last]
    return dict(refusal["record"])


def schedule_partition(d: Deployment, partition: int) -> None:
    """The real scheduler, in-process, over one partition until it has consumed everything published to it."""
    from bernstein.consumers.core.model import SchedulerConfig
    from bernstein.consumers.core.step import SchedulerCore
    from bernstein.consumers.manifest import load_manifest
    from bernstein.consumers.shell import SchedulerShell

    published = len(read_partition(d.services.bootstrap, d.topics, "submissions", partition))
    manifest = load_manifest(d.manifest)
    core = SchedulerCore(
        SchedulerConfig(
            roles=manifest.roles,
            signer=d.keys.signer,
            audit_key=d.keys.audit.secret,
            audit_key_id=d.keys.audit.key_id,
            producers=manifest.producers,
            submission_partitions=PARTITIONS,
        )
    )
    shell = SchedulerShell(bootstrap=d.services.bootstrap, topics=d.topics, partition=partition, core=core, progress=None)
    counters = shell.run(until=lambda c: c.consumed >= published, idle_exit=60)
    assert counters.consumed >= published, f"the scheduler consumed {counters.consumed} of {published}"


@pytest.fixture
def deployment(services: Any, tmp_path: Path) -> Deployment:
    prefix = fresh_prefix()
    topics = fresh_topics(services.bootstrap, prefix, partitions=PARTITIONS)
    keys = init_keys(tmp_path / "keys")
    producers = {lang: init_producer_keys(tmp_path / f"producer-{lang}", f"{lang}@any-language") for lang in LANGUAGES}
    manifest = write_manifest(tmp_path / "roles.toml", *producers.values(), test_identities=False)
    trust_file = tmp_path / "trusted-keys.json"
    trusted_keys(keys, manifest).write(trust_file)
    return Deployment(services, tmp_path, prefix, topics, keys, manifest, trust_file, producers)


def coding_stage(run_id: str, stage_id: str, language: str, observation: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "stage_id": stage_id,
        "role": "developer",
        "kind": "coding",
        "artifact": {"change": f"a patch written by the {language} producer", "language": language},
        "observations": [observation],
    }


def test_one_run_from_python_go_typescript_and_submit_verifies(deployment: Deployment, tmp_path: Path) -> None:
    d = deployment
    run_id = "any-language-run-7"
    partition = partition_for(run_id.encode(), PARTITIONS)
    case = mismatch_vector()
    source = tmp_path / "main.go"
    source.write_bytes(b"package main\n\nfunc main() {}\n")
    published: dict[str, list[dict[str, Any]]] = {}

    # Python: the emitter SDK in-process, as the producer principal
    from bernstein.producers.emitter import Emitter
    from bernstein.producers.identity import ProducerIdentity
    from bernstein.substrate.cas import S3BlobStore

    python = d.producers["python"]
    with producer_principal(d.services):
        with Emitter(
            bootstrap=d.services.bootstrap,
            store=S3BlobStore(d.services.s3),
            topics=d.topics,
            producer=ProducerIdentity(python.name, python.signer),
        ) as emitter:
            from bernstein.producers.activity import ActivityResult

            observation = emitter.capture("file", "src/app.py", b"print('hello from python')\n")
            result = ActivityResult.build(
                "coding", {"change": "a patch written by the python producer", "language": "python"}, [observation]
            )
            sent = emitter.publish(run_id=run_id, stage_id="python-0", role="developer", result=result)
            published["python"] = [{"partition": sent.partition, "offset": sent.offset}]

    # bernstein submit, Go and TypeScript: the same activity descriptions on stdin
    submit = [str(kit.BERNSTEIN), "submit"]
    published["submit"] = emit(
        submit,
        [
            coding_stage(run_id, "submit-0", "submit", {"kind": "file", "ref": "notes.txt", "text": "from bernstein submit"}),
            mismatch_description(case, run_id, "submit-bad"),
        ],
        d.env("submit"),
        tmp_path,
    )
    published["typescript"] = emit(
        _ts_emit(),
        [
            coding_stage(
                run_id,
                "typescript-0",
                "typescript",
                {"kind": "file", "ref": "a.ts", "base64": base64.b64encode(b"export {}\n").decode()},
            ),
            mismatch_description(case, run_id, "typescript-bad"),
        ],
        d.env("typescript"),
        tmp_path,
    )
    published["go"] = emit(
        _go_emit(),
        [
            coding_stage(run_id, "go-0", "go", {"kind": "file", "ref": "main.go", "file": str(source)}),
            mismatch_description(case, run_id, "go-bad"),
            {"close_run": run_id},
        ],
        d.env("go"),
        tmp_path,
    )
    for language, records in published.items():
        assert {r["partition"] for r in records} == {partition}, f"{language} put the run off its murmur2 partition"

    schedule_partition(d, partition)

    c = codec.default_codec()
    journal = [
        c.decode(r.value)
        for r in read_partition(d.services.bootstrap, d.topics, "journal", partition)
        if r.key == run_id.encode()
    ]
    entries = [c.decode(j.record["payload"]).record for j in journal if j.schema.name == codec.JOURNAL_RECORD]
    stages = {e["stage_id"]: e for e in entries if e["entry_type"] == ENTRY_ACTIVITY_RESULT}
    assert sorted(stages) == ["go-0", "python-0", "submit-0", "typescript-0"]
    for language in LANGUAGES:
        assert stages[f"{language}-0"]["producer_id"] == d.producers[language].name
        assert stages[f"{language}-0"]["producer_key_id"] == d.producers[language].signer.key_id
    assert any(j.schema.name == codec.SEAL_RECORD for j in journal), "the Go SDK's close sealed no run"

    # every SDK's wrong artifact hash: exactly the refusal the scheduler-step vector predicts
    predicted = predicted_refusal(case)
    refusals = [
        c.decode(r.value).record
        for r in read_partition(d.services.bootstrap, d.topics, "refusals", partition)
        if r.key == run_id.encode()
    ]
    by_stage = {r["stage_id"]: r for r in refusals}
    assert sorted(by_stage) == ["go-bad", "submit-bad", "typescript-bad"]
    for stage_id, refusal in by_stage.items():
        assert refusal["code"] == predicted["code"] == "ARTIFACT_HASH_MISMATCH", stage_id
        for field in ("exception", "message", "field", "declared", "recomputed", "role", "kind"):
            assert refusal[field] == predicted[field], (stage_id, field)

    dump = kit.bernstein(
        ["topic", "export", "--run", run_id, "--out", str(tmp_path / "dump")],
        {**kit.offline_env(), **bernstein_env(d.services, d.prefix, d.keys, None, d.manifest)},
    )
    assert dump.returncode == 0, dump.stdout + dump.stderr
    verified = verify_dump(tmp_path / "dump", run_id, d.trust_file)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_every_sdk_stores_its_bytes_at_an_address_someone_else_filled_first(deployment: Deployment, tmp_path: Path) -> None:
    """an SDK skips an upload only when the object at the address carries the store's own checksum of the
    address; bytes another producer put there first (no checksum) never stop the true ones from being stored."""
    import io

    from bernstein.substrate.cas import S3BlobStore, blob_key

    d = deployment
    store = S3BlobStore(d.services.s3)
    run_id = "any-language-poisoned"
    payloads = {language: f"{language} evidence {os.urandom(6).hex()}\n".encode() for language in ("go", "typescript", "submit")}
    for data in payloads.values():
        digest = sha256_digest(data)
        store._client.put_object(store.settings.bucket, blob_key(digest), io.BytesIO(b"poison"), 6)
        assert store.has(digest) and not store.holds(digest)
    commands = {"go": _go_emit(), "typescript": _ts_emit(), "submit": [str(kit.BERNSTEIN), "submit"]}
    for language, command in commands.items():
        observation = {"kind": "file", "ref": "x.txt", "base64": base64.b64encode(payloads[language]).decode()}
        emit(command, [coding_stage(run_id, f"{language}-0", language, observation)], d.env(language), tmp_path)
    for language, data in payloads.items():
        digest = sha256_digest(data)
        assert store.holds(digest), f"{language} skipped its upload over bytes it did not check"
        assert store.get(digest) == data


GO_BROWSER = GO_DIR / "bin" / "bernstein-go-browser"
TS_BROWSER = TS_DIR / "dist" / "bin" / "browser.js"
PASSWORD = "hunter2-from-a-sdk"


def _go_browser() -> list[str]:
    if not GO_BROWSER.exists():  # producers/go/check.sh builds it; build it when a test runs alone
        go = shutil.which("go") or "/usr/local/go/bin/go"
        subprocess.run([go, "build", "-o", str(GO_BROWSER), "./cmd/bernstein-go-browser"], cwd=GO_DIR, check=True, timeout=600)
    return [str(GO_BROWSER)]


def _ts_browser() -> list[str]:
    if not TS_BROWSER.exists():  # producers/typescript/check.sh builds it
        _ts_emit()
        subprocess.run(["npm", "run", "build"], cwd=TS_DIR, check=True, timeout=600)
    return ["node", str(TS_BROWSER)]


def session_script(run_id: str, session_id: str, language: str) -> dict[str, Any]:
    """A signup session as a driver saw it and an agent decided it; the password comes from $SDK_PASSWORD."""

    def frame(n: int, aria: str, url: str = "http://127.0.0.1:8000/signup.html") -> dict[str, Any]:
        shot = f"\x89PNG {language} frame {n}".encode()
        return {"screenshot_base64": base64.b64encode(shot).decode(), "aria_snapshot": aria, "url": url}

    form = '- heading "Sign up" [level=1] [ref=e1]\n- textbox "Email" [ref=e2]{email}\n- textbox "Password" [ref=e3]{password}\n'
    return {
        "run_id": run_id,
        "session_id": session_id,
        "role": "navigator",
        "adapter": f"{language}-scripted",
        "steps": [
            {
                "frame": frame(0, "- document [ref=e0]", "about:blank"),
                "action": {"kind": "navigate", "target": "http://127.0.0.1:8000/signup.html"},
            },
            {
                "frame": frame(1, form.format(email="", password="")),
                "action": {"kind": "type", "target": "#email", "value": "ada@example.org"},
            },
            {
                "frame": frame(2, form.format(email=": ada@example.org", password="")),
                "action": {"kind": "type", "target": "#password", "value_env": "SDK_PASSWORD"},
            },
            {
                "frame": frame(3, form.format(email=": ada@example.org", password=f": {PASSWORD}")),
                "action": {"kind": "click", "target": "#create"},
            },
        ],
        "final": frame(
            4,
            f'- heading "Welcome, ada@example.org" [level=1]\n- text: your password {PASSWORD} is set\n',
            "http://127.0.0.1:8000/welcome.html",
        ),
    }


def record_session(command: Sequence[str], script: dict[str, Any], env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        list(command),
        input=json.dumps(script),
        env={**env, "SDK_PASSWORD": PASSWORD},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"{command[-1]} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_browser_sessions_recorded_from_go_and_typescript_verify_and_replay(deployment: Deployment, tmp_path: Path) -> None:
    """Each SDK records a 4-action signup session (a typed password among them): every action is journalled, the
    run verifies (exit 0) from its exported dump, and `bernstein browser replay` reconstructs both signed heads."""
    d = deployment
    run_id = "any-language-browser-3"
    partition = partition_for(run_id.encode(), PARTITIONS)
    sessions = {"go": ("go-browser-0", _go_browser()), "typescript": ("typescript-browser-0", _ts_browser())}
    for language, (session_id, command) in sessions.items():
        lines = record_session(command, session_script(run_id, session_id, language), d.env(language), tmp_path)
        assert [line.get("action_index") for line in lines] == [0, 1, 2, 3, None], lines
        assert {line["partition"] for line in lines} == {partition}, f"{language} put the session off its murmur2 partition"
        assert lines[-1]["stage_id"] == session_id and lines[-1]["terminal_state"] == "ok" and lines[-1]["action_count"] == 4
        assert lines[-1]["head_anchor"] == lines[3]["anchor"]
    emit(_go_emit(), [{"close_run": run_id}], d.env("go"), tmp_path)

    schedule_partition(d, partition)

    c = codec.default_codec()
    journal = [r for r in read_partition(d.services.bootstrap, d.topics, "journal", partition) if r.key == run_id.encode()]
    refusals = [r for r in read_partition(d.services.bootstrap, d.topics, "refusals", partition) if r.key == run_id.encode()]
    assert refusals == [], [c.decode(r.value).record for r in refusals]
    entries = [
        c.decode(c.decode(r.value).record["payload"]).record
        for r in journal
        if c.decode(r.value).schema.name == codec.JOURNAL_RECORD
    ]
    for language, (session_id, _) in sessions.items():
        actions = [e for e in entries if e.get("session_id") == session_id]
        assert [e["action_index"] for e in actions] == [0, 1, 2, 3], f"{language}'s actions were not all journalled"
        assert {e["producer_id"] for e in actions} == {d.producers[language].name}
        (result,) = [e for e in entries if e.get("stage_id") == session_id and e["entry_type"] == ENTRY_ACTIVITY_RESULT]
        assert result["producer_id"] == d.producers[language].name
    submitted = b"".join(r.value for r in read_partition(d.services.bootstrap, d.topics, "submissions", partition))
    assert PASSWORD.encode() not in submitted and PASSWORD.encode() not in b"".join(r.value for r in journal)

    dump = tmp_path / "browser-dump"
    exported = kit.bernstein(
        ["topic", "export", "--run", run_id, "--out", str(dump)],
        {**kit.offline_env(), **bernstein_env(d.services, d.prefix, d.keys, None, d.manifest)},
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    verified = verify_dump(dump, run_id, d.trust_file)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    for session_id, _ in sessions.values():
        assert f"  OK {session_id} [browser] (evidence reattached, 4 steps replayed" in verified.stdout, verified.stdout
    replayed = kit.bernstein(
        ["browser", "replay", run_id, "--from", str(dump), "--trusted-keys", str(d.trust_file)], kit.offline_env(), cwd=tmp_path
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    for session_id, _ in sessions.values():
        assert f"replay run {run_id} session {session_id}" in replayed.stdout, replayed.stdout
    assert replayed.stdout.count("replayed -- 4 actions reconstruct the signed head") == 2, replayed.stdout
