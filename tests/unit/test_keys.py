"""Install keys: creation, permissions, formats, pinned trust files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from substrate.keys import (
    AUDIT_KEY_FILE,
    PUBLIC_KEY_FILE,
    SIGNING_KEY_FILE,
    KeyFileMissing,
    KeyFormatError,
    KeyPermissionsTooOpen,
    KeysExist,
    TrustedKeys,
    init_keys,
    load_keys,
    load_public_key,
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
    document["ed25519"][0]["key_id"] = "sha256:" + "0" * 64
    path.write_text(json.dumps(document))
    with pytest.raises(KeyFormatError, match="does not match its public key"):
        TrustedKeys.load(path)


def test_trust_file_without_audit_key(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "k")
    trusted = TrustedKeys.from_install(keys, include_audit_key=False)
    assert trusted.audit_secret(keys.audit.key_id) is None
    assert trusted.public_key(keys.signer.key_id) == keys.signer.public_key_raw


def test_trust_file_format_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"ed25519": []}')
    with pytest.raises(KeyFormatError, match="bernstein.trusted-keys/v1"):
        TrustedKeys.load(path)
    path.write_text("{not json")
    with pytest.raises(KeyFormatError):
        TrustedKeys.load(path)
