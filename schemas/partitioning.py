"""Which partition of the submissions topic a record belongs on (docs/producing.md, "The partitioner").

Every record of a run carries the run id's UTF-8 bytes as its Kafka key and must sit on
``partition_for(key, N)``, ``N`` the submissions topic's partition count: Kafka's own default
for keyed records, ``toPositive(murmur2(key)) % N``, which the Java client, franz-go, kafkajs 2.x
and librdkafka's ``partitioner=murmur2_random`` compute alike. The scheduler refuses a record
that sits elsewhere (``WRONG_PARTITION``). Pure functions: no Kafka client needed.
"""

from __future__ import annotations

from typing import Final

SEED: Final = 0x9747B28C
"""The seed of Kafka's ``Utils.murmur2``."""
_M: Final = 0x5BD1E995
_R: Final = 24
_MASK: Final = 0xFFFFFFFF


def murmur2(key: bytes) -> int:
    """Kafka's ``org.apache.kafka.common.utils.Utils.murmur2`` of ``key``, as the signed 32-bit int Java returns.

    MurmurHash2 (32 bits, seed ``0x9747b28c``), the input read in little-endian 4-byte blocks and the
    1 to 3 tail bytes mixed in as Java's fall-through ``switch`` does.
    """
    length = len(key)
    h = (SEED ^ length) & _MASK
    blocks = length - length % 4
    for i in range(0, blocks, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= key[blocks + 2] << 16
    if tail >= 2:
        h ^= key[blocks + 1] << 8
    if tail >= 1:
        h ^= key[blocks]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition of ``partitions`` that Kafka's default partitioner gives ``key``: ``(murmur2 & 0x7fffffff) % n``.

    The mask is Kafka's ``Utils.toPositive`` (not ``abs``). ``partitions`` must be at least 1.
    """
    if partitions < 1:
        raise ValueError(f"a topic has at least 1 partition, not {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
