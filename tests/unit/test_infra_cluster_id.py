"""Kafka cluster ids made by infra never start with "-" (kafka-storage would read one as an option)."""

from __future__ import annotations

import uuid

import pytest

import infra


def test_new_cluster_id_is_22_url_safe_characters() -> None:
    cid = infra.new_cluster_id()
    assert len(cid) == 22
    assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_new_cluster_id_draws_again_when_the_id_would_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xF8 as the first byte makes base64's first character index 62, which is "-" in the url-safe alphabet.
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" + bytes(15))])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    cid = infra.new_cluster_id()
    assert cid == "EAAAAAAAAAAAAAAAAAAAAA"
    with pytest.raises(StopIteration):
        next(draws)
