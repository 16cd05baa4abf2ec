"""The verifier checks every declared evidence size against the stored blob (EVIDENCE_SIZE_MISMATCH, exit 2).

The scheduler enforces the per-run 64 MiB evidence cap on the sizes producers
declare (ActivitySubmission.v2, ComputerUseAction.v2); a producer that
under-declares gets past the cap, and the verifier names the lie. Runs are
written by the real scheduler core (``Writer``, tests/support/verdicts.py).
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

from bernstein.consumers.core.step import SchedulerCore
from bernstein.schemas import codec
from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import DirBlobStore
from bernstein.verifier.render import render_json, render_text
from bernstein.verifier.report import EXIT_MISMATCH, EXIT_VERIFIED, RunReport
from bernstein.verifier.stages import _action_size_findings
from tests.support.cores import sub
from tests.support.producers import encode_signed_submission
from tests.support.verdicts import RUN, VERIFIED, C, LegacyCodec, Writer, build, entries


def text(report: RunReport) -> str:
    out = io.StringIO()
    assert render_text(report.header, iter(report.stages), out) == report.exit_code
    return out.getvalue()


def document(report: RunReport) -> dict[str, object]:
    out = io.StringIO()
    render_json(report.header, iter(report.stages), out)
    parsed: dict[str, object] = json.loads(out.getvalue())
    return parsed


def sized_stage(w: Writer, stage_id: str, *, under_declare: int = 0) -> None:
    """A coding stage as ActivitySubmission.v2; its first observation declares ``under_declare`` bytes too few."""
    w.stage(RUN, stage_id, sized=True, under_declare=under_declare)


def test_honest_sizes_verify(tmp_path: Path) -> None:
    def script(w: Writer) -> None:
        sized_stage(w, "stage-0")
        sized_stage(w, "stage-1")
        w.close(RUN)

    built = build(tmp_path, script=script)
    assert {C.decode(C.decode(r.value or b"").record["payload"]).schema.name for _, r in entries(built)} == {
        codec.JOURNAL_ENTRY_V3  # signed ActivitySubmission.v3 (it declares sizes, as v2 did)
    }
    report = built.verify()
    assert report.exit_code == EXIT_VERIFIED
    assert all(not s.findings for s in report.stages)
    assert text(report).rstrip().endswith(VERIFIED)


def test_an_under_declared_blob_is_evidence_size_mismatch(tmp_path: Path) -> None:
    def script(w: Writer) -> None:
        sized_stage(w, "stage-0")
        sized_stage(w, "stage-1", under_declare=100)  # the lie the scheduler's cap cannot see
        w.close(RUN)

    built = build(tmp_path, script=script)
    report = built.verify()
    assert report.exit_code == EXIT_MISMATCH
    ok, lying = report.stages
    assert ok.ok and not ok.findings
    assert not lying.ok and len(lying.findings) == 1
    problem = lying.findings[0]
    blob = f"{RUN}/stage-1/a.py\n".encode() * 20
    offset = entries(built)[1][1].offset
    assert problem.to_json() == {
        "code": "EVIDENCE_SIZE_MISMATCH",
        "message": f"evidence bytes for 'src/stage-1/0.py' ({sha256_digest(blob)}) are {len(blob)} bytes, but "
        f"{len(blob) - 100} were declared: the producer misstated the size the run's evidence cap counts",
        "stream": "journal",
        "offset": offset,
        "seq": 1,
        "expected": str(len(blob) - 100),
        "recomputed": str(len(blob)),
    }
    assert lying.reason == problem.message
    stages = document(report)["stages"]
    assert isinstance(stages, list)
    assert [p["code"] for p in stages[1]["problems"]] == ["EVIDENCE_SIZE_MISMATCH"]
    assert "problems" not in stages[0]
    assert problem.message in text(report)  # the stage's line gives the reason


def accepting_v1(w: Writer) -> None:
    """An older scheduler run with --accept-undeclared-sizes (a migration from v1 producers): it journals the
    v1 entries a v1 submission got, which declare no sizes (``LegacyCodec``: today's scheduler refuses unsigned
    v1 input, so the test feeds signed submissions and the older codec drops what v1 entries did not hold)."""
    w.core = SchedulerCore(dataclasses.replace(w.core.config, accept_undeclared_sizes=True))
    w.core._codec = LegacyCodec(codec.JOURNAL_ENTRY)  # type: ignore[assignment]


def signed_v1(record: dict[str, Any]) -> bytes:
    """A submission whose entry an older scheduler journals as v1: it declared nothing, so the scheduler counted
    nothing (sizes 0 here, dropped from the entry by ``LegacyCodec``)."""
    for observation in record["observations"]:
        observation["size"] = 0
    return encode_signed_submission(record)


def test_a_v1_stage_reports_its_undeclared_bytes(tmp_path: Path) -> None:
    def script(w: Writer) -> None:
        accepting_v1(w)
        w.stage(RUN, "stage-0")  # journalled as a v1 entry: no sizes
        w.close(RUN)

    built = build(tmp_path, script=script)
    report = built.verify()
    assert report.exit_code == EXIT_VERIFIED
    size = 2 * len(f"{RUN}/stage-0/a.py\n".encode() * 20)
    assert (
        f"sizes not declared (a v1 submission): {size} bytes of evidence reattached, counted toward the run's "
        "evidence cap by the verifier (the scheduler could not)" in (report.stages[0].notes)
    )


def test_a_computer_use_action_that_lies_about_a_size_is_named(tmp_path: Path) -> None:
    store = DirBlobStore(tmp_path / "cas")
    shot, dom = store.put(b"a screenshot of 29 bytes long"), store.put(b"- heading")
    action = {
        "action_index": 3,
        "seq": 7,
        "screenshot_hash": shot,
        "screenshot_size": 29,
        "dom_digest": dom,
        "dom_size": 9,
    }
    assert _action_size_findings(store, ((40, action),)) == []
    assert _action_size_findings(store, ((40, {**action, "screenshot_size": 2}),))[0].to_json() == {
        "code": "EVIDENCE_SIZE_MISMATCH",
        "message": f"screenshot of action 3 ({shot}) are 29 bytes, but 2 were declared: the producer misstated the size "
        "the run's evidence cap counts",
        "stream": "journal",
        "offset": 40,
        "seq": 7,
        "expected": "2",
        "recomputed": "29",
    }
    [finding] = _action_size_findings(store, ((41, {**action, "dom_size": 10}),))
    assert (finding.code, finding.expected, finding.recomputed) == ("EVIDENCE_SIZE_MISMATCH", "10", "9")
    # a v1 entry declares nothing; a blob that does not reattach is the replay's to name, not a size lie
    v1 = {k: v for k, v in action.items() if not k.endswith("_size")}
    assert _action_size_findings(store, ((40, v1),)) == []
    assert _action_size_findings(store, ((40, {**action, "screenshot_hash": sha256_digest(b"gone")}),)) == []


MIB = 1024 * 1024


def test_v1_evidence_past_the_cap_is_named_by_the_verifier(tmp_path: Path) -> None:
    """undeclared (v1) evidence journalled under the migration flag still counts, at its real size."""
    big, more = b"a" * (40 * MIB), b"b" * (24 * MIB + 1)

    def submission(store: DirBlobStore, stage_id: str, pages: list[bytes], *, v1: bool) -> bytes:
        record = sub(run_id=RUN, stage_id=stage_id, pages=pages)
        store.put(record["artifact"])
        for page in pages:
            store.put(page)
        return signed_v1(record) if v1 else encode_signed_submission(record)

    def script(w: Writer) -> None:
        w.feed(RUN, submission(w.store, "stage-0", [big], v1=False))  # 40 MiB declared and counted by the scheduler
        accepting_v1(w)
        w.feed(RUN, submission(w.store, "stage-1", [big, b""], v1=True))  # the same blob again counts once (and 0 bytes)
        w.feed(RUN, submission(w.store, "stage-2", [big, more], v1=True))  # 24 MiB + 1 the scheduler could not count
        w.close(RUN)

    built = build(tmp_path, script=script)
    assert len(entries(built)) == 3  # all journalled: the scheduler's cap did not hold for the v1 inputs
    report = built.verify()
    assert report.exit_code == EXIT_MISMATCH
    first, again, crossing = report.stages
    assert first.ok and again.ok and not first.findings and not again.findings
    assert not crossing.ok
    total = 64 * MIB + 1
    assert [p.to_json() for p in crossing.findings] == [
        {
            "code": "EVIDENCE_CAP_EXCEEDED_IN_JOURNAL",
            "message": f"run {RUN!r} holds {total} bytes of evidence in 3 distinct blobs by this entry (declared sizes, "
            "and the stored sizes of blobs a v1 input did not declare); the per-run cap is 67108864",
            "stream": "journal",
            "offset": entries(built)[2][1].offset,
            "seq": 2,
            "expected": "67108864",
            "recomputed": str(total),
        }
    ]
    assert crossing.reason == crossing.findings[0].message
    assert [p["code"] for p in document(report)["stages"][2]["problems"]] == ["EVIDENCE_CAP_EXCEEDED_IN_JOURNAL"]  # type: ignore[index]


def test_v1_evidence_up_to_the_cap_verifies(tmp_path: Path) -> None:
    """Exactly the cap, v2 and v1 together, is not a problem (one byte more is, above)."""
    exact = b"c" * (64 * MIB)

    def script(w: Writer) -> None:
        accepting_v1(w)
        record = sub(run_id=RUN, stage_id="stage-0", pages=[exact])
        w.store.put(record["artifact"])
        w.store.put(exact)
        w.feed(RUN, signed_v1(record))
        w.close(RUN)

    report = build(tmp_path, script=script).verify()
    assert report.exit_code == EXIT_VERIFIED
    assert not report.stages[0].findings
