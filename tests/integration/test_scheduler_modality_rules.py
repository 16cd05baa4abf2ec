"""Hand-built research and data/ops submissions that break a document rule, through the real broker.

For each rule moved into the scheduler, a hand-built
submission that breaks it, published to Kafka, gets the exact refusal record
from both cores (the Python reference and the native core), while the
documents the SDK builds are journalled. The outputs must also equal, byte
for byte, the pure reference folded over the same input partition.
"""

from __future__ import annotations

from typing import Any

import pytest

from bernstein.consumers.core.native import NativeSchedulerCore
from bernstein.schemas import codec
from bernstein.schemas.documents.common import Violation
from bernstein.substrate.config import Settings
from bernstein.substrate.keys import InstallKeys
from tests.support.document_breaches import DATAOPS, RESEARCH
from tests.support.kafka import (
    fold,
    fresh_topics,
    produce_all,
    read_outputs,
    read_partition,
    run_core,
    scheduler_config,
    stored_form,
)
from tests.support.modality import (
    MODALITY_ROLES,
    abort_document,
    dataops_submission,
    page_observations,
    refusal_record,
    research_submission,
)
from tests.support.submissions import encode_submission

BREACHES: list[tuple[str, dict[str, Any], Violation]] = [
    *((f"research/{name}", sub, violation) for name, (sub, violation) in sorted(RESEARCH.items())),
    *((f"dataops/{name}", sub, violation) for name, (sub, violation) in sorted(DATAOPS.items())),
]


def accepted() -> list[dict[str, Any]]:
    """What the SDK builds, one stage each (distinct evidence, so none is redundant)."""
    return [
        research_submission(stage_id="research-ok", submission_id="ok-1"),
        research_submission(
            stage_id="research-budget",
            submission_id="ok-2",
            document=abort_document(),
            observations=page_observations()[:1],
            terminal_state="refused",
            reason_code="budget_exhausted",
        ),
        dataops_submission(stage_id="ops-ok", submission_id="ok-3"),
        dataops_submission(stage_id="ops-refused", submission_id="ok-4", refusal=True),
        dataops_submission(kind="data", run_id="run-2", stage_id="data-ok", submission_id="ok-5"),
    ]


@pytest.mark.parametrize("core_name", ["python", "native"])
def test_every_broken_rule_is_refused_with_its_exact_record_through_the_broker(
    core_name: str, settings: Settings, install_keys: InstallKeys
) -> None:
    bootstrap = settings.kafka_bootstrap
    assert bootstrap is not None
    topics = fresh_topics(bootstrap, f"{settings.topics.prefix}{core_name[0]}")
    config = scheduler_config(install_keys, roles=MODALITY_ROLES)
    breaches = [(name, {**sub, "submission_id": f"breach-{i}"}, v) for i, (name, sub, v) in enumerate(BREACHES)]
    good = accepted()
    subs = [sub for _, sub, _ in breaches] + good
    items: list[tuple[bytes | None, bytes | None]] = [(sub["run_id"].encode(), encode_submission(sub)) for sub in subs]
    offsets = produce_all(bootstrap, topics.submissions, items)
    core = run_core(core_name, bootstrap, topics, config, len(items))

    out = read_outputs(bootstrap, topics)
    refusals = {r.record["input"]["offset"]: r for r in out["refusals"]}
    assert sorted(refusals) == offsets[: len(breaches)]  # each breach refused, nothing else
    for (name, sub, violation), offset in zip(breaches, offsets, strict=False):
        rec = refusals[offset]
        assert rec.record == refusal_record(sub, violation, topics.submissions, offset), name
        assert rec.key == sub["run_id"].encode()
    journalled = [r.inner for r in out["journal"] if r.schema == codec.JOURNAL_RECORD]
    assert [(e["run_id"], e["stage_id"], e["kind"], e["terminal_state"]) for e in journalled] == [
        (s["run_id"], s["stage_id"], s["kind"], s["terminal_state"]) for s in good
    ]
    assert out["deadletter"] == []
    # byte-identical to the Python reference folded over the same input partition
    expected = fold(config, read_partition(bootstrap, topics, "submissions"))
    for stream, records in out.items():
        assert [r.stored() for r in records] == [stored_form(o) for o in expected[stream]], stream
    if core_name == "native":
        assert isinstance(core, NativeSchedulerCore)
        # the native core journals the documents it can certify; each breach is worded by the reference
        assert core.fallbacks == len(breaches)
