"""The shell's reading of Kafka errors: which mean "another instance owns the partition", and what it says then.

No broker: the shell is built but never started; its producer is a stand-in.
The behaviour against the real broker is tests/integration/test_scheduler_fencing.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from consumers.core.model import SchedulerConfig
from consumers.core.step import SchedulerCore
from consumers.shell import SchedulerFenced, SchedulerShell
from substrate.config import Topics
from substrate.keys import init_keys
from tests.roles import ROLES


@pytest.fixture
def shell(tmp_path: Path) -> SchedulerShell:
    keys = init_keys(tmp_path / "keys")
    config = SchedulerConfig(roles=ROLES, signer=keys.signer, audit_key=keys.audit.secret, audit_key_id=keys.audit.key_id)
    return SchedulerShell(bootstrap="unused:9", topics=Topics("unit"), partition=3, core=SchedulerCore(config), progress=None)


class FatalProducer:
    """A producer that already failed fatally: every transactional call answers with ``cause``."""

    def __init__(self, cause: int) -> None:
        self.cause = cause

    def abort_transaction(self, timeout: float) -> None:
        raise KafkaException(KafkaError(self.cause, "fenced by newer producer instance", fatal=True))


OWNED = "partition 3 is now owned by another scheduler instance (transactional id unit.scheduler.p3); this instance stops"


@pytest.mark.parametrize(
    "code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.FENCED_INSTANCE_ID]
)
def test_a_fencing_error_stops_the_instance_with_a_message_naming_partition_and_transactional_id(
    shell: SchedulerShell, code: int
) -> None:
    shell._producer = FatalProducer(code)
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(code, "x", fatal=True)))
    name = KafkaError(code).name()
    assert raised.value.message == f"{OWNED} ({name}: nothing more was committed by it)"
    assert (raised.value.partition, raised.value.transactional_id, raised.value.error) == (3, "unit.scheduler.p3", name)
    assert raised.value.code == "E_SCHEDULER_FENCED"
    assert shell._producer is None  # never flushed, aborted or reused


def test_produce_on_a_fenced_producer_says_only_fatal_and_the_cause_is_asked_for(shell: SchedulerShell) -> None:
    shell._producer = FatalProducer(KafkaError._FENCED)
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error")))
    assert raised.value.error == "_FENCED"


def test_a_fatal_error_that_is_not_fencing_is_left_to_the_recovery(shell: SchedulerShell) -> None:
    shell._producer = FatalProducer(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER)
    shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._FATAL)))
    shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    shell._raise_if_fenced(KafkaException("not a KafkaError"))
    assert shell._producer is not None


def test_the_broker_refusing_the_transactional_id_says_so(shell: SchedulerShell) -> None:
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))
    assert raised.value.message == (
        "partition 3: the broker does not let this instance use transactional id unit.scheduler.p3 "
        "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); this instance stops. Grant it Write and Describe on that transactional id"
    )


def test_a_transaction_open_past_its_timeout_adds_the_pause_hint(shell: SchedulerShell) -> None:
    shell._producer = FatalProducer(KafkaError._FENCED)
    shell._txn_began = time.monotonic() - 95
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._FENCED, fatal=True)))
    message = raised.value.message
    assert message.startswith(OWNED)
    assert ". Its last transaction had been open 95s, longer than transaction.timeout.ms (60s)" in message
    assert message.endswith("the broker aborted that transaction; start the scheduler again")


def test_no_pause_hint_without_an_open_transaction(shell: SchedulerShell) -> None:
    shell._producer = FatalProducer(KafkaError._FENCED)
    shell._txn_began = None
    with pytest.raises(SchedulerFenced) as raised:
        shell._raise_if_fenced(KafkaException(KafkaError(KafkaError._FENCED, fatal=True)))
    assert "transaction.timeout.ms" not in raised.value.message


def test_close_never_flushes_a_fenced_producer(shell: SchedulerShell) -> None:
    class Flushing:
        def flush(self, timeout: float) -> Any:
            raise KafkaException(KafkaError(KafkaError._FENCED, fatal=True))

    shell._producer = Flushing()
    shell._close()  # a producer whose flush fails fatally does not replace the real error
    assert shell._producer is None
