"""``bernstein audit follow``: the audit topic checked continuously (docs/operations.md).

* ``alerts``: ``AlertKind``, the stable alert names, and ``Alert``;
* ``checker``: the pure per-partition check (MAC, key, chain link, seq, events);
* ``checkpoint``: the local per-partition checkpoints a restart can trust;
* ``consumer``: the Kafka edge (consumer group or ``--once``).
"""
