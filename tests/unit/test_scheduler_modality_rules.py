"""The scheduler refuses research and data/ops submissions that break their document rules: both cores.

Every case of tests/support/document_breaches.py goes through
``SchedulerCore.step`` (the reference) and the native core; the refusal
record must be exactly the one the rule names, byte-identical in both cores,
and the state must not change. The native core journals documents it can
certify itself (native/src/documents.rs) and hands every other record to the
reference (``Fallback``), which the fallback counter shows; a differential
fuzz over mutated documents checks that the two never disagree.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bernstein.consumers.core.model import InputRecord, OutputRecord, ProducerRegistry, SchedulerConfig, SchedulerState, Stream
from bernstein.consumers.core.native import NativeSchedulerCore, NativeState
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import codec
from bernstein.schemas.canonical import canonical_json, evidence_set_hash, hmac_key_id, sha256_digest
from bernstein.schemas.documents.common import Violation
from bernstein.schemas.errors import CanonicalizationError
from bernstein.substrate.keys import Ed25519Signer
from tests.support.cores import enc
from tests.support.document_breaches import DATAOPS, RESEARCH, VALID
from tests.support.modality import MODALITY_ROLES, dataops_submission, page_observations, refusal_record, research_submission
from tests.support.producers import NAMES, producer

SIGNER = Ed25519Signer.from_seed(b"\x07" * 32)
AUDIT_KEY = b"modality-rules-audit-key-0123456"
TOPIC = "t.activity.submissions"
CONFIG = SchedulerConfig(
    roles=MODALITY_ROLES,
    signer=SIGNER,
    audit_key=AUDIT_KEY,
    audit_key_id=hmac_key_id(AUDIT_KEY),
    seal_every=1000,
    producers=ProducerRegistry.of([producer(name, roles=MODALITY_ROLES) for name in NAMES]),
)
CASES: dict[str, tuple[dict[str, Any], Violation]] = {
    **{f"research/{k}": v for k, v in RESEARCH.items()},
    **{f"dataops/{k}": v for k, v in DATAOPS.items()},
}


def record_of(sub: dict[str, Any], offset: int = 0) -> InputRecord:
    value = enc(sub)  # signed as its producer (ActivitySubmission.v3)
    return InputRecord(TOPIC, 0, offset, 1_700_000_000_500 + offset, sub["run_id"].encode(), value)


def both_cores(sub: dict[str, Any]) -> tuple[list[OutputRecord], SchedulerState, NativeSchedulerCore]:
    """Step one record through the reference and the native core; their outputs must be byte-identical."""
    record = record_of(sub)
    state, expected = SchedulerCore(CONFIG).step(initial_state(CONFIG, 0), record)
    native = NativeSchedulerCore(CONFIG, 0, self_check=False)
    native_state: SchedulerState | NativeState = initial_state(CONFIG, 0)
    native_state, got = native.step(native_state, record)
    assert [(o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in got] == [
        (o.stream, o.key, o.value, o.headers, o.timestamp_ms) for o in expected
    ]
    assert native.to_scheduler_state() == state
    return expected, state, native


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_broken_rule_is_refused_with_its_exact_record_by_both_cores(name: str) -> None:
    sub, violation = CASES[name]
    outputs, state, native = both_cores(sub)
    assert [o.stream for o in outputs] == [Stream.REFUSALS, Stream.AUDIT]
    refusal = codec.decode(outputs[0].value or b"")
    assert refusal.schema.name == codec.REFUSAL_V2
    assert refusal.record == refusal_record(sub, violation, TOPIC, 0)
    assert outputs[0].key == sub["run_id"].encode()
    audit = codec.decode(codec.decode(outputs[1].value or b"").record["payload"]).record
    assert (audit["event"], audit["reason_code"], audit["journal_seq"]) == ("activity.refused", violation.code.value, -1)
    assert state.runs == {}  # a refusal changes no run state
    assert native.fallbacks == 1  # worded by the reference, so both cores agree by construction


@pytest.mark.parametrize("name", sorted(VALID))
def test_documents_the_sdk_builds_are_journalled_by_both_cores(name: str) -> None:
    sub = VALID[name]()
    outputs, state, native = both_cores(sub)
    assert [o.stream for o in outputs] == [Stream.JOURNAL, Stream.AUDIT]
    entry = codec.decode(codec.decode(outputs[0].value or b"").record["payload"]).record
    assert (entry["kind"], entry["terminal_state"], entry["artifact_hash"]) == (
        sub["kind"],
        sub["terminal_state"],
        sub["artifact_hash"],
    )
    assert state.runs["run-1"].entry_count == 1
    assert native.fallbacks == 0  # native/src/documents.rs certifies documents that pass every rule


def test_a_valid_report_the_native_parser_does_not_model_is_journalled_by_the_reference() -> None:
    """A quote with a '"' is spelled with an escape: the native accept path leaves it to the reference, which accepts it."""
    page: dict[str, Any] = {
        "kind": "page",
        "ref": "https://q.test/",
        "content_hash": sha256_digest(b'He said "yes".'),
        "size": 14,
    }

    def quoted(doc: dict[str, Any]) -> None:
        doc["plan"].append("https://q.test/")
        doc["sources"].append({**doc["sources"][0], "source_ref": "https://q.test/", "final_url": "https://q.test/"})
        doc["sources"][-1]["page_content_hash"] = page["content_hash"]
        citation = {
            "claim_id": "c3",
            "source_ref": "https://q.test/",
            "page_content_hash": page["content_hash"],
            "quote": '"yes"',
        }
        doc["claims"].append({"claim_id": "c3", "statement": "He agreed", "citations": [citation]})

    sub = research_submission(quoted, observations=[*page_observations(), page])
    assert b'\\"yes\\"' in sub["artifact"]
    outputs, state, native = both_cores(sub)
    assert [o.stream for o in outputs] == [Stream.JOURNAL, Stream.AUDIT]
    assert native.fallbacks == 1


def test_document_rules_run_after_the_generic_checks() -> None:
    """A broken report whose artifact hash is also wrong is refused for the hash (the generic check comes first)."""
    sub = research_submission(lambda d: d["claims"][0].update(citations=[]))
    sub["artifact_hash"] = "sha256:" + "00" * 32
    outputs, _, native = both_cores(sub)
    assert codec.decode(outputs[0].value or b"").record["code"] == "ARTIFACT_HASH_MISMATCH"
    assert native.fallbacks == 0  # the native core decides generic refusals itself


def test_a_refused_stage_can_be_resubmitted_correctly() -> None:
    """Refusals change no state: the same stage id, fixed, is journalled next."""
    core = SchedulerCore(CONFIG)
    state = initial_state(CONFIG, 0)
    bad = dataops_submission(lambda d: d["plan"].update(steps=["other"]), stage_id="rollup")
    state, outs = core.step(state, record_of(bad, 0))
    assert codec.decode(outs[0].value or b"").record["code"] == "DATAOPS_PLAN_HASH_MISMATCH"
    good = dataops_submission(stage_id="rollup", submission_id="sub-run-1-rollup-2")
    state, outs = core.step(state, record_of(good, 1))
    assert [o.stream for o in outs] == [Stream.JOURNAL, Stream.AUDIT]
    assert list(state.runs["run-1"].stages) == ["rollup"]


# ---------------------------------------------------------------------------
# differential fuzz: the native accept path never accepts what the reference refuses
# ---------------------------------------------------------------------------

DOCUMENT_BUILDERS = sorted(name for name in VALID if not name.startswith("coding"))
REPLACEMENTS: list[Any] = [
    None,
    True,
    0,
    -1,
    7,
    2**53,
    "",
    " \u00a0",
    "x",
    'say "hi"',
    "line\nbreak",
    "\u2028",
    "c1",
    "failed",
    "input",
    "output",
    "bernstein.dataops.receipt/v1",
    "bernstein.research.report/v1",
    "sha256:" + "ab" * 32,
    [],
    {},
    ["x"],
]


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _nodes(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += _nodes(child, (*path, index))
    return out


def _mutate(document: dict[str, Any], path: tuple[Any, ...], action: str, replacement: Any) -> None:
    parent: Any = document
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "duplicate" and isinstance(parent, list):
        parent.insert(last, copy.deepcopy(parent[last]))
    else:
        parent[last] = copy.deepcopy(replacement)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    builder=st.sampled_from(DOCUMENT_BUILDERS),
    target=st.integers(min_value=0, max_value=10_000),
    action=st.sampled_from(["replace", "delete", "duplicate", "observations", "state", "bytes"]),
    replacement=st.sampled_from(REPLACEMENTS),
    byte=st.integers(min_value=0, max_value=255),
)
def test_both_cores_agree_on_every_mutated_document(builder: str, target: int, action: str, replacement: Any, byte: int) -> None:
    sub = VALID[builder]()
    if action == "bytes" or not sub["artifact"].startswith(b"{"):
        data = bytearray(sub["artifact"] or b" ")
        data[target % len(data)] = byte
        artifact = bytes(data)
    elif action in ("observations", "state"):
        artifact = sub["artifact"]
        if action == "state":
            field = "terminal_state" if target % 2 else "reason_code"
            sub[field] = ["completed", "refused", "failed", "timed_out", "ok", "budget_exhausted", "effect_before_plan"][
                target % 7
            ]
        else:
            observations = list(sub["observations"])
            if observations:
                index = target % len(observations)
                if byte % 3 == 0:
                    observations.pop(index)
                elif byte % 3 == 1:
                    observations.insert(0, observations.pop(index))
                else:
                    observations[index] = {**observations[index], "kind": ["input", "output", "page", "file"][byte % 4]}
            sub = {
                **sub,
                "observations": observations,
                "evidence_set_hash": evidence_set_hash(o["content_hash"] for o in observations),
            }
    else:
        document = json.loads(sub["artifact"])
        paths = [p for p in _nodes(document) if p]
        path = paths[target % len(paths)]
        _mutate(document, path, action, replacement)
        try:
            artifact = canonical_json(document)
        except CanonicalizationError:  # 2**53: the compact, sorted spelling, which is not canonical
            artifact = json.dumps(document, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    sub = {**sub, "artifact": artifact, "artifact_hash": sha256_digest(artifact)}
    both_cores(sub)  # byte-identical outputs and equal states, whatever the verdict
