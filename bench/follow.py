"""``audit follow`` throughput against a bare read_committed consumer of the same audit topic.

    python -m bench.follow [--count 100000] [--trials 5]

Needs the local services (``infra/up``). In one run, on the same broker:

1. Publishes ``--count`` signed submissions (``bench.scheduler``'s) to a fresh single-partition
   submissions topic and runs the real scheduler (native core, in-process) over them, which
   writes one audit record per submission (and one per seal) to ``<prefix>.audit``.
2. Baseline: a bare read_committed consumer reads the audit partition from its start to its
   end (consume in batches of 5000, no work per record).
3. The follower (``bernstein.verifier.follow.Follower``, ``--once`` mode, a fresh checkpoint directory)
   checks the same partition: decode, MAC with the pinned audit key, chain link, seq, events,
   checkpoint saves. It must raise no alert and check every record.

Phases 2 and 3 alternate ``--trials`` times after one uncounted round of each. The last line
is the headline ``follow_vs_consumer=<ratio>``: the median of the per-pair ratios of records/s
(target >= 0.5). Every topic of the run starts with one fresh prefix and is deleted at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from bench.scheduler import config, publish
from bernstein.consumers.core.native import make_core
from bernstein.consumers.shell import SchedulerShell, ShellOptions
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import client_config, delete_topics_with_prefixes, ensure_topics
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier.follow.alerts import Alert
from bernstein.verifier.follow.checker import Policy
from bernstein.verifier.follow.checkpoint import CheckpointStore
from bernstein.verifier.follow.consumer import Follower, FollowOptions


def bare_consumer(bootstrap: str, topic: str) -> tuple[int, float]:
    """(records, seconds) of a read_committed consumer reading partition 0 from its start to its end."""
    started = time.perf_counter()
    consumer = Consumer(
        client_config(
            bootstrap,
            **{
                "group.id": f"bench.follow.{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 100,
            },
        )
    )
    records = 0
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        done = False
        while not done:
            for message in consumer.consume(5000, 0.1):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done = True
                        continue
                    raise SystemExit(f"bench: {error}")
                records += 1
    finally:
        consumer.close()
    return records, time.perf_counter() - started


def follower(bootstrap: str, topics: Topics, trusted: TrustedKeys) -> tuple[int, float, list[Alert]]:
    """(records, seconds, alerts) of the follower checking the audit topic once, from a fresh checkpoint directory."""
    alerts: list[Alert] = []
    with tempfile.TemporaryDirectory() as state:
        options = FollowOptions(
            bootstrap=bootstrap,
            topics=topics,
            store=CheckpointStore(Path(state)),
            group="bench.follow",
            once=True,
            policy=Policy(),
        )
        started = time.perf_counter()
        run = Follower(options, lambda: trusted, alerts.append)
        run.run()
        return run.checked, time.perf_counter() - started, alerts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    settings = Settings.load()
    if not settings.kafka_bootstrap:
        raise SystemExit("bench: no Kafka; run `infra/up` first (make bench does)")
    bootstrap = settings.kafka_bootstrap
    prefix = f"benchfollow{uuid.uuid4().hex[:8]}"
    try:
        summary = _run(args, bootstrap, prefix)
    finally:
        deleted = delete_topics_with_prefixes(bootstrap, [prefix])
        print(f"bench: deleted the run's {len(deleted)} topics", flush=True)
    print("\n".join(summary))  # the headline stays the last line
    return 0


def _run(args: argparse.Namespace, bootstrap: str, prefix: str) -> list[str]:
    topics = Topics(prefix)
    ensure_topics(bootstrap, topics)
    print(f"bench: publishing {args.count} submissions to {topics.submissions}", flush=True)
    publish(bootstrap, topics.submissions, args.count, "run")
    scheduler_config = config()
    started = time.perf_counter()
    shell = SchedulerShell(
        bootstrap=bootstrap,
        topics=topics,
        partition=0,
        core=make_core(scheduler_config, 0, "native"),
        options=ShellOptions(),
        progress=None,
    )
    counters = shell.run(until=lambda c: c.consumed >= args.count, idle_exit=60.0)
    if counters.consumed != args.count:
        raise SystemExit(f"bench: the scheduler consumed {counters.consumed} of {args.count}")
    print(f"bench: the scheduler journalled {args.count} submissions in {time.perf_counter() - started:.1f}s", flush=True)
    trusted = TrustedKeys(hmac={scheduler_config.audit_key_id: scheduler_config.audit_key})
    ratios: list[float] = []
    speeds: dict[str, list[float]] = {"consumer": [], "follow": []}
    expected: int | None = None
    for trial in range(args.trials + 1):
        read, seconds = bare_consumer(bootstrap, topics.audit)
        checked, follow_seconds, alerts = follower(bootstrap, topics, trusted)
        if alerts:
            raise SystemExit(f"bench: the follower raised {len(alerts)} alerts on clean traffic, first: {alerts[0].line()}")
        if checked != read or read < args.count:
            raise SystemExit(
                f"bench: the follower checked {checked} records, the consumer read {read} (>= {args.count} expected)"
            )
        expected = read
        consumer_rate, follow_rate = read / seconds, checked / follow_seconds
        label = "warm-up (not counted)" if trial == 0 else f"trial {trial}"
        print(
            f"{label}: consumer {consumer_rate:.0f} rec/s, follow {follow_rate:.0f} rec/s, ratio {follow_rate / consumer_rate:.2f}",
            flush=True,
        )
        if trial:
            speeds["consumer"].append(consumer_rate)
            speeds["follow"].append(follow_rate)
            ratios.append(follow_rate / consumer_rate)
    return [
        f"audit records per pass: {expected}, alerts: 0",
        f"consumer_records_per_s={statistics.median(speeds['consumer']):.0f}",
        f"follow_records_per_s={statistics.median(speeds['follow']):.0f}",
        f"follow_vs_consumer={statistics.median(ratios):.2f}",
    ]


if __name__ == "__main__":
    sys.exit(main())
