"""The README's first command's main job, end to end on the real services."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_demo_runs_the_pipeline_and_verifies_offline(cli_env: dict[str, str], tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bernstein", "demo", "--keys-dir", str(tmp_path / "keys"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=cli_env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "refusal: RedundantStage REDUNDANT_STAGE stage=coding-1" in out
    assert "\nActivity verify run=demo-" in out
    assert "  OK coding-0 [coding] (evidence reattached)" in out
    assert out.rstrip().endswith("verified -- every activity reconstructs from the journal.")
    dumps = list((tmp_path / "out").glob("demo-*/dump/manifest.json"))
    assert len(dumps) == 1
