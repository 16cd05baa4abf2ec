"""The CLI never prints a traceback for a user mistake; usage errors exit 3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_")}
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "bernstein", *args], capture_output=True, text=True, cwd=REPO, env=base, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("activity", "verify"), "name a run to verify (RUN, several RUNs, --runs-file FILE or --all)"),
        (("activity", "verify", "r", "--all"), "--all verifies every run of the source"),
        (("activity", "verify", "r", "--from", "/nonexistent/dump"), "not found"),
        (("topic", "export", "--out", "x"), "one of the arguments --run --all is required"),
        (("no-such-command",), "invalid choice"),
        (("scheduler", "run", "--seal-every", "many"), "invalid int value"),
    ],
)
def test_usage_errors_exit_3_without_traceback(args: tuple[str, ...], fragment: str) -> None:
    result = _cli(*args)
    assert result.returncode == 3, result.stderr
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_keys_init_then_refuse_overwrite(tmp_path: Path) -> None:
    first = _cli("keys", "init", "--dir", str(tmp_path / "k"))
    assert first.returncode == 0 and "created keys" in first.stdout
    second = _cli("keys", "init", "--dir", str(tmp_path / "k"))
    assert second.returncode == 3
    assert "refusing to overwrite" in second.stderr and "Traceback" not in second.stderr


def test_verify_without_any_trusted_keys_is_a_usage_error(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "manifest.json").write_text('{"format": "bernstein.dump/v1"}')
    result = _cli("activity", "verify", "r", "--from", str(dump), env={"BERNSTEIN_KEYS_DIR": str(tmp_path / "nokeys")})
    assert result.returncode == 3
    assert "--trusted-keys" in result.stderr and "Traceback" not in result.stderr


def test_no_services_configured_says_what_to_do(tmp_path: Path) -> None:
    # Run from a directory without .infra/env so no endpoint is found.
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", "topic", "create"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("BERNSTEIN_")} | {"PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert result.returncode == 3
    assert "infra/up" in result.stderr and "Traceback" not in result.stderr


def test_version_prints_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    result = _cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"bernstein {version('bernstein-journal')}"


def test_a_misspelt_setting_is_named_with_the_one_it_most_likely_meant() -> None:
    result = _cli("activity", "verify", "r", "--from", "/nonexistent/dump", env={"BERNSTEIN_S3_ENDPIONT": "http://x:1"})
    assert (
        "bernstein: warning: BERNSTEIN_S3_ENDPIONT is set but no setting of bernstein has that name "
        "(did you mean BERNSTEIN_S3_ENDPOINT?); it is ignored"
    ) in result.stderr
    quiet = _cli("activity", "verify", "r", "--from", "/nonexistent/dump", env={"BERNSTEIN_S3_ENDPOINT": "http://x:1"})
    assert "warning" not in quiet.stderr


def test_every_variable_the_project_reads_is_known() -> None:
    """The list the warning checks against holds every BERNSTEIN_* name the code reads (no false warnings)."""
    import re

    from bernstein.substrate.config import KNOWN_VARIABLES

    read: set[str] = set()
    for folder in ("bernstein", "substrate", "producers", "consumers", "verifier", "schemas", "infra", "scripts"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in {".py", ".sh", ".go", ".ts"} and "node_modules" not in path.parts:
                read |= set(re.findall(r"BERNSTEIN_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
    assert read - KNOWN_VARIABLES == set()
