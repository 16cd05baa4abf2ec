"""Every judge of the audit chain runs every case of ``schemas/vectors/audit_walks.json`` and reaches its verdict.

The judges: the verifier (Python facts, and the native facts with the native plain walk),
``audit follow``'s checker (Python and native facts; resumed from its saved state where a case says),
and the scheduler's rebuild (the Python reference fold and the native fold). Each (judge, case)
pair is its own test; ``test_no_judge_skips_a_case`` fails when a judge is missing or cannot run
(the native extension not built is a failure here, not a skip), when a case lacks an expectation,
and when the file is not what ``python -m tests.vectors.audit_vectors`` writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from bernstein.consumers.core.native import native_status
from bernstein.consumers.core.rebuild import StateCorrupted, rebuild_state
from bernstein.substrate.keys import TrustedKeys
from bernstein.verifier import facts as facts_module
from bernstein.verifier.follow.checker import ChainState, PartitionChecker, Policy
from bernstein.verifier.follow.latch import TAMPER
from bernstein.verifier.render import report_document
from bernstein.verifier.sources import StoredRecord
from bernstein.verifier.verify import audit_chain_findings, verify_many
from tests.support.browser_fakes import MemorySource
from tests.vectors import audit_vectors

VECTORS = Path(audit_vectors.OUT)
TOPICS = {
    "journal": "activity.journal",
    "refusals": "activity.refusals",
    "audit": "audit",
    "deadletter": "activity.deadletter",
    "checkpoints": "checkpoints",
}


@cache
def corpus() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return document


def _cases() -> list[dict[str, Any]]:
    return list(corpus()["cases"])


def _records(case: dict[str, Any], stream: str) -> list[list[Any]]:
    base = corpus()["bases"][case["base"]]
    if stream == "audit" and case["audit"] is not None:
        return list(case["audit"])
    return list(base["records"][stream])


def _partition(case: dict[str, Any]) -> int:
    return int(corpus()["bases"][case["base"]]["partition"])


def _trusted(case: dict[str, Any], tmp: Path) -> TrustedKeys:
    path = tmp / f"{case['name']}.trusted.json"
    path.write_text(json.dumps(case["trusted_keys"]), encoding="utf-8")
    return TrustedKeys.load(path)


def _facts(native: bool) -> facts_module.Facts:
    if not native:
        return facts_module.PYTHON
    assert facts_module.NATIVE is not None, f"the native extension is not usable: {facts_module.native_status()[1]}"
    assert facts_module.NATIVE.walks is not None, "the native extension has no plain walks"
    return facts_module.NATIVE


# -- the judges -----------------------------------------------------------------------


def verify_judge(native: bool) -> Callable[[dict[str, Any], Path], Any]:
    def run(case: dict[str, Any], tmp: Path) -> list[list[Any]]:
        partition = _partition(case)
        source = MemorySource(
            {
                stream: [
                    StoredRecord(
                        stream,
                        TOPICS[stream],
                        partition,
                        r[0],
                        r[1],
                        None if r[2] is None else bytes.fromhex(r[2]),
                        bytes.fromhex(r[3]),
                    )
                    for r in _records(case, stream)
                ]
                for stream in TOPICS
            }
        )
        trusted = _trusted(case, tmp)
        with facts_module.use(_facts(native)):
            chain = audit_chain_findings(source, partition, trusted)
            reports = verify_many(None, source, cas=None, trusted=trusted, records_only=True)
        # the chain's every finding, and each run's report (the first problem of each check: the joins with the journal)
        found = {(p.code, p.stream, p.offset) for p in chain if p.offset is not None}
        for report in reports:
            document, _ = report_document(report.header, report.stages)
            _collect(document, found)
        return sorted([list(p) for p in found])

    return run


def _collect(node: Any, found: set[tuple[str, str, int]]) -> None:
    """Every problem of a report document (a dict with a code, a stream and an offset), "unchecked" ones aside."""
    if isinstance(node, dict):
        if isinstance(node.get("code"), str) and "stream" in node and isinstance(node.get("offset"), int):
            found.add((node["code"], node["stream"], node["offset"]))
        for key, value in node.items():
            if key != "unchecked":
                _collect(value, found)
    elif isinstance(node, list):
        for item in node:
            _collect(item, found)


def follow_judge(native: bool) -> Callable[[dict[str, Any], Path], Any]:
    def run(case: dict[str, Any], tmp: Path) -> list[list[Any]]:
        partition = _partition(case)
        trusted = _trusted(case, tmp)
        records = _records(case, "audit")
        facts = _facts(native).audit_facts([bytes.fromhex(r[3]) for r in records], trusted.audit_secret)
        checker = PartitionChecker("audit", partition, trusted, Policy())
        alerts = []
        for index, (record, fact) in enumerate(zip(records, facts, strict=True)):
            if index == case["resume_after"]:
                saved = json.loads(json.dumps(checker.state.to_json()))
                late = records[index - 1][1] + corpus()["tick_late_ms"]
                ticked = checker.tick(late, submissions_end=len(records) + 10)
                assert ticked, "the clock jump raises a time-based alert (the case's point)"
                assert not [a for a in ticked if a.kind in TAMPER], ticked
                checker = PartitionChecker("audit", partition, trusted, Policy(), ChainState.from_json(saved))
            alerts += checker.check(record[0], fact, record[1], record[1])
        return sorted([[a.kind.value, a.offset] for a in alerts if a.kind in TAMPER])

    return run


def rebuild_judge(native: bool) -> Callable[[dict[str, Any], Path], Any]:
    def run(case: dict[str, Any], _tmp: Path) -> dict[str, Any]:
        if native:
            ok, reason = native_status()
            assert ok, f"the native fold is not usable: {reason}"
        base = corpus()["bases"][case["base"]]
        config = audit_vectors.scheduler_config(base["scheduler_audit_keys"])

        def values(stream: str) -> list[tuple[int, bytes]]:
            return [(r[0], bytes.fromhex(r[3])) for r in _records(case, stream)]

        try:
            state = rebuild_state(
                config,
                _partition(case),
                values("journal"),
                values("audit"),
                checkpoint_values=values("checkpoints"),
                native=native,
            )
        except StateCorrupted as exc:
            return {"adopted": None, "stops": exc.kind}
        return {"adopted": state.audit_seq, "stops": None}

    return run


JUDGES: dict[str, tuple[str, Callable[[dict[str, Any], Path], Any]]] = {
    "verify_python": ("verify", verify_judge(native=False)),
    "verify_native": ("verify", verify_judge(native=True)),
    "follow_python": ("follow", follow_judge(native=False)),
    "follow_native": ("follow", follow_judge(native=True)),
    "rebuild_python": ("rebuild", rebuild_judge(native=False)),
    "rebuild_native": ("rebuild", rebuild_judge(native=True)),
}


def _expected(case: dict[str, Any], family: str) -> Any:
    expected = case["expect"][family]
    if family == "rebuild" and expected["stops"] is not None:
        return {"adopted": None, "stops": expected["stops"]}
    return expected


@pytest.mark.parametrize("judge", sorted(JUDGES))
@pytest.mark.parametrize("name", [case["name"] for case in _cases()])
def test_every_judge_reaches_the_cases_verdict(judge: str, name: str, tmp_path: Path) -> None:
    case = next(c for c in _cases() if c["name"] == name)
    family, run = JUDGES[judge]
    assert run(case, tmp_path) == _expected(case, family), case["about"]


def test_no_judge_skips_a_case(tmp_path: Path) -> None:
    """Every family of judges is here, every case states a verdict for each, and each judge runs every case."""
    assert {family for family, _ in JUDGES.values()} == {"verify", "follow", "rebuild"}
    assert {name.split("_")[1] for name in JUDGES} == {"python", "native"}
    ran = dict.fromkeys(JUDGES, 0)
    for case in _cases():
        assert set(case["expect"]) == {"verify", "follow", "rebuild"}, case["name"]
        for judge, (_, run) in JUDGES.items():
            run(case, tmp_path)
            ran[judge] += 1
    assert set(ran.values()) == {len(_cases())}, ran
    assert len(_cases()) >= 40


def test_the_corpus_is_what_the_generator_writes() -> None:
    assert VECTORS.read_text(encoding="utf-8") == audit_vectors.render(), "run `python -m tests.vectors.audit_vectors`"


def test_the_corpus_covers_every_code_the_judge_gives_and_its_alert() -> None:
    from bernstein.verifier import audit_chain

    expected = {code for case in _cases() for code, _, _ in case["expect"]["verify"]}
    assert set(audit_chain.CODES) <= expected, set(audit_chain.CODES) - expected
    assert set(corpus()["judgements"]) == set(audit_chain.CODES)
    kinds = {kind for case in _cases() for kind, _ in case["expect"]["follow"]}
    assert kinds == {entry["follow"] for entry in corpus()["judgements"].values()}
