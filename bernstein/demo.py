"""The end-to-end demo behind ``make demo`` / ``bernstein demo``.

It runs the system's main job on this machine, against the real broker and S3
server: agents of several kinds publish activities through the SDK, the
deterministic scheduler validates, chains, refuses and audits them in Kafka
transactions, the run is closed and sealed, exported to a dump directory,
and verified offline from the dump alone, printing the seed's report.

Keys by owner (docs/security.md): the scheduler's seal and audit keys live in
``--keys-dir``; the agents publish as one producer, ``demo-agents``, with its own
keys in ``--producer-keys`` (both created when missing). The demo registers that
producer in a manifest it writes next to the run's dump (config/roles.toml's
roles plus a ``[[producers]]`` entry), runs its scheduler with that manifest, and
exports trust the way ``bernstein keys trust --manifest`` does.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TextIO

from bernstein.consumers.core.native import make_core
from bernstein.consumers.shell import SchedulerShell
from bernstein.producers.activity import ActivityRejected, ActivityResult
from bernstein.producers.coding import publish_spawn, run_spawn
from bernstein.producers.emitter import Emitter, Published
from bernstein.schemas import codec
from bernstein.substrate.cas import DirBlobStore, S3BlobStore
from bernstein.substrate.config import Settings
from bernstein.substrate.kafka import ensure_topics, require_bootstrap
from bernstein.substrate.keys import (
    InstallKeys,
    KeyFileMissing,
    ProducerKeys,
    TrustedKeys,
    init_keys,
    init_producer_keys,
    load_keys,
    load_producer_keys,
)
from bernstein.verifier.export import export_dump
from bernstein.verifier.kafka_source import KafkaSource
from bernstein.verifier.render import render_text
from bernstein.verifier.sources import DumpSource
from bernstein.verifier.verify import verify_stream

REPO = Path(__file__).resolve().parent.parent
DEMO_PRODUCER = "demo-agents"
"""The producer name the demo's agents publish under (``bernstein keys init --producer demo-agents``)."""
DEMO_ROLES = ("developer", "scout", "navigator", "analyst", "operator")


@dataclass
class DemoContext:
    settings: Settings
    emitter: Emitter
    run_id: str
    workdir: Path
    keys: ProducerKeys
    """The agents' producer keys: they sign submissions, lineage entries and receipts."""
    out: TextIO
    published: list[Published] = field(default_factory=list)

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def publish(self, stage_id: str, role: str, result: ActivityResult) -> Published:
        """Publish one stage's result into the demo run and record where it landed in ``published``."""
        published = self.emitter.publish(run_id=self.run_id, stage_id=stage_id, role=role, result=result)
        self.published.append(published)
        return published


def _keys(directory: Path, out: TextIO) -> InstallKeys:
    try:
        return load_keys(directory)
    except KeyFileMissing:
        keys = init_keys(directory)
        print(
            f"    created scheduler keys in {directory} (seal {keys.signer.key_id[:19]}..., audit {keys.audit.key_id[:19]}...)",
            file=out,
        )
        return keys


def _producer_keys(directory: Path, out: TextIO) -> ProducerKeys:
    try:
        return load_producer_keys(directory)
    except KeyFileMissing:
        keys = init_producer_keys(directory, DEMO_PRODUCER)
        print(f"    created producer {DEMO_PRODUCER!r} keys in {directory} (signing {keys.signer.key_id[:19]}...)", file=out)
        return keys


def write_manifest(path: Path, producer: ProducerKeys) -> Path:
    """config/roles.toml's roles plus the demo producer, granted every role and the browser kind."""
    from bernstein.commands.keys import manifest_snippet, producer_manifest_keys

    roles = (REPO / "config" / "roles.toml").read_text(encoding="utf-8")
    entry = manifest_snippet(
        producer.name, producer_manifest_keys(producer.ring), roles=list(DEMO_ROLES), agent_kinds=["browser"]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{roles.rstrip()}\n\n# the demo's agents (bernstein keys init --producer {producer.name})\n{entry}\n")
    return path


def coding_stage(ctx: DemoContext) -> None:
    """A scripted coding agent writes two files; the spawn is published as a coding activity."""
    project = ctx.workdir / "project"
    project.mkdir()
    (project / "README.md").write_text("# calc\n", encoding="utf-8")
    script = (
        "from pathlib import Path\n"
        "Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')\n"
        "Path('test_calc.py').write_text('from calc import add\\n\\ndef test_add():\\n    assert add(2, 3) == 5\\n')\n"
        "Path('README.md').write_text('# calc\\n\\nAdds numbers.\\n')\n"
    )
    spawn = run_spawn(project, [sys.executable, "-c", script])
    published = publish_spawn(ctx.emitter, spawn, run_id=ctx.run_id, stage_id="coding-0", role="developer")
    ctx.published.append(published)
    ctx.say(f"    coding-0   [coding]   diff of {len(spawn.written)} files, evidence = their bytes  -> offset {published.offset}")
    # The same evidence again: the scheduler must refuse it as redundant.
    again = publish_spawn(ctx.emitter, spawn, run_id=ctx.run_id, stage_id="coding-1", role="developer")
    ctx.published.append(again)
    ctx.say(f"    coding-1   [coding]   same files again (expected: refused as RedundantStage) -> offset {again.offset}")


def _site_server() -> ModuleType:
    """``demo/site_server.py``, loaded from the checkout by its path, the way a script is run: ``demo/`` (the site,
    its flows, its server) is the repository's and is not a package nor installed (docs/decisions.md, 24)."""
    name = "bernstein_demo_site_server"
    if name in sys.modules:
        return sys.modules[name]
    path = REPO / "demo" / "site_server.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the demo site's server from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def research_stages(ctx: DemoContext) -> None:
    """A research agent reads the local demo site: every page is content-addressed as it lands, and every
    claim quotes the bytes it came from. A second query runs out of budget: recorded as a refused activity."""
    serve = _site_server().serve
    from bernstein.producers.research import (
        ResearchBudget,
        ResearchBudgetExceeded,
        ResearchWorker,
        extractive_synthesiser,
        make_fetch,
    )

    fetch = make_fetch(allow_private=True)  # the demo site is on loopback, which is refused by default
    with serve(REPO / "demo" / "site") as (url, _stop):
        sources = [f"{url}/old-notes", f"{url}/performance.html", f"{url}/migration.html"]
        worker = ResearchWorker(store=ctx.emitter.store, budget=ResearchBudget(max_fetches=8, max_bytes=1 << 20))
        run = worker.run(query="What changed in Quill 2.0?", sources=sources, fetch_fn=fetch, synthesise=extractive_synthesiser)
        published = ctx.publish("research-0", "scout", run.result)
        claims = len(run.report.claims)
        ctx.say(
            f"    research-0 [research] {len(run.fetched)} pages fetched into the CAS, {claims} cited claims -> offset {published.offset}"
        )

        tight = ResearchWorker(store=ctx.emitter.store, budget=ResearchBudget(max_fetches=1))
        try:
            tight.run(
                query="Everything about Quill",
                sources=[f"{url}/index.html", *sources],
                fetch_fn=fetch,
                synthesise=extractive_synthesiser,
            )
        except ResearchBudgetExceeded as exceeded:
            published = ctx.publish("research-1", "scout", tight.refused_result(exceeded))
            ctx.say(
                f"    research-1 [research] budget of 1 fetch exceeded before fetch 2: recorded as refused -> offset {published.offset}"
            )


def dataops_stages(ctx: DemoContext) -> None:
    """A data job (CSV rollup) and an ops job (config change) with signed receipts; then an ops job
    that writes before planning, which is refused and recorded as a refused activity."""
    from bernstein.producers.dataops import DataActivity, OpsActivity
    from bernstein.producers.dataops.examples import InputFile, JobSpec, misordered_job, run_data_job, run_ops_job

    data_dir = REPO / "demo" / "data"
    out_dir = ctx.workdir / "dataops"
    orders = InputFile("orders.csv", (data_dir / "orders.csv").read_bytes())
    data_steps = JobSpec.parse((data_dir / "orders.job.json").read_bytes()).steps
    job = run_data_job(
        DataActivity(ctx.run_id, "data-0", store=ctx.emitter.store, signer=ctx.keys.signer),
        [orders],
        data_steps,
        out_dir / "regions.csv",
    )
    published = ctx.publish("data-0", "analyst", job.result)
    ctx.say(
        f"    data-0     [data]     {len(data_steps)} planned steps over orders.csv -> regions.csv, signed receipt -> offset {published.offset}"
    )

    config = InputFile("service.conf", (data_dir / "service.conf").read_bytes())
    ops_steps = JobSpec.parse((data_dir / "service.job.json").read_bytes()).steps
    ops = run_ops_job(
        OpsActivity(ctx.run_id, "ops-0", store=ctx.emitter.store, signer=ctx.keys.signer),
        [config],
        ops_steps,
        out_dir / "service.conf",
    )
    published = ctx.publish("ops-0", "operator", ops.result)
    changes = ", ".join(f"{c.key}: {c.before} -> {c.after}" for c in ops.changes)
    ctx.say(f"    ops-0      [ops]      config change ({changes}), signed receipt -> offset {published.offset}")

    misordered = OpsActivity(ctx.run_id, "ops-1", store=ctx.emitter.store, signer=ctx.keys.signer)
    try:
        misordered_job(misordered, "effect-before-plan", [config], ops_steps, out_dir / "never.conf")
    except ActivityRejected as refusal:
        published = ctx.publish("ops-1", "operator", misordered.refused_result(refusal))
        ctx.say(
            f"    ops-1      [ops]      wrote before planning: refused {refusal.code}, recorded as a refused activity -> offset {published.offset}"
        )


def browser_stage(ctx: DemoContext) -> None:
    """A scripted browser agent signs up on the demo site in headless Chromium; every action is anchored, signed
    and journalled, and the typed password never leaves the boundary in plain text."""
    serve = _site_server().serve
    from bernstein.producers.computer_use.demo import browser_demo_stage

    with serve(REPO / "demo" / "site") as (url, _stop):
        outcome = browser_demo_stage(ctx.emitter, ctx.run_id, ctx.keys, url, ctx.workdir / "browser")
    ctx.say(
        f"    browser-0  [browser]  signup flow in Chromium: {outcome.action_count} actions anchored, head "
        f"{outcome.head_anchor[:23]}..., {outcome.activity_terminal_state.value} -> {outcome.result_landed}"
    )


STAGES: list[Callable[[DemoContext], None]] = [coding_stage, research_stages, dataops_stages, browser_stage]


def run_demo(
    *, settings: Settings, keys_dir: Path, out_dir: Path, producer_keys_dir: Path | None = None, out: TextIO = sys.stdout
) -> int:
    bootstrap = require_bootstrap(settings.kafka_bootstrap)
    if settings.s3 is None:
        raise SystemExit("no S3 endpoint: run `infra/up` first (make demo does)")
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    print(f"==> demo run {run_id}", file=out)
    print(
        f"    kafka {bootstrap}, s3 {settings.s3.endpoint} (bucket {settings.s3.bucket}), topics {settings.topics.prefix}.*",
        file=out,
    )
    from bernstein.commands.keys import export_trust
    from bernstein.commands.scheduler import scheduler_config

    keys = _keys(keys_dir, out)
    producer = _producer_keys(producer_keys_dir or keys_dir.parent / "producer-keys", out)
    run_dir = out_dir / run_id
    manifest = write_manifest(run_dir / "roles.toml", producer)
    print(f"    producer {producer.name!r} (key {producer.signer.key_id[:19]}...) registered in {manifest}", file=out)
    store = S3BlobStore(settings.s3)
    store.ensure_bucket()
    partitions = ensure_topics(bootstrap, settings.topics)
    config = scheduler_config(keys, manifest, 1000)
    shells = [
        SchedulerShell(bootstrap=bootstrap, topics=settings.topics, partition=p, core=make_core(config, p), progress=None)
        for p in range(partitions)
    ]
    threads = [threading.Thread(target=shell.run, name=f"scheduler-p{shell.partition}", daemon=True) for shell in shells]
    print(f"==> scheduler: {partitions} partition(s), one transactional scheduler each", file=out)
    for thread in threads:
        thread.start()

    with (
        tempfile.TemporaryDirectory(prefix="bernstein-demo-") as tmp,
        Emitter(bootstrap=bootstrap, store=store, topics=settings.topics, producer=producer) as emitter,
    ):
        ctx = DemoContext(settings=settings, emitter=emitter, run_id=run_id, workdir=Path(tmp), keys=producer, out=out)
        print("==> agents publish activities (evidence goes to S3 first, then one Avro event each)", file=out)
        for stage in STAGES:
            stage(ctx)
        closing = emitter.close_run(run_id)
        ctx.published.append(closing)
        print(f"    run closed -> offset {closing.offset}; waiting for the scheduler to seal it", file=out)

    _wait_for(shells, closing, timeout=60.0)
    for shell in shells:
        shell.stop()
    for thread in threads:
        thread.join(timeout=30)
    totals = {
        k: sum(getattr(s.counters, k) for s in shells) for k in ("consumed", "journalled", "refused", "dead_letters", "seals")
    }
    print(
        f"    scheduler: consumed {totals['consumed']}, journalled {totals['journalled']}, refused {totals['refused']}, "
        f"dead-lettered {totals['dead_letters']}, seals {totals['seals']}",
        file=out,
    )
    _show_refusals(settings, run_id, closing.partition, out)

    dump = run_dir / "dump"
    print(f"==> export the run to {dump} (topics as stored + referenced blobs)", file=out)
    summary = export_dump(
        KafkaSource(bootstrap, settings.topics),
        dump,
        cas=store,
        runs=[run_id],
        trusted=export_trust(keys.key_ring, manifest, include_audit_key=False),
    )
    print(f"    {sum(summary.records.values())} records, {summary.blobs} blobs", file=out)
    trust_file = run_dir / "trusted-keys.json"
    export_trust(keys.key_ring, manifest).write(trust_file)
    print(f"    pinned keys: bernstein keys trust --dir {keys_dir} --manifest {manifest} --out {trust_file}", file=out)

    print("==> verify offline, from the dump alone (no Kafka, no S3):", file=out)
    print(f"    bernstein activity verify {run_id} --from {dump} --trusted-keys {trust_file}", file=out)
    print("", file=out)
    header, stages = verify_stream(run_id, DumpSource(dump), cas=DirBlobStore(dump / "cas"), trusted=TrustedKeys.load(trust_file))
    return render_text(header, stages, out)


def _wait_for(shells: list[SchedulerShell], last: Published, *, timeout: float) -> None:
    shell = next(s for s in shells if s.partition == last.partition)
    deadline = time.monotonic() + timeout
    while shell.counters.last_offset < last.offset:
        if time.monotonic() > deadline:
            raise SystemExit(f"the scheduler did not reach offset {last.offset} within {timeout:.0f}s; see `infra/status`")
        time.sleep(0.05)


def _show_refusals(settings: Settings, run_id: str, partition: int, out: TextIO) -> None:
    source = KafkaSource(require_bootstrap(settings.kafka_bootstrap), settings.topics)
    for record in source.records("refusals", partition):
        if record.key != run_id.encode():
            continue
        refusal = codec.decode(record.value or b"").record
        print(
            f"    refusal: {refusal['exception']} {refusal['code']} stage={refusal['stage_id']} -- {refusal['message']}", file=out
        )
