"""``bernstein audit follow --witness`` against the real (secured) broker and a real scheduler.

The scheduler (the transaction shell, on a thread) signs a tree head every few audit records; the follower,
under the auditor's principal, folds the journal's Merkle log, holds each head to it and cosigns. The
cosigned checkpoint it writes is what ``activity verify --witnessed`` takes with a witness policy pinned.
A journal record injected by the Kafka admin (who may write any topic) makes the next signed head
disagree with the journal: ``log_head_mismatch``, nothing cosigned.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from bernstein.commands.common import without_endpoint_line
from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell
from bernstein.schemas import notes
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import InstallKeys, TrustedKeys
from bernstein.verifier.witness.keys import init_witness_key
from tests.conftest import REPO, Services, principal_env
from tests.support.kafka import encode_close, encode_submission, fresh_topics, produce_all, read_partition, scheduler_config
from tests.support.producers import producer_trust


def schedule(services: Services, topics: Topics, keys: InstallKeys, new_audit_records: int) -> None:
    """Run the scheduler until the audit topic holds ``new_audit_records`` more records, then stop it."""
    audit_records = len(read_partition(services.bootstrap, topics, "audit")) + new_audit_records
    shell = SchedulerShell(
        bootstrap=services.bootstrap,
        topics=topics,
        partition=0,
        core=SchedulerCore(replace(scheduler_config(keys, seal_every=4), checkpoint_every=5)),
        progress=None,
    )
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            shell.run(until=lambda _c: done.is_set())
        except BaseException as exc:  # noqa: BLE001 - asserted below
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        for _ in range(600):
            if len(read_partition(services.bootstrap, topics, "audit")) >= audit_records or failed:
                break
            done.wait(0.2)
    finally:
        done.set()
        thread.join(60)
    assert not failed and len(read_partition(services.bootstrap, topics, "audit")) >= audit_records, failed


def traffic(services: Services, topics: Topics, tag: str, runs: int = 3, stages: int = 6) -> int:
    """Submit ``runs`` runs of ``stages`` stages, each closed; returns the audit records they make."""
    items: list[tuple[bytes | None, bytes | None]] = []
    for r in range(runs):
        run_id = f"run-{tag}-{r}"
        items += [
            (run_id.encode(), encode_submission(run_id=run_id, stage_id=f"s{s}", pages=(f"page {run_id}/{s}".encode(),)))
            for s in range(stages)
        ]
        items.append((run_id.encode(), encode_close(run_id)))
    produce_all(services.bootstrap, topics.submissions, items)
    return runs * (stages + 1)


def bernstein(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bernstein", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=180
    )


def follow_once(env: dict[str, str], trusted: Path, state: Path, keydir: Path) -> tuple[int, list[Any], list[Any]]:
    done = bernstein(
        env,
        "audit",
        "follow",
        "--once",
        "--progress",
        "--trusted-keys",
        str(trusted),
        "--state",
        str(state),
        "--witness",
        str(keydir),
    )
    events = [json.loads(line) for line in without_endpoint_line(done.stderr).splitlines() if line.startswith("{")]
    assert all(line.startswith("{") for line in without_endpoint_line(done.stderr).splitlines()), done.stderr
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], events


def test_the_follower_cosigns_the_heads_the_journal_reproduces_and_names_an_injected_record(
    services: Services, prefix: str, install_keys: InstallKeys, cli_env: dict[str, str], tmp_path: Path
) -> None:
    topics = fresh_topics(services.bootstrap, prefix)
    keydir = tmp_path / "witness-key"
    signer = init_witness_key(keydir, "follower.example/w1")
    trusted = tmp_path / "trusted-keys.json"
    trusted.write_text(json.dumps(TrustedKeys.from_install(install_keys).to_json()))
    auditor = principal_env(cli_env, services, "auditor")
    state = tmp_path / "state"

    schedule(services, topics, install_keys, traffic(services, topics, "a"))
    code, alerts, events = follow_once(auditor, trusted, state, keydir)
    assert (code, alerts) == (0, []), events
    (cosigned,) = [e for e in events if e["event"] == "cosigned"]
    assert len(read_partition(services.bootstrap, topics, "checkpoints")) >= 2  # a head every few records
    assert cosigned["partition"] == 0 and cosigned["witness"] == signer.name
    path = Path(cosigned["file"])
    assert path == state / "witness" / "cosigned" / "0.checkpoint"
    body, opened = notes.open_checkpoint(path.read_bytes(), [signer.verifier])
    assert body.size == cosigned["tree_size"] > 0 and opened.signed_by(signer.verifier) is not None
    assert body.origin == cosigned["origin"] and body.origin.endswith(f"/{topics.submissions}/0/e1")

    # the auditor pins the follower as the witness policy: the cosigned checkpoint meets it
    pinned = tmp_path / "trusted-witnessed.json"
    policy = f"witness F1 {signer.verifier.vkey}\nquorum F1\n"
    pins = TrustedKeys.from_install(install_keys).merged(producer_trust()).with_witness_policy(policy)
    pinned.write_text(json.dumps(pins.to_json()))
    verify = ["activity", "verify", "run-a-0", "--from", "kafka", "--cas", "none", "--trusted-keys", str(pinned)]
    witnessed = bernstein(auditor, *verify, "--witnessed", str(path))
    unwitnessed = bernstein(auditor, *verify)
    assert "WITNESS_QUORUM_NOT_MET" in unwitnessed.stdout and unwitnessed.returncode == 6, unwitnessed.stdout
    assert "WITNESS_QUORUM_NOT_MET" not in witnessed.stdout, witnessed.stdout
    assert "\n  MISMATCH" not in witnessed.stdout and witnessed.returncode == 6, witnessed.stdout  # 6: --cas none
    heads = len(read_partition(services.bootstrap, topics, "checkpoints"))
    assert f"reproduces {heads + 1} signed tree heads" in witnessed.stdout, witnessed.stdout  # and the cosigned one

    # more traffic: the next run resumes its fold from the saved state and cosigns the grown log
    schedule(services, topics, install_keys, traffic(services, topics, "b"))
    code, alerts, events = follow_once(auditor, trusted, state, keydir)
    assert (code, alerts) == (0, []), events
    (grown,) = [e for e in events if e["event"] == "cosigned"]
    assert grown["tree_size"] > cosigned["tree_size"] and grown["origin"] == cosigned["origin"]

    # a journal record injected by the admin (a copy of a genuine entry): the next signed head disagrees
    journal = read_partition(services.bootstrap, topics, "journal")
    produce_all(services.bootstrap, topics.journal, [(journal[0].key, journal[0].value)])
    schedule(services, topics, install_keys, traffic(services, topics, "c"))
    code, alerts, events = follow_once(auditor, trusted, state, keydir)
    mismatches = [a for a in alerts if a["alert"] == "log_head_mismatch"]
    assert code == 2 and mismatches, (alerts, events)
    assert mismatches[0]["leaf_index"] == grown["tree_size"]  # the leaves up to the last head held are the journal's
    assert mismatches[0]["topic"] == topics.checkpoints
    assert [e for e in events if e["event"] == "cosigned"] == []
    assert notes.open_checkpoint(path.read_bytes(), [signer.verifier])[0].size == grown["tree_size"]


def test_followers_run_while_the_scheduler_writes_raise_no_false_alarm_and_cosign_each_time(
    services: Services, prefix: str, install_keys: InstallKeys, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Heads and their leaves arrive while the follower reads: a head may come before its journal records, and its
    journal transaction marker a moment after the checkpoints'. None of that is a cut journal."""
    topics = fresh_topics(services.bootstrap, prefix)
    keydir = tmp_path / "witness-key"
    init_witness_key(keydir, "follower.example/w2")
    trusted = tmp_path / "trusted-keys.json"
    trusted.write_text(json.dumps(TrustedKeys.from_install(install_keys).to_json()))
    auditor = principal_env(cli_env, services, "auditor")
    shell = SchedulerShell(
        bootstrap=services.bootstrap,
        topics=topics,
        partition=0,
        core=SchedulerCore(replace(scheduler_config(install_keys, seal_every=4), checkpoint_every=3)),
        progress=None,
    )
    done = threading.Event()
    thread = threading.Thread(target=lambda: shell.run(until=lambda _c: done.is_set()), daemon=True)
    thread.start()
    sizes: list[int] = []
    try:
        for burst in range(4):
            traffic(services, topics, f"live{burst}", runs=4, stages=5)
            code, alerts, events = follow_once(auditor, trusted, tmp_path / "state", keydir)
            assert (code, alerts) == (0, []), events
            sizes += [e["tree_size"] for e in events if e["event"] == "cosigned"]
    finally:
        done.set()
        thread.join(60)
    code, alerts, events = follow_once(auditor, trusted, tmp_path / "state", keydir)
    assert (code, alerts) == (0, []), events
    sizes += [e["tree_size"] for e in events if e["event"] == "cosigned"]
    assert sizes == sorted(set(sizes)) and len(sizes) >= 2  # the cosigned log only grows
    cosigned = notes.parse_checkpoint(notes.parse_note((tmp_path / "state/witness/cosigned/0.checkpoint").read_bytes()).text)
    assert cosigned.size == sizes[-1]
