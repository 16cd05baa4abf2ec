"""`bernstein scheduler run`: progress while it runs, a clean stop on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from bernstein.producers.activity import ActivityResult
from bernstein.producers.emitter import Emitter
from bernstein.substrate.config import Settings
from bernstein.substrate.keys import ProducerKeys
from tests.conftest import Services, as_component
from tests.support.kafka import fresh_topics

REPO = Path(__file__).resolve().parents[2]


def test_sigterm_stops_cleanly_after_committing(
    cli_env: dict[str, str], settings: Settings, s3_store: object, producer_keys: ProducerKeys
) -> None:
    # the admin creates the topics (producers never do); the producer signs with its own keys; the scheduler runs
    # with the manifest that registers them (cli_env)
    assert settings.kafka_bootstrap is not None
    fresh_topics(settings.kafka_bootstrap, settings.topics.prefix)
    with Emitter.from_settings(settings, producer=producer_keys, store=s3_store) as emitter:  # type: ignore[arg-type]
        for i in range(3):
            page = emitter.capture("file", f"f{i}.py", f"print({i})\n".encode())
            emitter.publish(
                run_id="run-term", stage_id=f"s{i}", role="developer", result=ActivityResult.build("coding", b"d%d" % i, [page])
            )
    process = subprocess.Popen(
        [sys.executable, "-m", "bernstein", "scheduler", "run", "--progress-every", "0.2"],
        cwd=REPO,
        env=as_component(["scheduler"], cli_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        lines: list[str] = []
        assert process.stderr is not None
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            lines.append(line)
            if "consumed 3 journalled 3" in line:
                break
        else:
            raise AssertionError("no progress line reported the 3 submissions:\n" + "".join(lines))
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, rest
    assert "Traceback" not in rest
    final = [line for line in rest.splitlines() if "stopped:" in line]
    assert final and "consumed 3 journalled 3 refused 0" in final[-1]
    # A restart finds nothing left to do: the offsets were committed with the outputs.
    again = subprocess.run(
        [sys.executable, "-m", "bernstein", "scheduler", "run", "--idle-exit", "1"],
        cwd=REPO,
        env=as_component(["scheduler"], cli_env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert "state rebuilt from 3 journal records" in again.stderr
    assert "stopped: offset -1 | consumed 0" in again.stderr


def test_a_mistyped_prefix_exits_3_naming_topic_create_and_creates_no_topic(
    services: Services, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The scheduler creates no topic, as producers create none: run as the admin, who could create
    them, with a ``--prefix`` naming no deployment, it exits 3 within seconds (E_TOPIC_MISSING) naming ``bernstein
    topic create --prefix``, and no topic of that prefix exists afterwards. Its first stderr line names the broker,
    its protocol and the mistyped prefix, each with where it came from."""
    from confluent_kafka.admin import AdminClient

    from bernstein.substrate.kafka import client_config, load_client_properties
    from tests.support.prefixes import fresh_prefix

    typo = fresh_prefix()
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", "scheduler", "run", "--prefix", typo, "--idle-exit", "1"],
        cwd=tmp_path,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - began
    assert result.returncode == 3, result.stderr
    assert took < 15, f"{took:.1f}s before the missing topics were named"
    assert "Traceback" not in result.stderr and result.stdout == ""
    first, *rest = result.stderr.splitlines()
    protocol = (
        load_client_properties(services.config_file).get("security.protocol", "PLAINTEXT")
        if services.config_file
        else "PLAINTEXT"
    )
    assert first.startswith(f"bernstein: kafka {services.bootstrap} ({protocol}, "), first
    assert first.endswith(f"; address from BERNSTEIN_KAFKA_BOOTSTRAP); prefix {typo} (from flag --prefix)"), first
    assert len(rest) == 1, result.stderr
    assert rest[0].startswith(f"bernstein: error: no topic of prefix {typo!r} exists on Kafka at {services.bootstrap}"), rest
    assert f"`bernstein topic create --prefix {typo}`" in rest[0]
    admin = AdminClient(client_config(services.bootstrap))
    assert not [name for name in admin.list_topics(timeout=15).topics if name.startswith(typo)], "the scheduler created topics"
