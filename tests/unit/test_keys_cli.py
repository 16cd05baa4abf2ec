"""``bernstein keys``: scheduler keys vs producer keys, registration, rotation, revocation, trust export.

In-process (``bernstein.cli.main``) against temporary key directories; no network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bernstein.cli import main
from bernstein.consumers.manifest import load_manifest, parse_manifest
from bernstein.schemas.notes import SIG_COSIGNATURE_V1, NoteSigner, log_verifier
from bernstein.substrate.keys import (
    KeyPurpose,
    KeyStatus,
    TrustedKeys,
    init_keys,
    init_producer_keys,
    load_producer_keys,
    load_ring,
)

ROLES = Path(__file__).resolve().parents[2] / "config" / "roles.toml"
T = 1_767_225_600_000


@pytest.fixture(autouse=True)
def _no_default_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERNSTEIN_KEYS_DIR", str(tmp_path / "scheduler"))
    monkeypatch.setenv("BERNSTEIN_PRODUCER_KEYS_DIR", str(tmp_path / "producer"))
    monkeypatch.delenv("BERNSTEIN_ROLES", raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def snippet(out: str) -> str:
    """The [[producers]] entry a command printed (from its header to the end of its key lines)."""
    lines = out.splitlines()
    start = lines.index("[[producers]]")
    end = start
    while end < len(lines) and lines[end].strip():
        end += 1
    return "\n".join(lines[start:end])


def granted(entry: str, roles: str = '["scout"]') -> str:
    return ROLES.read_text() + "\n" + entry.replace("roles = []", f"roles = {roles}", 1)


def test_init_producer_prints_a_manifest_entry_that_registers_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "keys", "init", "--producer", "research-worker")
    assert code == 0
    keys = load_producer_keys(tmp_path / "producer")  # the default producer key directory
    assert keys.name == "research-worker"
    assert f"producer key   {keys.signer.key_id}" in out and f"redaction key  {keys.redaction.key_id}" in out
    manifest = parse_manifest(granted(snippet(out)), source="pasted")
    producer = manifest.producers.producers["research-worker"]
    assert [k.key_id for k in producer.keys] == [keys.signer.key_id]
    assert producer.roles == frozenset({"scout"}) and producer.keys[0].lifetime.valid_until_ms is None
    # the scheduler's default directory was not touched
    assert not (tmp_path / "scheduler").exists()


def test_init_refuses_to_overwrite_and_checks_the_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "keys", "init", "--producer", "p1")[0] == 0
    code, _, err = run(capsys, "keys", "init", "--producer", "p2")
    assert code == 3 and "refusing to overwrite" in err
    assert load_producer_keys(tmp_path / "producer").name == "p1"
    code, _, err = run(capsys, "keys", "init", "--producer", "", "--dir", str(tmp_path / "other"))
    assert code == 3 and "1 to 256 printable characters" in err


def test_show_lists_every_key_of_either_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scheduler = init_keys(tmp_path / "scheduler")
    producer = init_producer_keys(tmp_path / "producer", "navigator@host")
    code, out, _ = run(capsys, "keys", "show")
    document = json.loads(out)
    assert code == 0 and (document["kind"], document["producer"]) == ("scheduler", None)
    assert [(k["purpose"], k["key_id"], k["status"], k["lifetime"]) for k in document["keys"]] == [
        ("seal", scheduler.signer.key_id, "active", "[0, open)"),
        ("audit", scheduler.audit.key_id, "active", "[0, open)"),
    ]
    code, out, _ = run(capsys, "keys", "show", "--producer")
    document = json.loads(out)
    assert (document["kind"], document["producer"]) == ("producer", "navigator@host")
    assert [(k["purpose"], k["key_id"]) for k in document["keys"]] == [
        ("producer", producer.signer.key_id),
        ("lineage", producer.lineage.key_id),
        ("redaction", producer.redaction.key_id),
    ]
    assert document["keys"][0]["public_key"] == producer.signer.public_key_raw.hex()
    assert all(k["private_part"] for k in document["keys"])
    assert "secret" not in out and producer.redaction.secret.hex() not in out


def test_rotating_the_seal_key_keeps_the_old_one_for_records_before_t(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = init_keys(tmp_path / "scheduler")
    code, out, _ = run(capsys, "keys", "rotate", "--purpose", "seal", "--at-ms", str(T))
    assert code == 0 and f"retired  {old.signer.key_id}  valid [0, {T})" in out
    ring = load_ring(tmp_path / "scheduler")
    seals = ring.of(KeyPurpose.SEAL)
    assert [(k.status, k.validity.valid_from_ms, k.validity.valid_until_ms) for k in seals] == [
        (KeyStatus.RETIRED, 0, T),
        (KeyStatus.ACTIVE, T, None),
    ]
    assert seals[0].signer is not None  # the private part stays: backlog inputs stamped before T are signed with it
    assert f"new      {seals[1].key_id}  valid [{T}, open)" in out


def test_revoking_destroys_an_ed25519_private_part_but_keeps_an_audit_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init_keys(tmp_path / "scheduler")
    assert run(capsys, "keys", "rotate", "--purpose", "seal", "--revoke", "--at-ms", str(T))[0] == 0
    assert run(capsys, "keys", "rotate", "--purpose", "audit", "--revoke", "--at-ms", str(T))[0] == 0
    ring = load_ring(tmp_path / "scheduler")
    seal_old, seal_new = ring.of(KeyPurpose.SEAL)
    assert seal_old.status == KeyStatus.REVOKED and seal_old.signer is None and seal_old.public_key_raw is not None
    assert seal_new.validity.valid_from_ms == 0  # takes over the backlog
    assert not (tmp_path / "scheduler" / "install.ed25519.key").exists()
    audit_old, _ = ring.of(KeyPurpose.AUDIT)
    assert audit_old.status == KeyStatus.REVOKED and audit_old.secret is not None


def test_rotating_a_producer_key_prints_both_keys_for_the_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = init_producer_keys(tmp_path / "producer", "data-worker")
    code, out, _ = run(capsys, "keys", "rotate", "--producer", "--at-ms", str(T))
    assert code == 0
    new = load_producer_keys(tmp_path / "producer")
    assert new.signer.key_id != old.signer.key_id and new.name == "data-worker"
    assert new.lineage == old.lineage and new.redaction == old.redaction  # only the signing key rotated
    manifest = parse_manifest(granted(snippet(out), '["analyst"]'), source="pasted")
    keys = manifest.producers.producers["data-worker"].keys
    assert [(k.key_id, k.lifetime.valid_from_ms, k.lifetime.valid_until_ms) for k in keys] == [
        (old.signer.key_id, 0, T),
        (new.signer.key_id, T, None),
    ]
    assert "PRODUCER_KEY_NOT_VALID" in out


def test_revoking_a_producer_key_destroys_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = init_producer_keys(tmp_path / "producer", "navigator@host")
    code, out, _ = run(capsys, "keys", "rotate", "--producer", "--revoke", "--at-ms", str(T))
    assert code == 0 and f"revoked  {old.signer.key_id}" in out and "private part destroyed" in out
    assert not (tmp_path / "producer" / "producer.ed25519.key").exists()
    assert re.search(
        rf'public_key = "{old.signer.public_key_raw.hex()}".*\n  valid_from_ms = 0\n  valid_until_ms = {T}   # revoked', out
    )


def test_rotate_says_what_to_rotate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    init_keys(tmp_path / "scheduler")
    init_producer_keys(tmp_path / "producer", "p")
    cases: list[tuple[list[str], str]] = [
        (["keys", "rotate"], "--purpose seal or --purpose audit"),
        (["keys", "rotate", "--purpose", "seal", "--dir", str(tmp_path / "producer")], "pass --producer"),
        (["keys", "rotate", "--producer", "--dir", str(tmp_path / "scheduler")], "drop --producer"),
        (["keys", "rotate", "--producer", "--purpose", "audit"], "is a scheduler key"),
        (["keys", "rotate", "--purpose", "seal", "--at-ms", "-5"], "is not negative"),
        (["keys", "rotate", "--purpose", "seal", "--at-ms", "0"], "cannot rotate at 0"),
    ]
    for argv, message in cases:
        code, _, err = run(capsys, *argv)
        assert code == 3 and message in err and "Traceback" not in err, argv


def write_manifest(path: Path, *producers: Any) -> Path:
    entries = []
    for producer, until in producers:
        entries.append(
            f'[[producers]]\nname = "{producer.name}"\nroles = ["scout"]\n  [[producers.keys]]\n'
            f'  public_key = "{producer.signer.public_key_raw.hex()}"\n'
            + (f"  valid_until_ms = {until}\n" if until is not None else "")
        )
    path.write_text(ROLES.read_text() + "\n" + "\n".join(entries))
    return path


def test_trust_pins_every_ring_key_and_every_registered_producer_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scheduler = init_keys(tmp_path / "scheduler")
    run(capsys, "keys", "rotate", "--purpose", "seal", "--at-ms", str(T))
    worker = init_producer_keys(tmp_path / "w", "research-worker")
    retired = init_producer_keys(tmp_path / "r", "old-worker")
    manifest = write_manifest(tmp_path / "roles.toml", (worker, None), (retired, T))
    out_file = tmp_path / "trust.json"
    code, out, err = run(capsys, "keys", "trust", "--out", str(out_file), "--manifest", str(manifest))
    assert code == 0 and err == "" and "2 seal, 1 audit, 2 producer key(s)" in out
    document = json.loads(out_file.read_text())
    assert document["format"] == "bernstein.trusted-keys/v2"
    rows = {(k["purpose"], k["producer"], k["valid_from_ms"], k["valid_until_ms"], k["status"]) for k in document["keys"]}
    assert rows == {
        ("seal", None, 0, T, "retired"),
        ("seal", None, T, None, "active"),
        ("audit", None, 0, None, "active"),
        ("producer", "research-worker", 0, None, "active"),
        ("producer", "old-worker", 0, T, "retired"),
    }
    trusted = TrustedKeys.load(out_file)
    assert trusted.entry(worker.signer.key_id) is not None and trusted.entry(scheduler.audit.key_id) is not None
    # a producer's lineage and redaction keys are never exported
    for secret in (worker.lineage.secret, worker.redaction.secret):
        assert secret.hex() not in out_file.read_text()
    assert load_manifest(manifest).producers.lookup(worker.signer.key_id) is not None


def test_trust_defaults_to_the_schedulers_manifest_and_can_leave_the_audit_key_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = init_keys(tmp_path / "scheduler")
    worker = init_producer_keys(tmp_path / "w", "research-worker")
    monkeypatch.setenv("BERNSTEIN_ROLES", str(write_manifest(tmp_path / "roles.toml", (worker, None))))
    code, out, _ = run(capsys, "keys", "trust", "--out", str(tmp_path / "t.json"), "--no-audit-key")
    assert code == 0 and "1 seal, 0 audit, 1 producer key(s)" in out
    trusted = TrustedKeys.load(tmp_path / "t.json")
    assert trusted.hmac == {} and set(trusted.entries) == {scheduler.signer.key_id, worker.signer.key_id}

    monkeypatch.delenv("BERNSTEIN_ROLES")
    code, _, err = run(capsys, "keys", "trust", "--out", str(tmp_path / "t2.json"))
    assert code == 0 and "no producer key is pinned" in err


def test_trust_is_exported_from_the_schedulers_directory_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    init_producer_keys(tmp_path / "producer", "p")
    code, _, err = run(capsys, "keys", "trust", "--out", str(tmp_path / "t.json"), "--dir", str(tmp_path / "producer"))
    assert code == 3 and "holds the keys of producer 'p'" in err and not (tmp_path / "t.json").exists()


def test_a_scheduler_directory_from_before_key_rings_shows_and_exports_its_two_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = init_keys(tmp_path / "scheduler")
    (tmp_path / "scheduler" / "keyring.json").unlink()  # the old layout: install.ed25519.key + audit.hmac.key only
    code, out, _ = run(capsys, "keys", "show")
    assert code == 0
    assert [(k["purpose"], k["key_id"], k["lifetime"]) for k in json.loads(out)["keys"]] == [
        ("seal", keys.signer.key_id, "[0, open)"),
        ("audit", keys.audit.key_id, "[0, open)"),
    ]
    code, out, _ = run(capsys, "keys", "trust", "--out", str(tmp_path / "t.json"))
    assert code == 0 and "1 seal, 1 audit, 0 producer key(s)" in out
    assert set(TrustedKeys.load(tmp_path / "t.json").entries) == {keys.signer.key_id, keys.audit.key_id}


def test_a_witness_policy_is_pinned_in_the_trust_file_and_a_log_key_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scheduler = init_keys(tmp_path / "s")
    witness = NoteSigner("witness.example/w1", SIG_COSIGNATURE_V1, b"\x51" * 32)
    policy = tmp_path / "policy"
    policy.write_text(f"witness W1 {witness.verifier.vkey}\nquorum W1\n")
    out_file = tmp_path / "trust.json"
    code, out, _ = run(
        capsys, "keys", "trust", "--dir", str(tmp_path / "s"), "--out", str(out_file), "--witness-policy", str(policy)
    )
    assert code == 0 and "witness policy: W1 (1 witness key(s))" in out
    loaded = TrustedKeys.load(out_file)
    assert loaded.witness_policy == policy.read_text() and loaded.policy() is not None
    code, _, _ = run(
        capsys,
        "keys",
        "trust",
        "--dir",
        str(tmp_path / "s"),
        "--out",
        str(out_file),
        "--witness-policy",
        str(policy),
        "--witness-max-lag",
        "900",
    )
    assert code == 0 and TrustedKeys.load(out_file).witness_max_lag_s == 900
    code, _, err = run(capsys, "keys", "trust", "--dir", str(tmp_path / "s"), "--out", str(out_file), "--witness-max-lag", "9")
    assert code == 3 and "give it with --witness-policy" in err
    policy.write_text("quorum W9\n")
    code, _, err = run(
        capsys, "keys", "trust", "--dir", str(tmp_path / "s"), "--out", str(out_file), "--witness-policy", str(policy)
    )
    assert code == 3 and "policy line 1: the quorum 'W9' is not a witness or group defined above" in err
    origin = "bernstein/bernstein.activity.submissions/0/e1"
    code, out, _ = run(capsys, "keys", "show", "--dir", str(tmp_path / "s"), "--log-origin", origin)
    assert code == 0
    assert json.loads(out)["log_vkeys"] == [log_verifier(origin, scheduler.signer.public_key_raw).vkey]
    code, _, err = run(capsys, "keys", "show", "--dir", str(tmp_path / "s"), "--log-origin", "not an origin")
    assert code == 3 and "a log origin is" in err
