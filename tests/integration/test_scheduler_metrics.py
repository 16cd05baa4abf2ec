"""``scheduler run --metrics-port 0 --log-format json`` on the real (secured) broker.

One run: ``bernstein submit`` (as User:producer) publishes stages (journalled, refused under two
codes), a run close (a seal) and, from a plain producer, undecodable records (dead letters under
two codes); the scheduler (as User:scheduler, the Rust core) serves ``/metrics``. Its counters
must equal what the output topics hold: journal entries, seals, refusals by code, dead letters by
code, consumed = the input's records. The lag: a scheduler stopped with SIGSTOP cannot be scraped,
so records are published while it is stopped; once it resumes, the gauge shows them (lag > 0) and
falls to 0 when it has caught up. ``/healthz`` and ``/readyz`` answer 200 while it consumes.

Every stderr line of the scheduler is one JSON event; no line of the scheduler, of ``bernstein
submit`` (a good run and a refused description that carries the typed value) or of ``keys show``
holds any key (seal and producer private keys, audit, lineage and redaction
HMAC keys), a SCRAM password of ``.infra/clients``, the S3 secret, or the secret-looking value
the agent "typed" into its artifact and evidence, in plain, hex or base64 form.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, load_pem_private_key
from prometheus_client.parser import text_string_to_metric_families

from bernstein.schemas import codec
from bernstein.substrate.config import Topics
from tests.conftest import REPO, as_component
from tests.support.kafka import produce_all, read_partition

pytestmark = pytest.mark.integration

JSON_KEYS = {"ts", "level", "logger", "event", "message", "partition"}


class Scheduler:
    """The scheduler subprocess, its stderr collected line by line."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        command = ["scheduler", "run", "--metrics-port", "0", "--log-format", "json", *args]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bernstein", *command],
            cwd=REPO,
            env=as_component(command, env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def event(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if line.startswith("{") and json.loads(line).get("event") == name:
                    return dict(json.loads(line))
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no {name!r} event:\n" + "".join(self.lines))

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        time.sleep(0.2)  # the reader thread drains the pipe
        return "".join(self.lines)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = get(f"{base}/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("partition", "prefix")))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("partition") == "0"
    }


def by_code(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> dict[str, int]:
    return {dict(labels)["code"]: int(value) for (n, labels), value in metrics.items() if n == name}


def wait_consumed(base: str, count: int, timeout: float = 90.0) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    deadline = time.monotonic() + timeout
    while True:
        metrics = scrape(base)
        if metrics[("bernstein_scheduler_records_consumed_total", ())] >= count:
            return metrics
        assert time.monotonic() < deadline, f"consumed {metrics[('bernstein_scheduler_records_consumed_total', ())]} of {count}"
        time.sleep(0.1)


def descriptions(typed: str) -> str:
    lines: list[dict[str, Any]] = [
        {
            "run_id": "run-m",
            "stage_id": f"stage-{i}",
            "role": "developer",
            "kind": "coding",
            "artifact": {"step": i, "typed": typed},
            "observations": [{"kind": "note", "ref": "form", "text": f"typed {typed} into the form {i}"}],
        }
        for i in range(4)
    ]
    lines.append(  # refused: ARTIFACT_HASH_MISMATCH
        {
            "run_id": "run-m",
            "stage_id": "bad-hash",
            "role": "developer",
            "kind": "coding",
            "artifact": typed,
            "artifact_hash": "sha256:" + "00" * 32,
        }
    )
    lines.append(  # refused: a role the manifest does not declare
        {"run_id": "run-m", "stage_id": "ghost-role", "role": "ghost", "kind": "coding", "artifact": "x"}
    )
    lines.append({"close_run": "run-m"})
    return "".join(json.dumps(line) + "\n" for line in lines)


def secret_forms(secret: bytes) -> set[str]:
    """A secret as it could be printed: hex (both cases), base64 (standard and URL-safe, padded or not)."""
    forms = {secret.hex(), secret.hex().upper()}
    for encoded in (base64.b64encode(secret).decode(), base64.urlsafe_b64encode(secret).decode()):
        forms |= {encoded, encoded.rstrip("=")}
    return forms


def key_material(*directories: Path) -> dict[str, set[str]]:
    """Every secret of the key directories (HMAC keys, Ed25519 private keys), the SCRAM passwords and the S3 secret."""
    found: dict[str, set[str]] = {}
    for directory in directories:
        for path in sorted(directory.iterdir()):
            if path.name.endswith(".hmac.key"):
                found[str(path)] = secret_forms(bytes.fromhex(path.read_text().strip()))
            elif path.name.endswith(".ed25519.key"):
                key = load_pem_private_key(path.read_bytes(), password=None)
                raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
                body = "".join(line for line in path.read_text().splitlines() if not line.startswith("-----"))
                found[str(path)] = secret_forms(raw) | {body}
    for path in sorted((REPO / ".infra" / "clients").glob("*.properties")):
        for line in path.read_text().splitlines():
            if line.startswith("sasl.password="):
                password = line.split("=", 1)[1].strip()
                found[f"{path} sasl.password"] = {password} | secret_forms(password.encode())
    return found


def test_metrics_equal_the_topics_lag_falls_to_zero_and_no_secret_is_logged(
    services: Any, cli_env: dict[str, str], install_keys: Any, producer_keys: Any, tmp_path: Path
) -> None:
    topics = Topics(cli_env["BERNSTEIN_TOPIC_PREFIX"])
    typed = "pw-" + secrets.token_hex(16)  # what the agent typed: journalled, never logged
    scheduler = Scheduler(cli_env, "--batch-max", "5", "--progress-every", "0.5")
    try:
        listening = scheduler.event("metrics_listening")
        base = listening["url"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", base) and listening["port"] > 0
        scheduler.event("consuming")
        assert get(f"{base}/readyz") == (200, "consuming\n")
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/nothing")[0] == 404

        submit_args = ["submit"]
        published = subprocess.run(
            [sys.executable, "-m", "bernstein", *submit_args],
            input=descriptions(typed),
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=as_component(submit_args, cli_env),
            timeout=180,
        )
        assert published.returncode == 0, published.stderr
        garbage = [
            (b"run-m", b"not avro: " + typed.encode()),  # NOT_AVRO_SINGLE_OBJECT, with the typed value in its raw bytes
            (b"run-m", b""),  # EMPTY_VALUE
            (b"run-m", b"\xc3\x01" + bytes(8) + b"body"),  # UNKNOWN_SCHEMA_FINGERPRINT
        ]
        produce_all(services.bootstrap, topics.submissions, garbage)
        first = 7 + len(garbage)
        wait_consumed(base, first)

        # stopped, it cannot be scraped: publish while it is, then watch the lag it comes back to
        scheduler.process.send_signal(signal.SIGSTOP)
        backlog = 400
        try:
            produce_all(services.bootstrap, topics.submissions, [(b"run-lag", b"lag %d" % i) for i in range(backlog)])
        finally:
            scheduler.process.send_signal(signal.SIGCONT)
        lags: list[float] = []
        deadline = time.monotonic() + 120
        while True:
            metrics = scrape(base)
            lag = metrics[("bernstein_scheduler_consumer_lag_records", ())]
            lags.append(lag)
            consumed = metrics[("bernstein_scheduler_records_consumed_total", ())]
            if consumed >= first + backlog and lag == 0:
                break
            assert time.monotonic() < deadline, f"lags {lags[-5:]}, consumed {consumed}"
            time.sleep(0.01)
        assert max(lags) > 0, f"the lag never showed the {backlog} records published while stopped: {lags[:20]}"
        assert max(lags) <= backlog
        assert lags[-1] == 0
        # it only falls (a scrape between a fetch and a commit may repeat a value, never rise)
        peak = lags.index(max(lags))
        assert all(a >= b for a, b in zip(lags[peak:], lags[peak + 1 :], strict=False)), lags

        total = first + backlog
        metrics = scrape(base)
        # every scheduler sample names the deployment (topic prefix) as well as the partition
        samples = text_string_to_metric_families(get(f"{base}/metrics")[1])
        labelled = {
            (s.labels.get("prefix"), s.labels.get("partition"))
            for f in samples
            for s in f.samples
            if s.name.startswith("bernstein_")
        }
        assert labelled == {(topics.prefix, "0")}, labelled
        assert get(f"{base}/readyz") == (200, "consuming\n")
        assert get(f"{base}/healthz") == (200, "ok\n")
    finally:
        log_text = scheduler.stop()
    assert scheduler.process.returncode == 0, log_text

    # the counters are the topics' contents
    inputs = read_partition(services.bootstrap, topics, "submissions")
    journal = read_partition(services.bootstrap, topics, "journal")
    refusals = read_partition(services.bootstrap, topics, "refusals")
    dead = read_partition(services.bootstrap, topics, "deadletter")
    seals = [r for r in journal if r.schema == codec.SEAL_RECORD]
    assert len(inputs) == total
    assert metrics[("bernstein_scheduler_records_consumed_total", ())] == total
    assert metrics[("bernstein_scheduler_records_journalled_total", ())] == len(journal) - len(seals) == 4
    assert metrics[("bernstein_scheduler_seals_total", ())] == len(seals) == 1
    refused_codes = dict(Counter(r.record["code"] for r in refusals))
    dead_codes = dict(Counter(r.record["code"] for r in dead))
    assert by_code(metrics, "bernstein_scheduler_records_refused_total") == refused_codes
    assert by_code(metrics, "bernstein_scheduler_records_dead_lettered_total") == dead_codes
    assert len(refused_codes) == 2 and refused_codes["ARTIFACT_HASH_MISMATCH"] == 1, refused_codes
    assert dead_codes == {"NOT_AVRO_SINGLE_OBJECT": 1 + backlog, "EMPTY_VALUE": 1, "UNKNOWN_SCHEMA_FINGERPRINT": 1}
    committed = metrics[("bernstein_scheduler_transactions_total", (("outcome", "committed"),))]
    assert committed >= total / 5
    assert metrics[("bernstein_scheduler_transactions_total", (("outcome", "aborted"),))] == 0
    assert metrics[("bernstein_scheduler_batch_size_records_count", ())] == committed
    assert metrics[("bernstein_scheduler_batch_size_records_sum", ())] == total
    assert metrics[("bernstein_scheduler_transaction_duration_seconds_count", ())] == committed
    assert metrics[("bernstein_scheduler_commit_duration_seconds_count", ())] == committed
    assert metrics[("bernstein_scheduler_input_high_watermark", ())] == total
    assert metrics[("bernstein_scheduler_input_committed_offset", ())] == total
    assert metrics[("bernstein_scheduler_ready", ())] == 1
    assert metrics[("bernstein_scheduler_rebuilds_total", ())] == 1
    assert 0 < metrics[("bernstein_scheduler_rebuild_duration_seconds", ())] < 60
    assert abs(metrics[("bernstein_scheduler_last_seal_timestamp_seconds", ())] - time.time()) < 300
    assert metrics[("bernstein_scheduler_core_info", (("core", "rust"), ("description", "native (bernstein_native, Rust)")))] == 1

    # every stderr line is one JSON event
    events = [json.loads(line) for line in log_text.splitlines()]
    assert all(JSON_KEYS <= set(e) and e["partition"] == 0 and e["logger"] == "bernstein.scheduler" for e in events), log_text
    assert all(e["level"] in ("debug", "info", "warning", "error") for e in events)
    names = [e["event"] for e in events]
    for name in ("producers_registered", "keys", "core", "partitioning", "state_rebuilt", "consuming", "metrics_listening"):
        assert name in names, names
    assert names[-1] == "stopped" and events[-1]["consumed"] == total and events[-1]["dead_lettered"] == len(dead)
    assert next(e for e in events if e["event"] == "core")["core"] == "rust"
    assert any(e["event"] == "progress" for e in events)

    # no secret in any log line
    material = key_material(install_keys.directory, producer_keys.directory)
    assert len(material) >= 5 + 4  # install seal + audit, producer + lineage + redaction; four principals
    for path, forms in material.items():  # the scan looks for the very text a key file holds
        if path.endswith(".hmac.key"):
            assert Path(path).read_text().strip() in forms
    material["typed value"] = {typed, *secret_forms(typed.encode())}
    material["S3 secret key"] = {cli_env["BERNSTEIN_S3_SECRET_KEY"]}
    bad_line = {"run_id": "run-m", "stage_id": "bad", "role": "developer", "kind": "coding", "artifact": typed,
                "observations": [{"kind": "note", "ref": "form", "text": typed, "typed": typed}]}  # fmt: skip
    refused = subprocess.run(
        [sys.executable, "-m", "bernstein", "submit"],
        input=json.dumps(bad_line) + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=as_component(["submit"], cli_env),
        timeout=180,
    )
    assert refused.returncode == 2 and "line 1, field observations[0].typed: unknown field" in refused.stderr
    shown = [
        subprocess.run(
            [sys.executable, "-m", "bernstein", "keys", "show", "--dir", str(directory), *flag],
            capture_output=True,
            text=True,
            timeout=60,
        )
        for directory, flag in ((install_keys.directory, []), (producer_keys.directory, ["--producer"]))
    ]
    assert all(result.returncode == 0 and "sha256:" in result.stdout for result in shown), shown
    logs = {
        "scheduler": log_text,
        "submit stdout": published.stdout,
        "submit stderr": published.stderr,
        "failed submit stderr": refused.stderr,
        **{f"keys show {i}": result.stdout + result.stderr for i, result in enumerate(shown)},
    }
    leaks = [(what, where) for what, forms in material.items() for where, text in logs.items() if any(f in text for f in forms)]
    assert not leaks, leaks
    # and the scan can see one: the typed value is in the dead letter the scheduler wrote (its raw bytes)
    assert any(typed.encode() in (r.value or b"") for r in dead)
    print(f"lag scrapes: {len(lags)}, peak {max(lags)}, first {lags[:3]}")
