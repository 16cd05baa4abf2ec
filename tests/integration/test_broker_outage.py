"""A broker that is not there is named within seconds, with what to check.

Each command's first request to Kafka waits at most ``BERNSTEIN_KAFKA_CONNECT_TIMEOUT`` seconds (default 5)
before it says it cannot reach the broker, and the message names the address and what to check. Nothing
listens on 127.0.0.1:9.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bernstein.substrate.keys import init_keys
from tests.support import tamper as kit
from tests.support.producer_setup import trusted_keys, write_manifest


@pytest.mark.parametrize(
    "command",
    [
        ["activity", "verify", "run-x", "--from", "kafka", "--cas", "none", "--trusted-keys", "{trust}"],
        ["audit", "follow", "--once", "--trusted-keys", "{trust}", "--state", "{tmp}/state"],
        ["scheduler", "run", "--partition", "0"],
    ],
    ids=["verify", "follow", "scheduler"],
)
def test_an_unreachable_broker_is_named_within_seconds_with_the_hint(services: Any, tmp_path: Path, command: list[str]) -> None:
    keys = init_keys(tmp_path / "keys")
    manifest = write_manifest(tmp_path / "roles.toml")
    trust = tmp_path / "trust.json"
    trusted_keys(keys, manifest).write(trust)
    env = {
        **kit.offline_env(),
        "BERNSTEIN_KAFKA_BOOTSTRAP": "127.0.0.1:9",
        "BERNSTEIN_KEYS_DIR": str(keys.directory),
        "BERNSTEIN_ROLES": str(manifest),
    }
    args = [part.format(trust=trust, tmp=tmp_path) for part in command]
    began = time.monotonic()
    result = kit.bernstein(args, env)
    took = time.monotonic() - began
    assert result.returncode == 3, result.stdout + result.stderr
    assert "cannot reach Kafka at 127.0.0.1:9" in result.stderr and "is the broker running (`infra/up`)" in result.stderr
    assert "Traceback" not in result.stderr
    assert took < 15, f"{took:.1f}s before the broker was named unreachable"
