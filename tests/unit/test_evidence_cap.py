"""The per-run 64 MiB evidence cap, enforced by the scheduler in both cores.

ActivitySubmission.v2 observations and ComputerUseAction.v2 screenshots and DOM
snapshots declare each blob's byte size. A run's distinct blob digests may add
up to ``MAX_RUN_EVIDENCE_BYTES`` declared bytes; the input that would cross it
is refused with EVIDENCE_CAP_EXCEEDED, a negative or absurd size with
INVALID_EVIDENCE_SIZE. Every exact refusal record is checked on the Python
reference and on the native core (``Pair`` compares their bytes and states),
and the rebuild restores each run's total from the journal.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bernstein.consumers.core.model import OutputRecord, SchedulerConfig, Stream
from bernstein.consumers.core.rebuild import rebuild_state
from bernstein.schemas import codec
from bernstein.schemas.canonical import computer_use_genesis, evidence_set_hash, sha256_digest
from bernstein.schemas.errors import CanonicalizationError
from bernstein.schemas.records import MAX_RUN_EVIDENCE_BYTES
from tests.support.cores import Pair, cu_action, make_config, sub
from tests.support.producers import producer_signer, signed_submission

MIB = 1024 * 1024
CAP = MAX_RUN_EVIDENCE_BYTES


def test_the_cap_is_64_mib() -> None:
    assert CAP == 64 * MIB == 67_108_864


def blob(name: str) -> str:
    return sha256_digest(name.encode())


def sized_sub(stage_id: str, blobs: list[tuple[str, int]], *, run_id: str = "run-1", **changes: Any) -> bytes:
    """A signed ActivitySubmission.v3 whose observations declare ``blobs`` (digest, size).

    A size beyond 2**53 - 1 has no canonical JSON form, so no statement carrying it can be signed:
    such a record goes out with an all-zero signature.
    """
    observations: list[dict[str, Any]] = [
        {"kind": "page", "ref": f"https://example.test/{i}", "content_hash": digest, "size": size}
        for i, (digest, size) in enumerate(blobs)
    ]
    record = sub(run_id=run_id, stage_id=stage_id)
    record.update(observations=observations, submission_id=f"sub-{run_id}-{stage_id}")
    if "evidence_set_hash" not in changes:
        record["evidence_set_hash"] = evidence_set_hash(digest for digest, _ in blobs)
    record.update(changes)
    try:
        return codec.encode(codec.ACTIVITY_SUBMISSION_V3, signed_submission(record))
    except CanonicalizationError:
        key_id = producer_signer(record["producer"]["id"]).key_id
        return codec.encode(codec.ACTIVITY_SUBMISSION_V3, {**record, "producer_key_id": key_id, "producer_signature": bytes(64)})


def refusal_of(outputs: list[OutputRecord]) -> dict[str, Any]:
    assert [o.stream for o in outputs] == [Stream.REFUSALS, Stream.AUDIT]
    return codec.decode(outputs[0].value).record


def journal_payload(outputs: list[OutputRecord]) -> codec.Decoded:
    assert outputs[0].stream is Stream.JOURNAL
    return codec.decode(codec.decode(outputs[0].value).record["payload"])


def test_a_sized_submission_is_journalled_with_its_sizes_and_counted() -> None:
    pair = Pair()
    outs = pair.feed(sized_sub("s0", [(blob("a"), 10), (blob("b"), 20), (blob("a"), 10)]))
    entry = journal_payload(outs)
    assert entry.schema.name == codec.JOURNAL_ENTRY_V3
    assert [(o["content_hash"], o["size"]) for o in entry.record["observations"]] == [
        (blob("a"), 10),
        (blob("b"), 20),
        (blob("a"), 10),
    ]
    run = pair.py_state.runs["run-1"]
    assert (run.evidence_bytes, run.blobs) == (30, {blob("a"), blob("b")})  # a repeated digest counts once
    assert pair.native.fallbacks == 0  # the native core handles v2 submissions itself


def migrating() -> SchedulerConfig:
    """A scheduler run with --accept-undeclared-sizes."""
    return dataclasses.replace(make_config(), accept_undeclared_sizes=True)


def v1_sub(stage_id: str, pages: list[bytes], **changes: Any) -> bytes:
    """An ActivitySubmission.v1: its observations declare no sizes."""
    record = sub(stage_id=stage_id, pages=pages, **changes)
    for observation in record["observations"]:
        del observation["size"]
    return codec.encode(codec.ACTIVITY_SUBMISSION, record)


def test_a_v1_submission_is_refused_unsigned_before_its_sizes_matter() -> None:
    """Producer signatures replace EVIDENCE_SIZES_UNDECLARED for ActivitySubmission.v1: every v1 (and v2)
    submission carries no producer signature and is refused as SUBMISSION_UNSIGNED, with or without
    observations and with or without --accept-undeclared-sizes (which now admits only ComputerUseAction.v1)."""
    for config in (make_config(), migrating()):
        pair = Pair(config)
        for pages in ([b"page one", b"page two", b"page three"], []):
            refusal = refusal_of(pair.feed(v1_sub(f"old-{len(pages)}", pages)))
            assert {k: refusal[k] for k in ("exception", "code", "field", "declared", "recomputed")} == {
                "exception": "ActivityRejected",
                "code": "SUBMISSION_UNSIGNED",
                "field": "producer_signature",
                "declared": "ActivitySubmission.v1",
                "recomputed": "ActivitySubmission.v3",
            }
        assert "run-1" not in pair.py_state.runs  # nothing remembered
        assert pair.native.fallbacks == 0


def test_the_migration_flag_reaches_the_native_core() -> None:
    """Both cores read config.accept_undeclared_sizes: a v2 submission is capped under it as before."""
    pair = Pair(migrating())
    pair.feed(sized_sub("s1", [(blob("a"), CAP)]))
    assert refusal_of(pair.feed(sized_sub("s2", [(blob("b"), 1)])))["code"] == "EVIDENCE_CAP_EXCEEDED"
    assert pair.native.fallbacks == 0


def test_crossing_the_cap_is_refused_with_the_totals_in_both_cores() -> None:
    pair = Pair()
    pair.feed(sized_sub("s0", [(blob("big"), 40 * MIB)]))
    outs = pair.feed(sized_sub("s1", [(blob("big"), 40 * MIB), (blob("more"), 20 * MIB), (blob("last"), 4 * MIB + 1)]))
    refusal = refusal_of(outs)
    total = 64 * MIB + 1
    assert {k: refusal[k] for k in ("exception", "code", "message", "field", "declared", "recomputed", "stage_id")} == {
        "exception": "ActivityRejected",
        "code": "EVIDENCE_CAP_EXCEEDED",
        "message": f"run 'run-1' would hold {total} bytes of evidence ({40 * MIB} already, {24 * MIB + 1} in 2 new blobs); "
        f"the per-run cap is {CAP}",
        "field": "evidence",
        "declared": str(total),
        "recomputed": str(CAP),
        "stage_id": "s1",
    }
    run = pair.py_state.runs["run-1"]
    assert (run.evidence_bytes, run.entry_count, "s1" in run.stages) == (40 * MIB, 1, False)  # nothing changed
    assert pair.native.fallbacks == 0


def test_exactly_the_cap_is_accepted_and_one_byte_more_is_not() -> None:
    pair = Pair()
    pair.feed(sized_sub("s0", [(blob("a"), CAP - 1)]))
    outs = pair.feed(sized_sub("s1", [(blob("a"), CAP - 1), (blob("b"), 1)]))  # reaches the cap exactly
    assert outs[0].stream is Stream.JOURNAL
    assert pair.py_state.runs["run-1"].evidence_bytes == CAP
    # frames already counted cost nothing more, even at the cap (and an empty blob costs nothing)
    outs = pair.feed(sized_sub("s2", [(blob("a"), CAP - 1), (blob("b"), 1), (blob("empty"), 0)]))
    assert outs[0].stream is Stream.JOURNAL
    assert pair.py_state.runs["run-1"].evidence_bytes == CAP
    refusal = refusal_of(pair.feed(sized_sub("s4", [(blob("d"), 1)])))
    assert (refusal["code"], refusal["declared"], refusal["recomputed"]) == ("EVIDENCE_CAP_EXCEEDED", str(CAP + 1), str(CAP))
    # another run has a cap of its own
    other = pair.feed(sized_sub("s4", [(blob("d"), 1)], run_id="run-2"), key=b"run-2")
    assert other[0].stream is Stream.JOURNAL


def test_a_negative_or_absurd_size_is_refused_in_both_cores() -> None:
    pair = Pair()
    refusal = refusal_of(pair.feed(sized_sub("s0", [(blob("a"), 5), (blob("b"), -1)])))
    assert {k: refusal[k] for k in ("code", "message", "field", "declared", "recomputed")} == {
        "code": "INVALID_EVIDENCE_SIZE",
        "message": f"observations[1].size must be 0 to {CAP} bytes (the per-run evidence cap), got -1",
        "field": "observations[1].size",
        "declared": "-1",
        "recomputed": str(CAP),
    }
    refusal = refusal_of(pair.feed(sized_sub("s0", [(blob("a"), 2**53 - 1)])))
    assert (refusal["code"], refusal["field"], refusal["declared"]) == (
        "INVALID_EVIDENCE_SIZE",
        "observations[0].size",
        str(2**53 - 1),
    )
    # beyond 2**53 - 1 the statement has no canonical JSON form: no producer signature can cover it
    refusal = refusal_of(pair.feed(sized_sub("s0", [(blob("a"), 2**62)])))
    assert (refusal["code"], refusal["field"]) == ("SUBMISSION_SIGNATURE_INVALID", "producer_signature")
    refusal = refusal_of(pair.feed(sized_sub("s0", [(blob("a"), CAP + 1)])))
    assert refusal["code"] == "INVALID_EVIDENCE_SIZE"
    # the size is checked with its observation: a malformed digest before it wins
    refusal = refusal_of(pair.feed(sized_sub("s0", [("sha256:nope", -1)], evidence_set_hash=blob("any"))))
    assert refusal["code"] == "MALFORMED_DIGEST"
    assert "run-1" not in pair.py_state.runs


def test_the_rebuild_restores_each_runs_total_from_the_journal() -> None:
    migrating_config = dataclasses.replace(make_config(seal_every=2), accept_undeclared_sizes=True)
    pair = Pair(migrating_config)
    pair.feed(sized_sub("s0", [(blob("a"), 30 * MIB), (blob("b"), 1000)]))
    pair.feed(sized_sub("s1", [(blob("a"), 30 * MIB), (blob("c"), 30 * MIB)]))
    pair.feed(sized_sub("x0", [(blob("a"), 7)], run_id="run-2"), key=b"run-2")
    journal = [o.value for o in pair.outputs if o.stream is Stream.JOURNAL]
    audit = [o.value for o in pair.outputs if o.stream is Stream.AUDIT]
    rebuilt = rebuild_state(pair.config, pair.partition, journal, audit)
    assert rebuilt == pair.py_state
    assert (rebuilt.runs["run-1"].evidence_bytes, rebuilt.runs["run-1"].blobs) == (
        60 * MIB + 1000,
        {blob("a"), blob("b"), blob("c")},
    )
    assert (rebuilt.runs["run-2"].evidence_bytes, rebuilt.runs["run-2"].blobs) == (7, {blob("a")})
    # the restarted scheduler refuses what the live one refuses, with the same record
    before = pair.feed(sized_sub("s2", [(blob("d"), 4 * MIB)]), check_state=True)
    restarted = Pair(migrating_config)
    restarted.py_state = rebuilt
    restarted.state = restarted.native.load(rebuild_state(pair.config, pair.partition, journal, audit))
    restarted.offset = pair.offset - 1
    after = restarted.feed(sized_sub("s2", [(blob("d"), 4 * MIB)]))
    assert refusal_of(before)["code"] == "EVIDENCE_CAP_EXCEEDED"
    assert [o.value for o in after] == [o.value for o in before]


# ---------------------------------------------------------------------------
# computer-use actions (the reference handles them; the native core falls back)
# ---------------------------------------------------------------------------


def cu_action_v2(
    run_id: str, session_id: str, index: int, prev_anchor: str, *, screenshot_size: int, dom_size: int, shot: bytes | None = None
) -> tuple[bytes, str]:
    """A ComputerUseAction.v2 the reference accepts after ``prev_anchor``, declaring the two sizes."""
    return cu_action(run_id, session_id, index, prev_anchor, shot=shot, sizes=(screenshot_size, dom_size))


def test_actions_declare_sizes_duplicate_frames_count_once_and_the_cap_refuses() -> None:
    pair = Pair()
    key = b"run-1"
    head = computer_use_genesis("run-1", "browser-0")
    first, head = cu_action_v2("run-1", "browser-0", 0, head, screenshot_size=30 * MIB, dom_size=1000, shot=b"same frame")
    outs = pair.feed(first, key=key)
    entry = journal_payload(outs)
    assert entry.schema.name == codec.COMPUTER_USE_ENTRY_V2
    assert (entry.record["screenshot_size"], entry.record["dom_size"]) == (30 * MIB, 1000)
    # the same screenshot again (an unchanged page): only its new DOM snapshot counts
    second, head = cu_action_v2("run-1", "browser-0", 1, head, screenshot_size=30 * MIB, dom_size=2000, shot=b"same frame")
    assert pair.feed(second, key=key)[0].stream is Stream.JOURNAL
    assert pair.py_state.runs["run-1"].evidence_bytes == 30 * MIB + 3000
    # a submission's observation counts against the same total
    pair.feed(sized_sub("s0", [(blob("a"), 30 * MIB)]))
    third, _ = cu_action_v2("run-1", "browser-0", 2, head, screenshot_size=4 * MIB, dom_size=3000)
    refusal = refusal_of(pair.feed(third, key=key))
    total = 60 * MIB + 3000 + 4 * MIB + 3000
    assert {k: refusal[k] for k in ("code", "message", "field", "declared", "recomputed", "stage_id", "kind")} == {
        "code": "EVIDENCE_CAP_EXCEEDED",
        "message": f"run 'run-1' would hold {total} bytes of evidence ({60 * MIB + 3000} already, {4 * MIB + 3000} in 2 new "
        f"blobs); the per-run cap is {CAP}",
        "field": "evidence",
        "declared": str(total),
        "recomputed": str(CAP),
        "stage_id": "browser-0",
        "kind": "browser",
    }
    session = pair.py_state.runs["run-1"].sessions["browser-0"]
    assert (session.next_index, session.last_anchor) == (2, head)  # the refused action left the session as it was


def test_a_v1_action_is_refused_unless_undeclared_sizes_are_accepted() -> None:
    """A ComputerUseAction.v1 always names a screenshot and a DOM snapshot, and declares neither size."""
    pair = Pair()
    genesis = computer_use_genesis("run-1", "browser-0")
    value, anchor = cu_action("run-1", "browser-0", 0, genesis, v1=True)
    refusal = refusal_of(pair.feed(value))
    assert {k: refusal[k] for k in ("exception", "code", "message", "field", "declared", "recomputed", "stage_id", "kind")} == {
        "exception": "ActivityRejected",
        "code": "EVIDENCE_SIZES_UNDECLARED",
        "message": "this ComputerUseAction.v1 carries a screenshot and a DOM snapshot without byte sizes, so the per-run "
        f"evidence cap of {CAP} bytes cannot count them; publish ComputerUseAction.v2 with each blob's size",
        "field": "evidence",
        "declared": "ComputerUseAction.v1",
        "recomputed": "ComputerUseAction.v2",
        "stage_id": "browser-0",
        "kind": "browser",
    }
    assert "run-1" not in pair.py_state.runs
    # the same action as v2 is journalled; under the migration flag the v1 one is too, counting nothing
    assert pair.feed(cu_action("run-1", "browser-0", 0, genesis)[0])[0].stream is Stream.JOURNAL
    migrated = Pair(migrating())
    outs = migrated.feed(value)
    assert journal_payload(outs).schema.name == codec.COMPUTER_USE_ENTRY
    run = migrated.py_state.runs["run-1"]
    assert (run.sessions["browser-0"].last_anchor, run.evidence_bytes, run.blobs) == (anchor, 0, set())


def test_an_action_with_a_negative_size_is_refused() -> None:
    pair = Pair()
    value, _ = cu_action_v2("run-1", "browser-0", 0, computer_use_genesis("run-1", "browser-0"), screenshot_size=10, dom_size=-5)
    refusal = refusal_of(pair.feed(value))
    assert {k: refusal[k] for k in ("code", "message", "field", "declared", "recomputed")} == {
        "code": "INVALID_EVIDENCE_SIZE",
        "message": f"dom_size must be 0 to {CAP} bytes (the per-run evidence cap), got -5",
        "field": "dom_size",
        "declared": "-5",
        "recomputed": str(CAP),
    }


def test_the_rebuild_counts_actions_too() -> None:
    pair = Pair()
    head = computer_use_genesis("run-1", "browser-0")
    for index in range(3):
        value, head = cu_action_v2("run-1", "browser-0", index, head, screenshot_size=100 + index, dom_size=10, shot=b"frame")
        pair.feed(value)
    journal = [o.value for o in pair.outputs if o.stream is Stream.JOURNAL]
    audit = [o.value for o in pair.outputs if o.stream is Stream.AUDIT]
    rebuilt = rebuild_state(pair.config, pair.partition, journal, audit)
    assert rebuilt == pair.py_state
    # one screenshot (first declared size wins), one DOM snapshot digest per index
    assert rebuilt.runs["run-1"].evidence_bytes == 100 + 3 * 10  # the DOM digests of actions 0, 1, 2 differ


# ---------------------------------------------------------------------------
# the Python SDK declares the real sizes
# ---------------------------------------------------------------------------


def test_the_sdk_declares_sizes_and_writes_v1_only_when_a_size_is_unknown() -> None:
    from bernstein.producers.activity import ActivityResult, observe
    from bernstein.producers.emitter import encode_submission, submission_record
    from bernstein.schemas.records import Observation

    page = observe("page", "https://example.test/a", b"twelve bytes")
    assert page.size == 12
    result = ActivityResult.build("coding", b"{}", [page])
    record = submission_record(
        result, submission_id="s", run_id="run-1", stage_id="s0", role="developer", producer_id="p", sdk="t"
    )
    value = encode_submission(result, record)
    decoded = codec.decode(value)
    assert decoded.schema.name == codec.ACTIVITY_SUBMISSION_V2
    assert decoded.record["observations"][0]["size"] == 12
    # an Observation built by hand without a size: the submission stays v1 (nothing declared, nothing counted)
    legacy = ActivityResult.build("coding", b"{}", [page, Observation("page", "https://example.test/b", blob("b"))])
    record = submission_record(
        legacy, submission_id="s", run_id="run-1", stage_id="s0", role="developer", producer_id="p", sdk="t"
    )
    assert codec.decode(encode_submission(legacy, record)).schema.name == codec.ACTIVITY_SUBMISSION


# ---------------------------------------------------------------------------
# both cores agree on any sequence of sized submissions
# ---------------------------------------------------------------------------

_SIZES = st.sampled_from([0, 1, 7, MIB, 20 * MIB, 40 * MIB, CAP - 1, CAP, CAP + 1, -1, -(2**63), 2**63 - 1])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["run-1", "run-2"]),
            st.lists(st.tuples(st.sampled_from("abcdef"), _SIZES), max_size=5),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_both_cores_agree_on_random_sized_submissions(steps: list[tuple[str, list[tuple[str, int]]]]) -> None:
    pair = Pair()
    for index, (run_id, blobs) in enumerate(steps):
        value = sized_sub(f"s{index}", [(blob(name), size) for name, size in blobs], run_id=run_id)
        pair.feed(value, key=run_id.encode())  # outputs and states compared byte for byte
    for run in pair.py_state.runs.values():
        assert 0 <= run.evidence_bytes <= CAP


def test_a_browser_result_counts_only_frames_its_actions_did_not() -> None:
    """The native core hands browser results to the reference: its lazy state view reads and extends the counted set."""
    from tests.support.cores import browser_artifact

    pair = Pair()
    head = computer_use_genesis("run-1", "browser-0")
    value, head = cu_action_v2("run-1", "browser-0", 0, head, screenshot_size=1000, dom_size=100, shot=b"frame")
    pair.feed(value)
    shot, dom = sha256_digest(b"frame"), sha256_digest(b"dom 0")
    art = browser_artifact("run-1", "browser-0", head, 1)
    result = sized_sub("browser-0", [(shot, 1000), (dom, 100), (blob("final"), 50), (blob("log"), 7)], artifact=art)
    record = codec.decode(result).record
    record.update(role="navigator", kind="browser", artifact_hash=sha256_digest(art))
    before = pair.native.fallbacks
    outs = pair.feed(codec.encode(codec.ACTIVITY_SUBMISSION_V3, signed_submission(record)))
    assert outs[0].stream is Stream.JOURNAL and pair.native.fallbacks == before + 1
    run = pair.py_state.runs["run-1"]
    assert (run.evidence_bytes, run.blobs) == (1157, {shot, dom, blob("final"), blob("log")})
    # and the native core's own state says the same (Pair compared it), so a native step after it agrees
    refusal = refusal_of(pair.feed(sized_sub("s1", [(shot, 1000), (blob("big"), CAP - 1157 + 1)])))
    assert (refusal["code"], refusal["declared"]) == ("EVIDENCE_CAP_EXCEEDED", str(CAP + 1))
    assert pair.native.fallbacks == before + 1


def test_the_scheduler_command_takes_accept_undeclared_sizes(tmp_path: Path) -> None:
    """`bernstein scheduler run --accept-undeclared-sizes` reaches SchedulerConfig; off by default."""
    from bernstein.cli import build_parser
    from bernstein.commands.scheduler import scheduler_config
    from bernstein.substrate.keys import init_keys

    keys = init_keys(tmp_path / "keys")
    roles = Path(__file__).resolve().parents[2] / "config" / "roles.toml"
    assert scheduler_config(keys, roles, 1000).accept_undeclared_sizes is False
    assert scheduler_config(keys, roles, 1000, accept_undeclared_sizes=True).accept_undeclared_sizes is True
    parser = build_parser()
    assert parser.parse_args(["scheduler", "run"]).accept_undeclared_sizes is False
    assert parser.parse_args(["scheduler", "run", "--accept-undeclared-sizes"]).accept_undeclared_sizes is True
