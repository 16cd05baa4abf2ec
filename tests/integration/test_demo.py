"""The README's first command's main job, end to end on the real services."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bernstein.consumers.manifest import load_manifest
from bernstein.substrate.keys import KeyPurpose, TrustedKeys, load_producer_keys

REPO = Path(__file__).resolve().parents[2]


def test_demo_runs_the_pipeline_and_verifies_offline(cli_env: dict[str, str], tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bernstein",
            "demo",
            "--keys-dir",
            str(tmp_path / "keys"),
            "--producer-keys",
            str(tmp_path / "demo-agents"),
            "--out",
            str(tmp_path / "out"),
        ],
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
    # the agents publish as their own producer, registered in the manifest the demo's scheduler ran with and
    # pinned in the trust file; the scheduler's keys stay in --keys-dir
    agents = load_producer_keys(tmp_path / "demo-agents")  # created by the demo
    assert agents.name == "demo-agents"
    run_dir = dumps[0].parent.parent
    registered = load_manifest(run_dir / "roles.toml").producers.lookup(agents.signer.key_id)
    assert registered is not None and registered[0].name == "demo-agents"
    pinned = TrustedKeys.load(run_dir / "trusted-keys.json").entry(agents.signer.key_id)
    assert pinned is not None and (pinned.purpose, pinned.producer) == (KeyPurpose.PRODUCER, "demo-agents")
    assert f"producer 'demo-agents' (key {agents.signer.key_id[:19]}...) registered in {run_dir / 'roles.toml'}" in out
    assert f"{agents.signer.key_id} (demo-agents)" in out  # the report names the producer key
