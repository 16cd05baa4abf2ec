"""Before the first transaction: what the shell checks and sets from the cluster as it is when it starts.

Every output topic must take the largest output the core may write (``TopicLimitTooSmall``), else a valid output
would be refused and its input dead-lettered; the producer is then sized to the smallest topic limit, so that a
record batch the broker refuses is one record. The core checks each input's partition against the input topic's
partition count, read here (``SubmissionPartitionsMismatch`` when the core was configured with another).
``_new_producer`` makes the transactional producer with those sizes, at start and when a recovery gives the old one up.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException, Producer

from bernstein.consumers.core.model import OUTPUT_FRAMING_ALLOWANCE
from bernstein.consumers.shell.base import _PRODUCER_MAX_MESSAGE_BYTES
from bernstein.consumers.shell.clock import _TXN_TIMEOUT_S
from bernstein.consumers.shell.errors import SchedulerFailed, SubmissionPartitionsMismatch, TopicLimitTooSmall
from bernstein.consumers.shell.fencing import _TxnCaller
from bernstein.consumers.shell.produce import Producing
from bernstein.substrate.kafka import client_config, partition_count, transactional_producer_config


class Preflight(Producing):
    """The start-up checks of the topics, and the producer made to fit them (its delivery reports go to ``Producing``)."""

    def _check_topic_limits(self) -> None:
        """Every output topic takes the largest output the core may write (``max_output_bytes`` plus Kafka's framing).

        Otherwise a large but valid output would be refused by the broker and its input
        dead-lettered (PRODUCE_REJECTED) where a correctly sized deployment journals it.
        """
        needed = self.core.config.max_output_bytes + OUTPUT_FRAMING_ALLOWANCE
        limits = _max_message_bytes(self.bootstrap, self._topics)
        small = [f"{topic} ({limit})" for topic, limit in limits.items() if limit < needed]
        if small:
            raise TopicLimitTooSmall(
                f"partition {self.partition}: max.message.bytes of {', '.join(small)} is below {needed}, the largest "
                f"output the scheduler may write (max_output_bytes {self.core.config.max_output_bytes} + "
                f"{OUTPUT_FRAMING_ALLOWANCE} for Kafka's framing): raise it (kafka-configs.sh --alter --entity-type topics "
                f"--entity-name <topic> --add-config max.message.bytes={needed}) or lower --max-output-bytes"
            )
        self._max_request, self._batch_bytes = _producer_sizes(min(limits.values()), needed)

    def _check_partitioning(self) -> None:
        """The core checks every input's partition against the input topic's partition count, read here.

        A record must sit on ``partition_for(key, N)`` (Kafka's murmur2 partitioner), else it is refused
        with WRONG_PARTITION. ``N`` is read at every start. Partitions added to the topic later (the
        README says never to) are not seen by a running scheduler, which refuses the records producers
        then move to another partition; a restarted one adopts the new count (docs/decisions.md, "A record sits on
        its run id's murmur2 partition"). A core configured with another count is refused.
        """
        count = partition_count(self.bootstrap, self.input_topic)
        configured = self.core.config.submission_partitions
        if configured is None:
            self.core.set_submission_partitions(count)
        elif configured != count:
            raise SubmissionPartitionsMismatch(
                f"partition {self.partition}: the scheduler core checks records against {configured} partition(s), "
                f"but {self.input_topic} has {count}: configure submission_partitions={count} (or None, and the "
                "scheduler reads it from the topic)"
            )
        self._log(
            f"input records must sit on their key's murmur2 partition of {count} ({self.input_topic})",
            "partitioning",
            partitions=count,
            topic=self.input_topic,
        )

    def _producer_config(self) -> dict[str, Any]:
        config = transactional_producer_config(self.bootstrap, self.transactional_id)
        # the client's own size check must not refuse what the topics take, nor pass what one refuses
        config["message.max.bytes"] = self._max_request
        # a record batch the broker refuses is then one record: the refusal is about that record alone
        config["batch.size"] = self._batch_bytes
        config["on_delivery"] = self._on_delivery
        config["delivery.report.only.error"] = True
        return config

    def _new_producer(self) -> Any:
        config = self._producer_config()
        self._txn_timeout_s = int(config["transaction.timeout.ms"]) / 1000
        producer = Producer(config)
        if self._txn is None or self._txn.stuck:
            self._txn = _TxnCaller(self._clock)
        clock = self._clock

        def init() -> tuple[int, float]:
            producer.init_transactions(_TXN_TIMEOUT_S)
            return clock.pauses()  # ownership is proved as the call returns (a pause after it counts)

        self._owned_since = self._retrying(init, "init_transactions")
        return producer


def _max_message_bytes(bootstrap: str, topics: tuple[str, ...]) -> dict[str, int]:
    """Each topic's effective max.message.bytes (its own setting, else the broker's default)."""
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    admin = AdminClient(client_config(bootstrap))
    try:
        futures = admin.describe_configs([ConfigResource("topic", topic) for topic in topics], request_timeout=_TXN_TIMEOUT_S)
        return {
            resource.name: int(future.result(_TXN_TIMEOUT_S)["max.message.bytes"].value) for resource, future in futures.items()
        }
    except KafkaException as exc:
        raise SchedulerFailed(f"cannot read the output topics' max.message.bytes: {exc}") from exc


def _producer_sizes(smallest_limit: int, needed: int) -> tuple[int, int]:
    """The producer's (message.max.bytes, batch.size) for output topics whose smallest max.message.bytes is given.

    ``needed`` (the largest output plus ``OUTPUT_FRAMING_ALLOWANCE``) is at most ``smallest_limit`` (the
    start-up check). message.max.bytes is librdkafka's check of one record at produce(): at least
    ``needed``, never above a topic's limit. batch.size leaves the framing allowance under both, so a
    batch of two or more records always fits every topic (librdkafka sends a record larger than
    batch.size in a batch of its own): when the broker refuses a batch for its size, that batch is
    one record, and only its input is dead-lettered (PRODUCE_REJECTED), whatever the batching.
    """
    max_request = min(smallest_limit, max(needed, _PRODUCER_MAX_MESSAGE_BYTES))
    return max_request, max_request - OUTPUT_FRAMING_ALLOWANCE
