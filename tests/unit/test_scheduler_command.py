"""``bernstein scheduler run``'s configuration: producers from the manifest, key rings, the startup report."""

from __future__ import annotations

from pathlib import Path

from bernstein.commands.scheduler import scheduler_config, startup_report
from bernstein.consumers.core.model import Lifetime
from bernstein.consumers.core.native import make_core
from bernstein.substrate.keys import KeyPurpose, init_keys, load_keys, rotate_key
from tests.support.producers import producer_signer

ROTATED_AT = 1_760_000_000_000


def _manifest(path: Path, *, with_producer: bool) -> Path:
    text = '[[roles]]\nrole = "scout"\nagent_kind = "research"\n\n[[roles]]\nrole = "developer"\nagent_kind = "coding"\n'
    if with_producer:
        key = producer_signer("research-worker")
        text += (
            '\n[[producers]]\nname = "research-worker"\nroles = ["scout"]\nagent_kinds = ["browser"]\n'
            f'  [[producers.keys]]\n  public_key = "{key.public_key_raw.hex()}"\n  valid_until_ms = {ROTATED_AT}\n'
        )
    path.write_text(text)
    return path


def test_the_manifest_producers_and_every_ring_key_reach_the_config(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    init_keys(directory)
    old_seal, new_seal = rotate_key(directory, KeyPurpose.SEAL, now_ms=ROTATED_AT)
    old_audit, new_audit = rotate_key(directory, KeyPurpose.AUDIT, now_ms=ROTATED_AT)
    keys = load_keys(directory)
    config = scheduler_config(keys, _manifest(tmp_path / "roles.toml", with_producer=True), 1000)

    assert config.roles == {"scout": "research", "developer": "coding"}
    registered = config.producers.producers["research-worker"]
    assert (registered.roles, registered.agent_kinds) == (frozenset({"scout"}), frozenset({"browser", "research"}))
    key_id = producer_signer("research-worker").key_id
    assert config.producers.lookup(key_id) == (registered, registered.keys[0])
    assert registered.keys[0].lifetime == Lifetime(0, ROTATED_AT)

    # the rings, oldest first, with their lifetimes; the current keys are the newest
    assert [(k.signer.key_id, k.lifetime) for k in config.seal_keys] == [
        (old_seal.key_id, Lifetime(0, ROTATED_AT)),
        (new_seal.key_id, Lifetime(ROTATED_AT)),
    ]
    assert [(k.key_id, k.lifetime) for k in config.audit_keys] == [
        (old_audit.key_id, Lifetime(0, ROTATED_AT)),
        (new_audit.key_id, Lifetime(ROTATED_AT)),
    ]
    assert (config.signer.key_id, config.audit_key_id) == (new_seal.key_id, new_audit.key_id)
    assert config.seal_key_at(ROTATED_AT - 1).key_id == old_seal.key_id
    assert config.seal_key_at(ROTATED_AT).key_id == new_seal.key_id
    assert config.audit_key_at(ROTATED_AT - 1).key_id == old_audit.key_id


def test_a_revoked_seal_key_is_gone_and_a_revoked_audit_key_still_verifies_old_records(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    init_keys(directory)
    rotate_key(directory, KeyPurpose.SEAL, now_ms=ROTATED_AT, revoke=True)
    old_audit, new_audit = rotate_key(directory, KeyPurpose.AUDIT, now_ms=ROTATED_AT, revoke=True)
    config = scheduler_config(load_keys(directory), _manifest(tmp_path / "roles.toml", with_producer=True), 1000)
    assert len(config.seal_keys) == 1  # its private part was destroyed
    assert config.seal_keys[0].lifetime == Lifetime(0)  # the new key took over the backlog
    assert [k.key_id for k in config.audit_keys] == [old_audit.key_id, new_audit.key_id]
    # the new audit key covers the revoked key's range too: it is the one chosen, before and after
    assert config.audit_key_at(ROTATED_AT - 1).key_id == new_audit.key_id
    assert config.audit_secret(old_audit.key_id) is not None


def test_the_startup_report_names_producers_keys_and_the_core(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "keys")
    roles = _manifest(tmp_path / "roles.toml", with_producer=True)
    config = scheduler_config(keys, roles, 1000)
    lines = startup_report(config, make_core(config, 0, "python"), roles)
    assert lines == [
        f"1 producer(s) registered with 1 key(s) from {roles}: research-worker",
        f"seal keys: 1, audit keys: 1 (current seal {keys.signer.key_id}, audit {keys.audit.key_id})",
        "core: python reference",
    ]
    assert startup_report(config, make_core(config, 0, "native"), roles)[2] == "core: native (bernstein_native, Rust)"


def test_without_producers_the_report_warns_that_every_submission_is_refused(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "keys")
    roles = _manifest(tmp_path / "roles.toml", with_producer=False)
    config = scheduler_config(keys, roles, 1000)
    lines = startup_report(config, make_core(config, 0, "python"), roles)
    assert lines[0] == f"0 producer(s) registered with 0 key(s) from {roles}"
    assert lines[-1].startswith(
        "WARNING: the roles manifest registers no producer ([[producers]]): every submission will be refused"
    )
    assert "bernstein keys init --producer NAME" in lines[-1] and str(roles) in lines[-1]
