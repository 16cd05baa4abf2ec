"""``bernstein browser run|replay`` and ``bernstein activity verify`` as an operator runs them."""

from __future__ import annotations

import secrets
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bernstein.producers.emitter import Emitter
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import InstallKeys, ProducerKeys
from demo.site_server import serve
from tests.conftest import Services, as_component
from tests.support.browser_site import SIGNUP_FLOW, SITE, all_topic_records, chromium_processes, refusals, run_scheduler
from tests.support.producer_setup import identity

pytestmark = pytest.mark.browser


def bernstein(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bernstein", *args], env=as_component(args, env), capture_output=True, text=True, timeout=180
    )


def test_run_replay_and_verify_from_the_command_line(
    services: Services,
    prefix: str,
    install_keys: InstallKeys,
    producer_keys: ProducerKeys,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    password = "pw-" + secrets.token_hex(16)
    run_id = f"cli-{uuid.uuid4().hex[:8]}"
    env = {**cli_env, "BERNSTEIN_SIGNUP_PASSWORD": password}
    with serve(SITE) as (url, _stop):
        ran = bernstein(
            "browser",
            "run",
            "--flow",
            str(SIGNUP_FLOW),
            "--url",
            url,
            "--allow-origin",  # the local test server is on loopback: allowed by its exact origin
            url,
            "--run",
            run_id,
            "--session",
            "browser-0",
            "--worktree",
            str(tmp_path / "w"),
            env=env,
        )
    assert ran.returncode == 0, ran.stderr
    assert f"published browser session: run={run_id} session=browser-0 [browser]" in ran.stdout
    assert "6 actions, head sha256:" in ran.stdout and "completed/ok" in ran.stdout
    assert chromium_processes(str(tmp_path)) == []

    topics = Topics(prefix)
    with Emitter(
        bootstrap=services.bootstrap, store=S3BlobStore(services.s3), topics=topics, producer=identity("closer")
    ) as emitter:
        emitter.close_run(run_id)
    run_scheduler(services.bootstrap, topics, install_keys, expect=6 + 1 + 1, producers=[producer_keys])
    assert refusals(services.bootstrap, topics) == []

    # the verifier pins what `keys trust` exports: the scheduler's keys and the manifest's producers ($BERNSTEIN_ROLES)
    trust = tmp_path / "trusted-keys.json"
    exported = bernstein("keys", "trust", "--out", str(trust), env=env)
    assert exported.returncode == 0, exported.stderr
    assert f"producer {producer_keys.signer.key_id} 'agents@test'" in exported.stdout

    replayed = bernstein("browser", "replay", run_id, "--trusted-keys", str(trust), env=env)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    lines = replayed.stdout.splitlines()
    assert lines[0] == f"replay run {run_id} session browser-0"
    assert lines[1:7] == [
        f"  step OK index={i} {k}" for i, k in enumerate(["navigate", "type", "type", "type", "check", "submit"])
    ]
    assert "replayed -- 6 actions reconstruct the signed head" in replayed.stdout

    verified = bernstein("activity", "verify", run_id, "--trusted-keys", str(trust), env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # the lineage envelope is keyed with the worker's own lineage key, which no trusted-keys file holds; its
    # producer signatures are checked against the pinned producer key
    assert (
        "  OK browser-0 [browser] (evidence reattached, 6 steps replayed, lineage HMACs of 6 action(s) are their "
        "producer's local check, by design (its lineage key never leaves the host); their pinned Ed25519 signatures verified)"
    ) in verified.stdout, verified.stdout
    assert "  OK producers (8 producer signatures verified with pinned producer keys;" in verified.stdout
    assert f"{producer_keys.signer.key_id} (agents@test)" in verified.stdout
    assert "    step OK index=5 submit" in verified.stdout

    missing = bernstein("browser", "replay", "no-such-run", "--trusted-keys", str(trust), env=env)
    assert missing.returncode == 1 and missing.stdout.startswith("NOT FOUND")

    # the typed password: not in any output, topic or file
    for output in (ran, replayed, verified, missing):
        assert password not in output.stdout and password not in output.stderr
    needle = password.encode()
    for record in all_topic_records(services.bootstrap, topics):
        assert needle not in (record.value or b"")
    for path in (tmp_path / "w").rglob("*"):
        assert not path.is_file() or needle not in path.read_bytes()


def test_an_incapable_adapter_is_refused_before_anything_starts(cli_env: dict[str, str], tmp_path: Path) -> None:
    worktree = tmp_path / "w"
    refused = bernstein(
        "browser",
        "run",
        "--adapter",
        "aider",
        "--flow",
        str(SIGNUP_FLOW),
        "--url",
        "http://127.0.0.1:9",
        "--run",
        "r-gate",
        "--session",
        "browser-0",
        "--worktree",
        str(worktree),
        env=cli_env,
    )
    assert refused.returncode == 3
    assert "COMPUTER_USE_NOT_SUPPORTED" in refused.stderr and "suggested adapters: playwright" in refused.stderr
    assert not worktree.exists()  # no profile, no ledger: nothing was prepared, let alone launched
    assert chromium_processes(str(tmp_path)) == []
