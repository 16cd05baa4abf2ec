"""The README's quickstart, run exactly as the README prints it, on the real services.

The fenced block under "## Quickstart" is read from README.md and each command (a line, or lines
joined by a trailing backslash) runs with bash, one after the other, in a fresh working directory,
with ``.venv/bin`` first on ``PATH`` as the README asks.

Environment: what a newcomer's checkout gives every command, its ``.infra/env`` (written by
``infra/up``), is written into the working directory with this session's values: the broker, the
client properties file ``infra/up`` names there (the admin's, when the broker is secured), and the S3
endpoint and credentials. So the commands run as a local deployment's do: on a plaintext broker
without credentials, on the secured one as its admin, the one principal ``infra/up --secure`` hands
to ``.infra/env``. Per-component principals (producer, scheduler, auditor) are a production
deployment's, which other integration tests cover. The only other variable is
``BERNSTEIN_TOPIC_PREFIX``, a fresh prefix, so that the test shares no topic with anyone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.support.prefixes import fresh_prefix

pytestmark = pytest.mark.integration

HEADING = "## Quickstart"


def quickstart_commands(readme: str) -> list[str]:
    """The commands of the first fenced block under ``HEADING``: lines, continuation lines joined, blank lines and
    whole-line comments left out."""
    section = readme.split(f"\n{HEADING}", 1)
    assert len(section) == 2, f"README.md has no heading {HEADING!r}"
    match = re.search(r"^```(?:bash|sh)\n(.*?)^```", section[1], re.S | re.M)
    assert match is not None, f"no ```bash block under {HEADING!r}"
    commands: list[str] = []
    pending = ""
    for line in match.group(1).splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        commands.append(pending + line)
        pending = ""
    assert not pending, "the block ends with a continuation line"
    return commands


def test_the_readme_quickstart_runs_as_printed_and_verifies(services: Any, tmp_path: Path) -> None:
    commands = quickstart_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert 1 <= len(commands) <= 5, commands  # the README promises at most 5 commands

    infra_env = {
        "BERNSTEIN_KAFKA_BOOTSTRAP": services.bootstrap,
        "BERNSTEIN_S3_ENDPOINT": services.s3.endpoint,
        "BERNSTEIN_S3_ACCESS_KEY": services.s3.access_key,
        "BERNSTEIN_S3_SECRET_KEY": services.s3.secret_key,
        "BERNSTEIN_S3_BUCKET": services.s3.bucket,
    }
    if services.config_file is not None:
        infra_env["BERNSTEIN_KAFKA_CONFIG_FILE"] = str(services.config_file)
    (tmp_path / ".infra").mkdir()
    (tmp_path / ".infra" / "env").write_text("".join(f"{k}={v}\n" for k, v in infra_env.items()), encoding="utf-8")
    prefix = fresh_prefix()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["BERNSTEIN_TOPIC_PREFIX"] = prefix

    results = []
    for command in commands:
        result = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {command}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert result.returncode == 0, f"{command}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}"
        results.append((command, result))

    by_word = {_command_of(command): result for command, result in results}
    assert set(by_word) >= {"init", "submit", "scheduler", "activity"}, list(by_word)

    init = by_word["init"].stdout
    assert "producer 'me'" in init and f"topics          {prefix}.*" in init, init

    published = [json.loads(line) for line in by_word["submit"].stdout.splitlines()]
    assert [p["topic"] for p in published] == [f"{prefix}.activity.submissions"] * len(published)
    assert len(published) == 2 and {p["run_id"] for p in published} == {"me-1"}

    assert "journalled 1 refused 0 dead-lettered 0 seals 1" in by_word["scheduler"].stderr, by_word["scheduler"].stderr

    report = by_word["activity"].stdout.splitlines()
    assert report[0] == "Activity verify run=me-1", report
    assert "  OK hello-0 [coding]" in report and "    by me (key sha256:" in "\n".join(report), report
    assert report[-1] == "verified -- every activity reconstructs from the journal.", report
    assert commands[-1].startswith("bernstein activity verify ")


def _command_of(command: str) -> str:
    """The bernstein subcommand a command line runs (``printf ... | bernstein submit ...`` runs ``submit``)."""
    words = command.split("bernstein ", 1)[1].split()
    return words[0]
