"""Deleting a run's topics by prefix, against the real broker (benchmarks and test sessions rely on it)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from bernstein.substrate.config import Topics
from bernstein.substrate.kafka import KafkaUnavailable, client_config, delete_topics_with_prefixes, ensure_topics
from tests.support.prefixes import fresh_prefix


def _names(bootstrap: str) -> set[str]:
    return set(AdminClient(client_config(bootstrap)).list_topics(timeout=10).topics)


def test_only_the_topics_of_the_given_prefixes_are_deleted(services: Any) -> None:
    bootstrap = services.bootstrap
    doomed, kept = fresh_prefix(), fresh_prefix()
    derived = f"{doomed}r"  # a prefix built on another one (as the replay tests do) goes with it
    for prefix in (doomed, derived, kept):
        ensure_topics(bootstrap, Topics(prefix))
    expected = sorted(Topics(doomed).all + Topics(derived).all)

    assert delete_topics_with_prefixes(bootstrap, [doomed]) == expected

    deadline = time.monotonic() + 20
    while set(expected) & _names(bootstrap) and time.monotonic() < deadline:
        time.sleep(0.2)
    names = _names(bootstrap)
    assert not set(expected) & names
    assert set(Topics(kept).all) <= names
    assert delete_topics_with_prefixes(bootstrap, [doomed]) == []  # nothing left to delete
    assert delete_topics_with_prefixes(bootstrap, []) == []


def test_an_unreachable_broker_is_a_typed_error() -> None:
    with pytest.raises(KafkaUnavailable, match="infra/up"):
        delete_topics_with_prefixes("127.0.0.1:9", ["x"], timeout=1.0)
