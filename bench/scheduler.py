"""Scheduler throughput against a transactional passthrough, and end-to-end latency.

    python -m bench.scheduler [--count 100000] [--rate 1000] [--latency-seconds 15] [--only latency|throughput|log]

``--only log`` runs the scheduler alone in three arms instead: with its Merkle log as in production,
without it (the same binary told not to append), and with a signed checkpoint after every step. Its
last line is ``scheduler_with_log_vs_without=<ratio>`` (target >= 0.95).

Needs the local services (``infra/up``). In one run, on the same broker:

1. Publishes ``--count`` small submissions (3 observations each) to a fresh
   single-partition submissions topic.
2. Baseline: a transactional passthrough (consume -> produce the same bytes ->
   send offsets -> commit) with the scheduler's batch cadence, no validation.
3. The scheduler over the same partition (into its own output topics).
4. Latency: the scheduler runs while submissions arrive at a steady
   ``--rate``/s; produce-to-journal latency is measured per submission by a
   read_committed consumer of the journal topic (p50/p99/max, p99 against the
   100 ms target, with the machine's load average: on a shared
   machine the tail follows the other work's CPU use).

Context (not part of the headline): the same transactional loop writing the
scheduler's own outputs, computed beforehand. It pays Kafka's cost of the output
shape the issue asks for (a journal and an audit record per submission, to two
partitions) and none of the scheduler's work; the scheduler's fraction of it says
how much of the gap to the passthrough is the scheduler's own doing.

Phases 2 and 3 run in child processes so each gets its own peak RSS. Uncounted
rounds of each warm the broker up first: at least ``--warmup``, and more (up to
``--warmup-max``) while the passthrough still gets faster by over a tenth per
round. Then ``--trials`` trials run their phases back to back. The last line is
the headline, ``scheduler_vs_passthrough=<ratio>`` (target >= 0.5): the median of
the per-pair ratios, which cancels the slow drift of a shared machine (the ratio
of the two medians is printed too).

Every topic of the run starts with one fresh prefix and is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from bench.memory import peak_rss_mib
from bernstein.consumers.core.model import (
    InputRecord,
    OutputRecord,
    ProducerKey,
    ProducerRegistry,
    SchedulerConfig,
    Stream,
)
from bernstein.consumers.core.model import Producer as RegisteredProducer
from bernstein.consumers.core.native import make_core
from bernstein.consumers.core.step import initial_state
from bernstein.consumers.shell import Counters, SchedulerShell, ShellOptions
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    evidence_set_hash,
    run_close_statement,
    sha256_digest,
    submission_signing_input,
    submission_statement,
)
from bernstein.substrate.config import Settings, Topics
from bernstein.substrate.kafka import client_config, delete_topics_with_prefixes, ensure_topics, transactional_producer_config
from bernstein.substrate.keys import AuditKey, Ed25519Signer

ROLES = {"developer": "coding"}
PRODUCER = Ed25519Signer.from_seed(b"\x0b" * 32)
"""The bench's producer identity (registered in ``config()``): every submission is a signed ActivitySubmission.v3."""
BATCH_MAX = 500
BATCH_TIMEOUT = 0.02
LATENCY_P99_TARGET_MS = 100.0
"""produce-to-journal p99 at 1,000 submissions/s."""


def submission(i: int, run: str, sent_ms: int = 0) -> bytes:
    observations: list[dict[str, Any]] = [
        {
            "kind": "file",
            "ref": f"src/module_{i}_{j}.py",
            "content_hash": sha256_digest(f"{run}:{i}:{j}".encode()),
            "size": len(f"{run}:{i}:{j}".encode()),
        }
        for j in range(3)
    ]
    artifact = f"--- a/src/module_{i}.py\n+++ b/src/module_{i}.py\n@@ -1 +1 @@\n-x = {i}\n+x = {i + 1}\n".encode()
    record = {
        "submission_id": f"{run}-{i}",
        "run_id": run,
        "stage_id": f"stage-{i}",
        "role": "developer",
        "producer": {"id": "bench", "sdk": "bench"},
        "kind": "coding",
        "artifact": artifact,
        "artifact_hash": sha256_digest(artifact),
        "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in observations),
        "observations": observations,
        "terminal_state": "completed",
        "reason_code": "ok",
        "occurred_at_ms": sent_ms,
    }
    statement = submission_statement(record, PRODUCER.key_id)
    signature = PRODUCER.sign(submission_signing_input(statement))
    return codec.encode(
        codec.ACTIVITY_SUBMISSION_V3, {**record, "producer_key_id": PRODUCER.key_id, "producer_signature": signature}
    )


def signed_close(run: str) -> bytes:
    """The bench producer's signed RunClose.v2 of ``run``."""
    statement = run_close_statement(f"close-{run}", run, "bench", 1_700_000_001_000, PRODUCER.key_id)
    return codec.encode(
        codec.RUN_CLOSE_V2,
        {
            "submission_id": f"close-{run}",
            "run_id": run,
            "producer": {"id": "bench", "sdk": "bench"},
            "occurred_at_ms": 1_700_000_001_000,
            "producer_key_id": PRODUCER.key_id,
            "producer_signature": PRODUCER.sign(submission_signing_input(statement)),
        },
    )


def config() -> SchedulerConfig:
    audit = AuditKey.from_secret(b"bench-audit-key-0123456789abcdef")
    return SchedulerConfig(
        roles=ROLES,
        signer=Ed25519Signer.from_seed(b"\x07" * 32),
        audit_key=audit.secret,
        audit_key_id=audit.key_id,
        seal_every=1000,
        producers=ProducerRegistry.of(
            [
                RegisteredProducer(
                    "bench",
                    frozenset(ROLES),
                    frozenset(ROLES.values()),
                    (ProducerKey(PRODUCER.key_id, PRODUCER.public_key_raw),),
                )
            ]
        ),
    )


def publish(bootstrap: str, topic: str, count: int, run_prefix: str) -> None:
    producer = Producer(
        client_config(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 20, "batch.num.messages": 10000})
    )
    for i in range(count):
        run = f"{run_prefix}-{i % 10}"
        while True:
            try:
                producer.produce(topic, key=run.encode(), value=submission(i, run), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("bench: could not publish the input")


# -- child phases ------------------------------------------------------------------


def _measure(run_loop: Any, count: int) -> dict[str, float]:
    marks: dict[str, float] = {}

    def until(counters: Counters) -> bool:
        if counters.consumed and "first" not in marks:
            marks["first"] = time.perf_counter()
        return counters.consumed >= count

    started = time.perf_counter()
    cpu_started = time.process_time()  # every thread of this process (librdkafka's and the Rust core's too)
    counters = run_loop(until)
    ended = time.perf_counter()
    cpu = time.process_time() - cpu_started
    first = marks.get("first", started)
    return {
        "cpu_us_per_record": cpu / max(counters.consumed, 1) * 1e6,
        "records": counters.consumed,
        "seconds": ended - first,
        "seconds_with_startup": ended - started,
        "records_per_second": counters.consumed / max(ended - first, 1e-9),
        "peak_rss_mib": peak_rss_mib(),
    }


class Passthrough:
    """The baseline: the same transactional loop, copying values without looking at them."""

    def __init__(self, bootstrap: str, input_topic: str, output_topics: list[str]) -> None:
        self.bootstrap = bootstrap
        self.input_topic = input_topic
        self.output_topics = output_topics
        self.counters = Counters()

    def run(self, until: Any) -> Counters:
        producer = Producer(transactional_producer_config(self.bootstrap, f"bench-passthrough-{uuid.uuid4().hex}"))
        producer.init_transactions(30)
        consumer = Consumer(
            client_config(
                self.bootstrap,
                **{
                    "group.id": f"bench-passthrough-{uuid.uuid4().hex}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 10,
                    "queued.max.messages.kbytes": 65536,
                },
            )
        )
        consumer.assign([TopicPartition(self.input_topic, 0, OFFSET_BEGINNING)])
        while not until(self.counters):
            messages = [m for m in consumer.consume(BATCH_MAX, BATCH_TIMEOUT) if m.error() is None]
            if not messages:
                continue
            last = messages[-1].offset()
            assert last is not None  # a consumed message has an offset
            producer.begin_transaction()
            self.produce_batch(producer, messages)
            producer.send_offsets_to_transaction(
                [TopicPartition(self.input_topic, 0, last + 1)], consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
            self.counters.consumed += len(messages)
            self.counters.transactions += 1
        consumer.close()
        return self.counters

    def produce_batch(self, producer: Any, messages: list[Any]) -> None:
        for m in messages:
            for topic in self.output_topics:
                while True:
                    try:
                        producer.produce(
                            topic,
                            value=m.value(),
                            key=m.key(),
                            partition=0,
                            timestamp=m.timestamp()[1],
                            headers=m.headers(),
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)


class SameOutputPassthrough(Passthrough):
    """Context, not the baseline: the same loop writing the scheduler's own outputs, computed beforehand.

    It pays Kafka's cost of the scheduler's output shape (a journal and an audit record per
    submission, with their CloudEvents headers, to two partitions) and none of its work.
    """

    def __init__(self, bootstrap: str, input_topic: str, prefix: str, count: int) -> None:
        topics = Topics(prefix)
        super().__init__(bootstrap, input_topic, [topics.journal, topics.audit])
        self.topic_of = {stream: topics.by_stream(stream.value) for stream in Stream}
        # keyed by Message.offset() as the produce loop reads it (typed int | None; never None here)
        self.outputs: dict[int | None, list[OutputRecord]] = {}
        core = make_core(config(), 0, "native")
        state: Any = initial_state(core.config, 0)
        consumer = Consumer(
            client_config(bootstrap, **{"group.id": f"bench-precompute-{uuid.uuid4().hex}", "enable.auto.commit": False})
        )
        consumer.assign([TopicPartition(input_topic, 0, OFFSET_BEGINNING)])
        while len(self.outputs) < count:
            for m in consumer.consume(BATCH_MAX, 1.0):
                if m.error() is None:
                    state, self.outputs[m.offset()] = core.step(state, InputRecord.of_message(m, 0))
        consumer.close()

    def produce_batch(self, producer: Any, messages: list[Any]) -> None:
        # The produce loop is spelled out as in the baseline (no helper call per output): both loops
        # must pay the same Python cost per output, or the comparison would drift.
        topic_of = self.topic_of
        for m in messages:
            for out in self.outputs[m.offset()]:
                while True:
                    try:
                        producer.produce(
                            topic_of[out.stream],
                            value=out.value,
                            key=out.key,
                            partition=0,
                            timestamp=out.timestamp_ms,
                            headers=list(out.headers),
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)


def child(phase: str, bootstrap: str, prefix: str, count: int, input_topic: str) -> None:
    if phase == "passthrough":
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient(client_config(bootstrap))
        for future in admin.create_topics([NewTopic(f"{prefix}.passthrough", 1, 1)]).values():
            future.result(30)
        result = _measure(Passthrough(bootstrap, input_topic, [f"{prefix}.passthrough"]).run, count)
    elif phase == "same-output":
        ensure_topics(bootstrap, Topics(prefix))
        result = _measure(SameOutputPassthrough(bootstrap, input_topic, prefix, count).run, count)
    else:
        ensure_topics(bootstrap, Topics(prefix))
        shell = SchedulerShell(
            bootstrap=bootstrap,
            topics=Topics(prefix),
            partition=0,
            core=scheduler_core(phase),
            options=ShellOptions(batch_max=BATCH_MAX, batch_timeout=BATCH_TIMEOUT),
            progress=None,
            input_topic=input_topic,
        )
        result = _measure(lambda until: shell.run(until=until), count)
    print(json.dumps(result))


LOG_PHASES = {
    "scheduler": "with its Merkle log (as in production)",
    "scheduler-nolog": "without its Merkle log",
    "scheduler-cp1": "with its log and a signed checkpoint every step (--checkpoint-every 1)",
}
"""``--only log``'s arms: the same native core, changed in one thing each."""


def scheduler_core(phase: str) -> Any:
    """The scheduler core of a phase: the production one, one told to stop appending to its Merkle log (the same
    binary, so the difference is the log's work), or one signing a checkpoint after every step."""
    if phase == "scheduler-cp1":
        cfg = replace(config(), checkpoint_every=1)
    else:
        cfg = config()
    core = make_core(cfg, 0, os.environ.get("BENCH_CORE", "native"))
    if phase == "scheduler-nolog":
        native = getattr(core, "_native", None)
        if native is None:
            raise SystemExit("bench: --only log needs the native core (BENCH_CORE=native)")
        native.disable_merkle_log_for_benchmark()
    return core


def broker_cpu_seconds() -> float | None:
    """CPU seconds the local broker's JVM has used (``.infra/kafka/broker.pid``), or None when unknown."""
    try:
        pid = int((Path(__file__).resolve().parents[1] / ".infra" / "kafka" / "broker.pid").read_text().split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_child(phase: str, bootstrap: str, prefix: str, count: int, input_topic: str) -> dict[str, float]:
    broker_before = broker_cpu_seconds()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.scheduler",
            "--child",
            phase,
            "--bootstrap",
            bootstrap,
            "--prefix",
            prefix,
            "--count",
            str(count),
            "--input-topic",
            input_topic,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"bench: {phase} phase failed:\n{out.stderr}")
    result = dict(json.loads(out.stdout.strip().splitlines()[-1]))
    broker_after = broker_cpu_seconds()
    if broker_before is not None and broker_after is not None:
        result["broker_cpu_us_per_record"] = (broker_after - broker_before) / max(result["records"], 1) * 1e6
    return result


# -- latency ---------------------------------------------------------------------------


def latency(bootstrap: str, prefix: str, rate: int, seconds: float, warmup: float = 0.0) -> dict[str, float]:
    """Produce-to-journal latency at a steady ``rate``: the time from handing a submission to the producer to
    reading its journal record with a read_committed consumer, per submission.

    The first ``warmup`` seconds of the same stream are not counted: a broker started a moment ago is still
    compiling its hot paths. On this 2-core machine, right after ``infra/up``, runs of 15 s one after the other
    gave p50 142, 84, 46 ms (p99 1,261, 346, 96 ms); with 15 s of warm-up each, p50 72, 37, 21, 20 ms (p99 253,
    157, 133, 95 ms): the broker reaches its steady state after about two minutes of traffic (its CPU at
    1,000/s: 130% at 40 s, 60-70% from 60 to 120 s, 45-55% after), hence the default of 120 s.

    The instrument must not add to what it measures: the submissions are signed before the clock starts, the
    reader takes its timestamp as a fetch arrives (``poll`` returns on the first record; ``consume(n, timeout)``
    would wait out its whole timeout unless ``n`` records came, up to 50 ms more per record) and decodes the
    records only after the run.
    """
    topics = Topics(prefix)
    ensure_topics(bootstrap, topics)
    env = dict(os.environ)
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.scheduler",
            "--child",
            "scheduler-live",
            "--bootstrap",
            bootstrap,
            "--prefix",
            prefix,
            "--count",
            "0",
            "--input-topic",
            topics.submissions,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    warm = int(rate * warmup)
    total = warm + int(rate * seconds)
    runs = [f"lat-{i % 20}" for i in range(total)]
    values = [submission(i, run) for i, run in enumerate(runs)]
    sent: list[float] = [0.0] * total
    arrivals: list[tuple[float, bytes]] = []
    journalled = [0]
    done = threading.Event()

    def consume() -> None:
        consumer = Consumer(
            client_config(
                bootstrap,
                **{
                    "group.id": f"lat-{uuid.uuid4().hex}",
                    "isolation.level": "read_committed",
                    # the broker answers a waiting fetch as soon as a commit moves the partition's last stable
                    # offset; this bounds only the idle round trips (5 ms: 200 fetches a second of broker work)
                    "fetch.wait.max.ms": 100,
                    "enable.auto.commit": False,
                },
            )
        )
        consumer.assign([TopicPartition(topics.journal, 0, OFFSET_BEGINNING)])
        while journalled[0] < total and not done.is_set():
            first = consumer.poll(0.05)
            if first is None:
                continue
            now = time.perf_counter()
            for m in [first, *consumer.consume(1000, 0)]:  # and whatever else that fetch brought
                error = m.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise SystemExit(str(error))
                    continue
                arrivals.append((now, m.value() or b""))
                if ("ce_type", b"bernstein.activity.result") in (m.headers() or ()):  # not a seal
                    journalled[0] += 1
        consumer.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    producer = Producer(client_config(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 0}))
    time.sleep(3.0)  # let the scheduler and the reader finish their start-up before the clock starts
    interval = 1.0 / rate
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    measured_from = start + warm * interval
    cpu_at_start: tuple[int, int] | None = None
    for i in range(total):
        if i == warm:
            cpu_at_start = _cpu_ticks()
        target = start + i * interval
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent[i] = time.perf_counter()
        producer.produce(topics.submissions, key=runs[i].encode(), value=values[i], partition=0)
        producer.poll(0)
    producer.flush(30)
    achieved = (total - warm) / (time.perf_counter() - measured_from)
    load_after = os.getloadavg()[0]
    steal = _steal_share(cpu_at_start, _cpu_ticks())
    reader.join(timeout=60)
    done.set()
    scheduler.terminate()
    scheduler.wait(30)
    received: dict[str, float] = {}
    c = codec.default_codec()
    for now, value in arrivals:
        envelope = c.decode(value)
        if envelope.schema.name == codec.JOURNAL_RECORD:
            received[c.decode(envelope.record["payload"]).record["submission_id"]] = now
    if len(received) < total:
        raise SystemExit(f"bench: only {len(received)} of {total} submissions reached the journal")
    latencies = sorted((received[f"{run}-{i}"] - sent[i]) * 1000 for i, run in enumerate(runs) if i >= warm)

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))]

    return {
        "count": len(latencies),
        "rate_achieved": achieved,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": latencies[-1],
        "load_before": load_before,
        "load_after": load_after,
        "steal": steal,
    }


def _cpu_ticks() -> tuple[int, int] | None:
    """(stolen, all) CPU ticks of the whole machine so far, from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7], sum(fields[:8])) if len(fields) >= 8 else None


def _steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float:
    """The share of CPU time the hypervisor gave to other guests between two readings (-1: unknown).

    A latency run on a shared VM is only as quiet as its host: a run that misses while this is several
    percent says more about the host than about the code."""
    if before is None or after is None or after[1] <= before[1]:
        return -1.0
    return (after[0] - before[0]) / (after[1] - before[1])


def _cpu_context(sched: dict[str, float], same: dict[str, float]) -> str:
    """Where the CPU goes per record, and what it bounds: on this machine the broker, the loop and the
    scheduler share its cores, so once they are busy every extra microsecond of the scheduler's own work
    (its checks, an Ed25519 verification per signed submission) is a microsecond the loop does not get."""
    own = sched["cpu_us_per_record"] - same["cpu_us_per_record"]
    line = (
        f"cpu per record: scheduler process {sched['cpu_us_per_record']:.1f} us, same-output process "
        f"{same['cpu_us_per_record']:.1f} us (the scheduler's own work: {own:.1f} us)"
    )
    if "broker_cpu_us_per_record" in same and "broker_cpu_us_per_record" in sched:
        shared = same["cpu_us_per_record"] + same["broker_cpu_us_per_record"]
        line += (
            f"; broker {sched['broker_cpu_us_per_record']:.1f} / {same['broker_cpu_us_per_record']:.1f} us. With every "
            f"core busy, the scheduler can reach at most {shared / (shared + max(own, 0.0)):.2f} of the same-output loop "
            f"({os.cpu_count()} cores)"
        )
    return line


def _median(results: list[dict[str, float]]) -> dict[str, float]:
    ordered = sorted(results, key=lambda r: r["records_per_second"])
    return ordered[len(ordered) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--latency-seconds", type=float, default=15.0)
    parser.add_argument(
        "--latency-warmup",
        type=float,
        default=120.0,
        help="seconds of the latency stream sent first and not counted (a just-started broker is still compiling: "
        "at 1,000 submissions/s its CPU falls from 130%% at 40 s to 60-70%% at 60-120 s and 45-55%% after)",
    )
    parser.add_argument("--trials", type=int, default=5, help="alternating runs of each phase; medians are compared")
    parser.add_argument("--warmup", type=int, default=3, help="uncounted rounds of each phase first (at least)")
    parser.add_argument(
        "--warmup-max",
        type=int,
        default=10,
        help="more warm-up rounds, up to this many, while the passthrough still gets >10%% faster per round",
    )
    parser.add_argument(
        "--only",
        choices=("throughput", "latency", "log"),
        default=None,
        help="run only the throughput phases, only the latency measurement, or only the scheduler with its Merkle "
        "log against without it and against a checkpoint every step (default: throughput and latency)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--input-topic", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "scheduler-live":
        shell = SchedulerShell(
            bootstrap=args.bootstrap,
            topics=Topics(args.prefix),
            partition=0,
            core=make_core(config(), 0, os.environ.get("BENCH_CORE", "native")),
            options=ShellOptions(batch_max=BATCH_MAX, batch_timeout=BATCH_TIMEOUT),
            progress=None,
        )
        import signal

        signal.signal(signal.SIGTERM, lambda *_: shell.stop())
        shell.run()
        return 0
    if args.child:
        child(args.child, args.bootstrap, args.prefix, args.count, args.input_topic)
        return 0

    settings = Settings.load()
    if not settings.kafka_bootstrap:
        raise SystemExit("bench: no Kafka; run `infra/up` first (make bench does)")
    bootstrap = settings.kafka_bootstrap
    prefix = f"bench{uuid.uuid4().hex[:8]}"  # every topic of the run starts with it
    try:
        if args.only == "latency":
            summary = _run_latency(args, bootstrap, prefix)
        elif args.only == "log":
            summary = _run_log(args, bootstrap, prefix)
        else:
            summary = _run(args, bootstrap, prefix)
    finally:
        # about 1 GB of broker data per run: left behind, it piles up and slows the broker down
        deleted = delete_topics_with_prefixes(bootstrap, [prefix])
        print(f"bench: deleted the run's {len(deleted)} topics", flush=True)
    print("\n".join(summary))  # the headline stays the last line
    return 0


def _run(args: argparse.Namespace, bootstrap: str, prefix: str) -> list[str]:
    """The phases; returns the summary lines (the headline last)."""
    topics = Topics(prefix)
    ensure_topics(bootstrap, topics)
    print(f"bench: publishing {args.count} submissions (3 observations each) to {topics.submissions}", flush=True)
    t0 = time.perf_counter()
    publish(bootstrap, topics.submissions, args.count, prefix)
    print(f"bench: published in {time.perf_counter() - t0:.1f}s", flush=True)

    # Warm-up: the broker's JIT and page cache, off the books. A fresh broker keeps speeding up for a
    # minute or more (six rounds after a reset), so warm-up goes on while the passthrough still gains
    # more than a tenth per round; the per-trial pair ratios cancel what drift remains.
    previous = 0.0
    for round_ in range(max(args.warmup, args.warmup_max)):
        speeds = {}
        for phase in ("passthrough", "scheduler"):
            warm = run_child(phase, bootstrap, f"{prefix}w{phase[:2]}{round_}", args.count, topics.submissions)
            speeds[phase] = warm["records_per_second"]
            print(f"warm-up {phase}: {speeds[phase]:.0f} rec/s (not counted)", flush=True)
        settled = speeds["passthrough"] <= previous * 1.10
        previous = max(previous, speeds["passthrough"])
        if round_ + 1 >= args.warmup and settled:
            break

    # Alternate the phases: this machine is shared and noisy, and each trial runs them back to back.
    bases: list[dict[str, float]] = []
    scheds: list[dict[str, float]] = []
    sames: list[dict[str, float]] = []
    for trial in range(args.trials):
        for label, phase, runs in (
            ("passthrough", "passthrough", bases),
            ("scheduler  ", "scheduler", scheds),
            ("same-output", "same-output", sames),
        ):
            result = run_child(phase, bootstrap, f"{prefix}{phase[:2]}{trial}", args.count, topics.submissions)
            runs.append(result)
            print(
                f"{label} #{trial + 1}: {result['records_per_second']:.0f} rec/s ({result['records']:.0f} records "
                f"in {result['seconds']:.2f}s), peak RSS {result['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
    base = _median(bases)
    sched = _median(scheds)
    shape = sorted(s["records_per_second"] / o["records_per_second"] for o, s in zip(sames, scheds, strict=True))
    print(
        f"context: same-output is the same loop writing the scheduler's own outputs, computed beforehand "
        f"(Kafka's cost of the journal + audit shape, none of the scheduler's work); the scheduler runs at "
        f"{shape[len(shape) // 2]:.2f} of its speed (per-trial {', '.join(f'{r:.2f}' for r in shape)})",
        flush=True,
    )
    print(_cpu_context(sched, _median(sames)), flush=True)
    pairs = sorted(s["records_per_second"] / b["records_per_second"] for b, s in zip(bases, scheds, strict=True))
    paired = pairs[len(pairs) // 2]
    print(
        f"medians: passthrough {base['records_per_second']:.0f} rec/s, scheduler {sched['records_per_second']:.0f} rec/s "
        f"(ratio of medians {sched['records_per_second'] / base['records_per_second']:.2f}); "
        f"per-pair ratios {', '.join(f'{r:.2f}' for r in pairs)}",
        flush=True,
    )
    if args.only == "throughput":
        return [f"scheduler_peak_rss_mib={sched['peak_rss_mib']:.0f}", f"scheduler_vs_passthrough={paired:.2f}"]
    lat = _run_latency(args, bootstrap, prefix)
    return [f"scheduler_peak_rss_mib={sched['peak_rss_mib']:.0f}", *lat, f"scheduler_vs_passthrough={paired:.2f}"]


def _run_log(args: argparse.Namespace, bootstrap: str, prefix: str) -> list[str]:
    """What the Merkle log and the checkpoint cadence cost the whole scheduler, Kafka and all: its three
    ``LOG_PHASES`` over the same partition, each trial in a new order (no arm always first), medians of the
    per-trial ratios. Returns the summary lines (the log's ratio last)."""
    topics = Topics(prefix)
    ensure_topics(bootstrap, topics)
    print(f"bench: publishing {args.count} submissions (3 observations each) to {topics.submissions}", flush=True)
    publish(bootstrap, topics.submissions, args.count, prefix)
    phases = list(LOG_PHASES)
    for round_ in range(args.warmup):
        for phase in phases:
            warm = run_child(phase, bootstrap, f"{prefix}w{round_}{phases.index(phase)}", args.count, topics.submissions)
            print(f"warm-up {phase}: {warm['records_per_second']:.0f} rec/s (not counted)", flush=True)
    runs: dict[str, list[dict[str, float]]] = {phase: [] for phase in phases}
    for trial in range(args.trials):
        order = phases[trial % len(phases) :] + phases[: trial % len(phases)]
        for phase in order:
            result = run_child(phase, bootstrap, f"{prefix}t{trial}{phases.index(phase)}", args.count, topics.submissions)
            runs[phase].append(result)
            print(
                f"{phase:<15} #{trial + 1}: {result['records_per_second']:.0f} rec/s, "
                f"{result['cpu_us_per_record']:.1f} us CPU per record in its process, {LOG_PHASES[phase]}",
                flush=True,
            )

    def paired(arm: str, base: str, key: str = "records_per_second") -> list[float]:
        return sorted(a[key] / b[key] for a, b in zip(runs[arm], runs[base], strict=True))

    log = paired("scheduler", "scheduler-nolog")
    cadence = paired("scheduler-cp1", "scheduler")
    # CPU per record, the scheduler's bound on this machine: the ratio inverted so that above 1 is faster, as above
    log_cpu = sorted(1 / r for r in paired("scheduler", "scheduler-nolog", "cpu_us_per_record"))
    cpu = {phase: _median(results)["cpu_us_per_record"] for phase, results in runs.items()}
    print(
        f"cpu per record (median trial): with the log {cpu['scheduler']:.1f} us, without {cpu['scheduler-nolog']:.1f} us, "
        f"a checkpoint every step {cpu['scheduler-cp1']:.1f} us",
        flush=True,
    )
    print(f"with log / without, per trial: {', '.join(f'{r:.3f}' for r in log)}", flush=True)
    print(f"by CPU per record (without / with), per trial: {', '.join(f'{r:.3f}' for r in log_cpu)}", flush=True)
    print(f"checkpoint every step / default cadence, per trial: {', '.join(f'{r:.3f}' for r in cadence)}", flush=True)
    return [
        f"checkpoint_every_1_vs_default={cadence[len(cadence) // 2]:.3f}",
        f"scheduler_cpu_with_log_vs_without={log_cpu[len(log_cpu) // 2]:.3f}",
        f"scheduler_with_log_vs_without={log[len(log) // 2]:.3f}",
    ]


def _run_latency(args: argparse.Namespace, bootstrap: str, prefix: str) -> list[str]:
    """The latency measurement; returns its summary line."""
    lat = latency(bootstrap, f"{prefix}lat", args.rate, args.latency_seconds, args.latency_warmup)
    verdict = "met" if lat["p99_ms"] <= LATENCY_P99_TARGET_MS else "MISSED"
    print(
        f"latency at {lat['rate_achieved']:.0f}/s over {lat['count']:.0f} submissions (after {args.latency_warmup:.0f} s "
        f"of warm-up at the same rate): produce-to-journal "
        f"p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, max {lat['max_ms']:.1f} ms "
        f"(target p99 <= {LATENCY_P99_TARGET_MS:.0f} ms: {verdict}; 1-minute load average {lat['load_before']:.1f} "
        f"before, {lat['load_after']:.1f} after, {os.cpu_count()} cores{_steal_note(lat['steal'])})",
        flush=True,
    )
    return [f"latency_p99_ms={lat['p99_ms']:.1f}"]


def _steal_note(steal: float) -> str:
    return "" if steal < 0 else f"; CPU time stolen by the host while measured {steal * 100:.1f}%"


if __name__ == "__main__":
    sys.exit(main())
