"""Install keys: creation, permissions, formats, pinned trust files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from bernstein.substrate.keys import (
    AUDIT_KEY_FILE,
    KEYRING_FILE,
    PUBLIC_KEY_FILE,
    SIGNING_KEY_FILE,
    KeyFileMissing,
    KeyFormatError,
    KeyPermissionsTooOpen,
    KeyPurpose,
    KeysExist,
    KeyStatus,
    TrustedKeys,
    Validity,
    init_keys,
    init_producer_keys,
    load_keys,
    load_producer_keys,
    load_public_key,
    load_ring,
    rotate_key,
    verify_signature,
)


def test_init_creates_private_files_readable_by_owner_only(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "k")
    for name, mode in ((SIGNING_KEY_FILE, 0o600), (AUDIT_KEY_FILE, 0o600), (PUBLIC_KEY_FILE, 0o644)):
        assert stat.S_IMODE((tmp_path / "k" / name).stat().st_mode) == mode, name
    loaded = load_keys(tmp_path / "k")
    assert loaded.signer.key_id == keys.signer.key_id
    assert loaded.audit.key_id == keys.audit.key_id
    assert load_public_key(tmp_path / "k" / PUBLIC_KEY_FILE) == keys.signer.public_key_raw
    assert keys.signer.key_id.startswith("sha256:") and keys.audit.key_id.startswith("sha256:")
    assert verify_signature(keys.signer.public_key_raw, loaded.signer.sign(b"m"), b"m")
    assert not verify_signature(keys.signer.public_key_raw, loaded.signer.sign(b"m"), b"n")


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    first = init_keys(tmp_path)
    before = (tmp_path / SIGNING_KEY_FILE).read_bytes()
    with pytest.raises(KeysExist, match="refusing to overwrite"):
        init_keys(tmp_path)
    assert (tmp_path / SIGNING_KEY_FILE).read_bytes() == before
    assert load_keys(tmp_path).signer.key_id == first.signer.key_id


def test_loading_a_key_with_open_permissions_fails_with_the_fix(tmp_path: Path) -> None:
    init_keys(tmp_path)
    os.chmod(tmp_path / SIGNING_KEY_FILE, 0o644)
    with pytest.raises(KeyPermissionsTooOpen) as info:
        load_keys(tmp_path)
    assert f"chmod 600 {tmp_path / SIGNING_KEY_FILE}" in str(info.value)
    assert "0644" in str(info.value)


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        (SIGNING_KEY_FILE, b"not a pem", "not an unencrypted PEM private key"),
        (AUDIT_KEY_FILE, b"zz-not-hex", "as hex characters"),
        (AUDIT_KEY_FILE, b"abcd", "at least 16 bytes"),
    ],
)
def test_loading_a_key_in_a_wrong_format_fails_clearly(tmp_path: Path, name: str, content: bytes, fragment: str) -> None:
    init_keys(tmp_path)
    (tmp_path / name).write_bytes(content)
    with pytest.raises(KeyFormatError, match=fragment):
        load_keys(tmp_path)


def test_missing_keys_say_how_to_create_them(tmp_path: Path) -> None:
    with pytest.raises(KeyFileMissing, match="bernstein keys init"):
        load_keys(tmp_path / "nowhere")


def test_trusted_keys_round_trip_and_check_their_ids(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "k")
    path = tmp_path / "trust.json"
    TrustedKeys.from_install(keys).write(path)
    loaded = TrustedKeys.load(path)
    assert loaded.public_key(keys.signer.key_id) == keys.signer.public_key_raw
    assert loaded.audit_secret(keys.audit.key_id) == keys.audit.secret
    document = json.loads(path.read_text())
    assert document["format"] == "bernstein.trusted-keys/v2"
    seal = next(item for item in document["keys"] if item["purpose"] == "seal")
    assert seal == {
        "key_id": keys.signer.key_id,
        "purpose": "seal",
        "public_key": keys.signer.public_key_raw.hex(),
        "producer": None,
        "valid_from_ms": 0,
        "valid_until_ms": None,
        "status": "active",
    }
    seal["key_id"] = "sha256:" + "0" * 64
    path.write_text(json.dumps(document))
    with pytest.raises(KeyFormatError, match="does not match its key material"):
        TrustedKeys.load(path)


def test_trust_file_without_audit_key(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "k")
    trusted = TrustedKeys.from_install(keys, include_audit_key=False)
    assert trusted.audit_secret(keys.audit.key_id) is None
    assert trusted.public_key(keys.signer.key_id) == keys.signer.public_key_raw


def test_trust_file_format_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"ed25519": []}')
    with pytest.raises(KeyFormatError, match="bernstein.trusted-keys/v2"):
        TrustedKeys.load(path)
    path.write_text("{not json")
    with pytest.raises(KeyFormatError):
        TrustedKeys.load(path)


def test_a_v1_trust_file_still_loads_with_unbounded_keys_of_any_signing_purpose(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "k")
    path = tmp_path / "v1.json"
    path.write_text(
        json.dumps(
            {
                "format": "bernstein.trusted-keys/v1",
                "ed25519": [{"key_id": keys.signer.key_id, "public_key": keys.signer.public_key_raw.hex()}],
                "hmac": [{"key_id": keys.audit.key_id, "secret": keys.audit.secret.hex()}],
            }
        )
    )
    loaded = TrustedKeys.load(path)
    entry = loaded.entry(keys.signer.key_id)
    assert entry is not None and entry.purpose == KeyPurpose.ANY and entry.validity == Validity(0, None)
    assert entry.allows(KeyPurpose.SEAL) and entry.allows(KeyPurpose.PRODUCER) and not entry.allows(KeyPurpose.AUDIT)
    assert loaded.audit_secret(keys.audit.key_id) == keys.audit.secret


def test_a_scheduler_ring_lists_both_keys_with_their_purposes(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "k")
    ring = load_ring(tmp_path / "k")
    assert [(k.key_id, k.purpose, k.status) for k in ring.keys] == [
        (keys.signer.key_id, KeyPurpose.SEAL, KeyStatus.ACTIVE),
        (keys.audit.key_id, KeyPurpose.AUDIT, KeyStatus.ACTIVE),
    ]
    assert stat.S_IMODE((tmp_path / "k" / KEYRING_FILE).stat().st_mode) == 0o600


def test_rotation_retires_the_old_key_at_the_given_time_and_keeps_it_usable(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "k")
    old, new = rotate_key(tmp_path / "k", KeyPurpose.SEAL, now_ms=1_000)
    assert old.key_id == keys.signer.key_id and old.status == KeyStatus.RETIRED
    assert old.validity == Validity(0, 1_000) and new.validity == Validity(1_000, None)
    reloaded = load_keys(tmp_path / "k")
    assert reloaded.signer.key_id == new.key_id, "the newest key signs from now on"
    assert reloaded.audit.key_id == keys.audit.key_id, "the audit key is untouched"
    ring = reloaded.key_ring
    assert [k.key_id for k in ring.usable(KeyPurpose.SEAL)] == [old.key_id, new.key_id]
    trusted = TrustedKeys.from_install(reloaded)
    retired = trusted.entry(old.key_id)
    assert retired is not None and retired.validity == Validity(0, 1_000) and retired.status == KeyStatus.RETIRED
    assert not retired.validity.contains(1_000) and retired.validity.contains(999)


def test_revoking_a_seal_key_destroys_its_private_part_and_hands_its_range_to_the_new_key(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "k")
    old, new = rotate_key(tmp_path / "k", KeyPurpose.SEAL, now_ms=5_000, revoke=True)
    assert not (tmp_path / "k" / SIGNING_KEY_FILE).exists()
    assert old.status == KeyStatus.REVOKED and old.validity == Validity(0, 5_000)
    assert new.validity == Validity(0, None), "the new key signs the backlog the revoked one cannot"
    ring = load_ring(tmp_path / "k")
    revoked = next(k for k in ring.keys if k.key_id == keys.signer.key_id)
    assert revoked.signer is None and revoked.public_key_raw == keys.signer.public_key_raw
    assert [k.key_id for k in ring.usable(KeyPurpose.SEAL)] == [new.key_id]


def test_rotating_an_old_layout_directory_writes_its_ring_first(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "k")
    (tmp_path / "k" / KEYRING_FILE).unlink()
    assert load_keys(tmp_path / "k").signer.key_id == keys.signer.key_id, "a directory without a ring still loads"
    _, new = rotate_key(tmp_path / "k", KeyPurpose.AUDIT, now_ms=42)
    reloaded = load_keys(tmp_path / "k")
    assert reloaded.audit.key_id == new.key_id
    assert [k.key_id for k in reloaded.key_ring.usable(KeyPurpose.AUDIT)] == [keys.audit.key_id, new.key_id]


def test_producer_keys_are_three_separate_keys_and_only_the_public_one_is_ever_trusted(tmp_path: Path) -> None:
    producer = init_producer_keys(tmp_path / "p", "research-worker")
    assert producer.name == "research-worker"
    ids = {producer.signer.key_id, producer.lineage.key_id, producer.redaction.key_id}
    assert len(ids) == 3, "one key, one purpose"
    reloaded = load_producer_keys(tmp_path / "p")
    assert reloaded.signer.key_id == producer.signer.key_id and reloaded.redaction.secret == producer.redaction.secret
    trusted = TrustedKeys.from_ring(reloaded.ring)
    assert set(trusted.entries) == {producer.signer.key_id}
    entry = trusted.entry(producer.signer.key_id)
    assert entry is not None and entry.purpose == KeyPurpose.PRODUCER and entry.producer == "research-worker"
    with pytest.raises(KeyFormatError, match="not a scheduler's"):
        load_keys(tmp_path / "p")
    init_keys(tmp_path / "s")
    with pytest.raises(KeyFormatError, match="not a producer's"):
        load_producer_keys(tmp_path / "s")


def test_a_trust_file_refuses_a_producer_held_secret(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"format": "bernstein.trusted-keys/v2", "keys": [{"purpose": "redaction", "secret": "00" * 32}]}))
    with pytest.raises(KeyFormatError, match="never belongs in a trusted-keys file"):
        TrustedKeys.load(path)
