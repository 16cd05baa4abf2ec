"""The restart fold through the native extension (``FoldReader``, native/src/fold.rs) and in Python.

``rebuild_state`` reads each record's facts from the extension when it is usable and from the
Python fact functions otherwise (and for every record the extension hands back). These tests
hold the two paths to one result: every existing rebuild test runs through both; the facts of
every record (valid, legacy layouts, mutated, forged) are equal where the extension gives one;
and folds of generated histories with tampering give the same state bytes (dict orders
included), the same ``Skipped`` reports and the same ``StateCorrupted``.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from bernstein.consumers.core import rebuild
from bernstein.consumers.core.model import OutputRecord, SchedulerConfig, SchedulerState, Stream
from bernstein.consumers.core.native import NativeUnavailable, native_status
from bernstein.consumers.core.rebuild import Skipped, StateCorrupted, rebuild_state
from bernstein.consumers.core.snapshot import state_bytes
from bernstein.consumers.core.step import SchedulerCore, initial_state
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    audit_mac,
    audit_record_mac,
    checkpoint_signing_input,
    computer_use_genesis,
    journal_entry_hash,
    seal_signing_input,
)
from bernstein.substrate.keys import Ed25519Signer
from tests.support import fuzz
from tests.support.core_driver import rotated_driver
from tests.support.cores import AUDIT_KEY, PARTITION, Pair, browser_artifact, cu_action, enc_close, enc_sub, make_config

# These imports are of other modules' TESTS, not of shared helpers (those are in tests/support/): the rebuild tests
# of these modules are collected a second time here, once per fold path (python, native; ``fold_path`` below), so
# every rebuild case they hold is also a Python-vs-Rust comparison of the restart fold. Importing the modules
# themselves is the simplest honest way to do that: no copy of a test to keep in step, and a rebuild test added to
# one of them is picked up by the scan below. (Their module objects are imported a second time under these names;
# nothing depends on sharing them with pytest's.)
from tests.unit import test_checkpoints as _checkpoints_tests
from tests.unit import test_evidence_cap as _evidence_cap_tests
from tests.unit import test_scheduler_core as _scheduler_core_tests
from tests.unit import test_snapshot as _snapshot_tests
from tests.unit.differential import test_native_core as _native_core_tests

NATIVE_OK, NATIVE_REASON = native_status()
needs_native = pytest.mark.skipif(not NATIVE_OK, reason=NATIVE_REASON)

# ---------------------------------------------------------------------------
# every existing rebuild test, through both paths
# ---------------------------------------------------------------------------

_REBUILD_TEST_MODULES = (_scheduler_core_tests, _checkpoints_tests, _evidence_cap_tests, _snapshot_tests, _native_core_tests)


def _functions(path: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    return {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def _rebuild_tests(module: Any) -> list[str]:
    """The test functions of ``module`` that call ``rebuild_state``, directly or through a helper of the module or of
    the tests/support modules it imports helpers from (``Driver.rebuilt`` is in tests/support/core_driver.py)."""
    functions: dict[str, ast.FunctionDef] = {}
    for node in ast.parse(Path(module.__file__).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.support."):
            functions.update(_functions(importlib.import_module(str(node.module)).__file__ or ""))
    functions.update(_functions(module.__file__))

    def calls(node: ast.AST, names: set[str]) -> bool:
        return any(
            (isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr in names)
            for n in ast.walk(node)
        )

    helpers = {"rebuild_state"}
    grown = True
    while grown:
        grown = False
        for name, node in functions.items():
            if name not in helpers and not name.startswith("test_") and calls(node, helpers):
                helpers.add(name)
                grown = True
    return [name for name, node in functions.items() if name.startswith("test_") and calls(node, helpers)]


REUSED: list[str] = []
for _module in _REBUILD_TEST_MODULES:
    for _name in _rebuild_tests(_module):
        _alias = f"test_{_module.__name__.rsplit('.', 1)[-1].removeprefix('test_')}__{_name.removeprefix('test_')}"
        globals()[_alias] = getattr(_module, _name)  # collected again here, once per fold path (fold_path below)
        REUSED.append(_alias)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The reused rebuild tests run once per fold path; this module's own tests choose theirs."""
    paths = ["python", "native"] if metafunc.definition.name in REUSED else ["own"]
    metafunc.parametrize("fold_path", paths, indirect=True)


@pytest.fixture(autouse=True)
def fold_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Forces the fold path of every ``rebuild_state`` call that does not name one (``native=None``)."""
    path = str(request.param)
    if path == "own":
        yield path
        return
    if path == "native" and not NATIVE_OK:
        pytest.skip(NATIVE_REASON)
    original = rebuild._fold_reader
    readers: list[Any] = []

    def forced(config: SchedulerConfig, native: bool | None) -> Any:
        if native is not None:
            return original(config, native)
        reader = original(config, path == "native")
        readers.append(reader)
        return reader

    monkeypatch.setattr(rebuild, "_fold_reader", forced)
    yield path
    assert readers, "the reused test did not call rebuild_state"
    assert all((reader is not None) == (path == "native") for reader in readers)


def test_the_reused_rebuild_tests_are_the_known_ones() -> None:
    """The scan above finds the rebuild tests of these modules (and more when they are added)."""
    expected = {
        "test_scheduler_core__rebuild_from_outputs_equals_the_live_state",
        "test_scheduler_core__a_crash_after_any_record_resumes_to_byte_identical_outputs",
        "test_scheduler_core__rebuild_refuses_outputs_that_do_not_recompute",
        "test_scheduler_core__the_scheduler_restarts_across_a_rotation",
        "test_scheduler_core__rebuild_errors_name_the_topic_partition_and_offset_and_what_to_do",
        "test_scheduler_core__rebuild_checks_every_seals_signature",
        "test_scheduler_core__a_forged_journal_entry_is_not_adopted_and_the_genuine_submission_is_journalled",
        "test_scheduler_core__garbage_and_forgeries_after_the_audit_and_checkpoint_chains_are_named_and_the_rebuild_goes_on",
        "test_checkpoints__the_rebuild_restores_the_checkpoint_chain_and_the_restarted_core_continues_it",
        "test_checkpoints__the_rebuild_reads_v1_audit_records_too",
        "test_checkpoints__the_rebuild_refuses_a_checkpoint_it_cannot_vouch_for",
        "test_evidence_cap__the_rebuild_restores_each_runs_total_from_the_journal",
        "test_evidence_cap__the_rebuild_counts_actions_too",
        "test_snapshot__state_from_a_snapshot_plus_the_tail_equals_the_full_fold_byte_for_byte",
        "test_native_core__resuming_from_a_rebuilt_state_after_any_record",
    }
    assert expected <= set(REUSED)


# ---------------------------------------------------------------------------
# a history with every record shape the step writes
# ---------------------------------------------------------------------------


def _config() -> SchedulerConfig:
    # small cadences: non-final seals and periodic checkpoints; v1 computer-use actions accepted (ComputerUseEntry.v1)
    return dataclasses.replace(make_config(seal_every=3), checkpoint_every=4, accept_undeclared_sizes=True)


@dataclasses.dataclass
class History:
    config: SchedulerConfig
    state: SchedulerState
    journal: list[bytes]
    audit: list[bytes]
    checkpoints: list[bytes]


def build_history(config: SchedulerConfig | None = None, runs: int = 3) -> History:
    """Accepted, refused and dead-lettered inputs over ``runs`` runs, with computer-use sessions, browser
    results, periodic and final seals and checkpoints, stepped by the Python reference."""
    config = config or _config()
    core = SchedulerCore(config)
    state = initial_state(config, PARTITION)
    outputs: list[OutputRecord] = []
    pair = Pair(config)  # only for its record() numbering

    def feed(value: bytes | None, run: str) -> None:
        nonlocal state
        state, out = core.step(state, pair.record(value, run.encode()))
        outputs.extend(out)

    for r in range(runs):
        run = f"run-{r}"
        for i in range(4):
            feed(enc_sub(run_id=run, stage_id=f"s{i}", pages=[f"p{r}.{i}".encode(), b"shared"]), run)
        feed(enc_sub(run_id=run, stage_id="empty", pages=[]), run)
        feed(enc_sub(run_id=run, stage_id="s0", pages=[b"again"]), run)  # a repeated submission: refused
        anchor = computer_use_genesis(run, "browser-0")
        for index in range(3):
            value, anchor = cu_action(run, "browser-0", index, anchor, v1=index == 1)
            feed(value, run)
        art = browser_artifact(run, "browser-0", anchor, 3)
        feed(enc_sub(run_id=run, role="navigator", kind="browser", stage_id="browser-0", artifact=art, pages=[b"shot"]), run)
        feed(b"\x00garbage", run)  # dead-lettered
        if r % 2 == 0:
            feed(enc_close(run), run)
            feed(enc_sub(run_id=run, stage_id="late", pages=[b"late"]), run)  # run closed: refused
    by_stream = {s: [o.value for o in outputs if o.stream is s] for s in (Stream.JOURNAL, Stream.AUDIT, Stream.CHECKPOINTS)}
    return History(config, state, by_stream[Stream.JOURNAL], by_stream[Stream.AUDIT], by_stream[Stream.CHECKPOINTS])


_HISTORY: History | None = None


def history() -> History:
    global _HISTORY
    if _HISTORY is None:
        _HISTORY = build_history()
    return _HISTORY


def layouts(values: list[bytes]) -> set[str]:
    names = set()
    for value in values:
        record = codec.decode(value).record
        names.add(codec.decode(value).schema.name)
        names.add(codec.decode(record["payload"]).schema.name)
    return names


def test_the_history_holds_every_layout_the_step_writes() -> None:
    h = history()
    assert layouts(h.journal) == {
        codec.JOURNAL_RECORD,
        codec.SEAL_RECORD,
        codec.JOURNAL_ENTRY_V3,
        codec.COMPUTER_USE_ENTRY,
        codec.COMPUTER_USE_ENTRY_V2,
        codec.RUN_SEAL_V2,
    }
    assert layouts(h.audit) == {codec.AUDIT_RECORD_V2, codec.AUDIT_ENTRY, codec.AUDIT_ENTRY_V2}
    assert layouts(h.checkpoints) == {codec.CHECKPOINT_RECORD, codec.PARTITION_CHECKPOINT_V2}
    assert len(h.checkpoints) >= 4
    seals = [
        codec.decode(codec.decode(v).record["payload"]).record
        for v in h.journal
        if codec.decode(v).schema.name == codec.SEAL_RECORD
    ]
    assert {seal["final"] for seal in seals} == {True, False}
    assert rebuild_state(h.config, PARTITION, h.journal, h.audit, checkpoint_values=h.checkpoints, native=False) == h.state


# ---------------------------------------------------------------------------
# record by record: the extension's facts are the Python functions' facts
# ---------------------------------------------------------------------------

_FACTS: dict[str, tuple[str, Callable[..., Any]]] = {
    "journal": ("journal", rebuild._journal_fact),
    "audit": ("audit", rebuild._audit_fact),
    "checkpoints": ("checkpoints", rebuild._checkpoint_fact),
}


def native_and_python(topic: str, config: SchedulerConfig, values: list[Any]) -> list[tuple[Any, Any]]:
    """(native fact or None, Python fact) of each value."""
    reader = rebuild._fold_reader(config, True)
    method, python = _FACTS[topic]
    natives = getattr(reader, method)(values)
    c = codec.default_codec()
    out = []
    for value, native in zip(values, natives, strict=True):
        try:
            expected: Any = python(c, config, value)
        except Exception as exc:  # noqa: BLE001 - a value the reference cannot even read (not bytes)
            expected = exc
        out.append((native, expected))
    return out


def assert_same_or_handed_back(pairs: list[tuple[Any, Any]]) -> None:
    for native, python in pairs:
        assert native is None or native == python


@needs_native
def test_every_record_of_a_history_gets_its_facts_from_the_extension() -> None:
    h = history()
    for topic, values in (("journal", h.journal), ("audit", h.audit), ("checkpoints", h.checkpoints)):
        pairs = native_and_python(topic, h.config, values)
        assert [native for native, _ in pairs if native is None] == []
        assert [native for native, _ in pairs] == [python for _, python in pairs]


def _reencode(value: bytes, envelope_schema: str, payload_schema: str, drop: tuple[str, ...] = (), **changes: Any) -> bytes:
    """``value`` with its payload re-encoded as ``payload_schema`` (``drop`` removed, ``changes`` applied)."""
    envelope = codec.decode(value).record
    payload = {k: v for k, v in codec.decode(envelope["payload"]).record.items() if k not in drop}
    payload.update(changes)
    return codec.encode(envelope_schema, {**envelope, "payload": codec.encode(payload_schema, payload)})


def legacy_journal_records(h: History) -> list[bytes]:
    """Journal records of the layouts the step no longer writes (JournalEntry v1 and v2, RunSeal v1, a RunSeal.v2
    closed by nobody), and entries whose entry_type their layout does not carry."""
    entries = [v for v in h.journal if codec.decode(v).schema.name == codec.JOURNAL_RECORD]
    activity = next(v for v in entries if codec.decode(codec.decode(v).record["payload"]).schema.name == codec.JOURNAL_ENTRY_V3)
    action = next(
        v for v in entries if codec.decode(codec.decode(v).record["payload"]).schema.name == codec.COMPUTER_USE_ENTRY_V2
    )
    seal = next(v for v in h.journal if codec.decode(v).schema.name == codec.SEAL_RECORD)
    signed = ("producer_key_id", "producer_signature")
    v2 = _reencode(activity, codec.JOURNAL_RECORD, codec.JOURNAL_ENTRY_V2, signed)
    v1_payload = codec.decode(codec.decode(v2).record["payload"]).record
    v1 = _reencode(
        v2,
        codec.JOURNAL_RECORD,
        codec.JOURNAL_ENTRY,
        observations=[{k: o[k] for k in ("kind", "ref", "content_hash")} for o in v1_payload["observations"]],
    )
    seal_record = codec.decode(seal).record
    seal_payload = codec.decode(seal_record["payload"]).record
    seal_v1_payload = codec.encode(codec.RUN_SEAL, {k: v for k, v in seal_payload.items() if k != "closed_by"})
    seal_v1 = codec.encode(
        codec.SEAL_RECORD,
        {**seal_record, "payload": seal_v1_payload, "signature": h.config.signer.sign(seal_signing_input(seal_v1_payload))},
    )
    unclosed_payload = codec.encode(codec.RUN_SEAL_V2, {**seal_payload, "closed_by": None, "final": True})
    unclosed = codec.encode(
        codec.SEAL_RECORD,
        {**seal_record, "payload": unclosed_payload, "signature": h.config.signer.sign(seal_signing_input(unclosed_payload))},
    )
    odd_activity = _reencode(activity, codec.JOURNAL_RECORD, codec.JOURNAL_ENTRY_V3, entry_type="computer_use.action")
    odd_action = _reencode(action, codec.JOURNAL_RECORD, codec.COMPUTER_USE_ENTRY_V2, entry_type="activity.result")
    browser = _reencode(activity, codec.JOURNAL_RECORD, codec.JOURNAL_ENTRY_V3, kind="browser", observations=[])
    return [v2, v1, seal_v1, unclosed, odd_activity, odd_action, browser]


def legacy_audit_records(h: History) -> list[bytes]:
    """AuditRecord.v1 (payload-only MAC) over AuditEntry v1 and v2, and v2 records under a retired key."""
    out = []
    for value in h.audit[:6]:
        record = codec.decode(value).record
        payload = record["payload"]
        out.append(codec.encode(codec.AUDIT_RECORD, {**record, "mac": audit_mac(AUDIT_KEY, payload)}))
        entry = codec.decode(payload).record
        v1_payload = codec.encode(codec.AUDIT_ENTRY, {k: v for k, v in entry.items() if k != "computer_use"})
        out.append(codec.encode(codec.AUDIT_RECORD, {**record, "payload": v1_payload, "mac": audit_mac(AUDIT_KEY, v1_payload)}))
        # MAC-valid under a key of the ring this config does not hold: handed back (the Python function names the key)
        out.append(
            codec.encode(
                codec.AUDIT_RECORD_V2, {**record, "key_id": "elsewhere", "mac": audit_record_mac(b"k" * 32, "elsewhere", payload)}
            )
        )
    return out


@needs_native
def test_legacy_layouts_and_odd_entries_get_the_same_facts() -> None:
    h = history()
    journal = native_and_python("journal", h.config, legacy_journal_records(h))
    assert [native is not None for native, _ in journal] == [True] * 7
    assert_same_or_handed_back(journal)
    assert [python[0] for _, python in journal] == [rebuild._ENTRY] * 2 + [rebuild._SEAL] * 2 + [rebuild._ODD_ENTRY] * 2 + [
        rebuild._ENTRY
    ]
    audit = native_and_python("audit", h.config, legacy_audit_records(h))
    assert [native is not None for native, _ in audit] == [True, True, False] * 6
    assert_same_or_handed_back(audit)


def _overlong_first_varint(value: bytes) -> bytes:
    """The first varint of the body written one byte longer (fastavro and the strict reader both read it)."""
    body = value[codec.HEADER_SIZE :]
    end = next(i for i, b in enumerate(body) if b < 0x80)
    return value[: codec.HEADER_SIZE] + body[:end] + bytes([body[end] | 0x80, 0]) + body[end + 1 :]


def _tweaked(value: bytes) -> list[bytes]:
    """Plain damage, and encodings only fastavro reads."""
    return [
        value + b"\x00",  # a trailing byte
        value[:-1],  # truncated
        b"\xc3\x01" + bytes(8) + value[codec.HEADER_SIZE :],  # an unknown fingerprint
        value[:1],
        b"",
        _overlong_first_varint(value),
    ]


@needs_native
def test_damaged_records_are_handed_back_or_read_alike() -> None:
    h = history()
    for topic, values in (("journal", h.journal), ("audit", h.audit[:20]), ("checkpoints", h.checkpoints)):
        damaged: list[Any] = [t for v in values for t in _tweaked(v)]
        damaged += [None, bytearray(values[0]), 7, (1, values[0])]
        pairs = native_and_python(topic, h.config, damaged)
        assert_same_or_handed_back(pairs)
        assert all(native is None for native, _ in pairs[-4:])  # not bytes: the Python function decides
        overlong = [native for native, _ in pairs[5 : 6 * len(values) : 6]]
        assert None not in overlong  # read alike (and equal, above)


@needs_native
def test_a_boolean_byte_other_than_0_or_1_is_handed_back() -> None:
    """fastavro reads any non-zero byte as true; the strict reader leaves such a seal to the Python function."""
    h = history()
    seal = next(v for v in h.journal if codec.decode(v).schema.name == codec.SEAL_RECORD)
    record = codec.decode(seal).record
    fields = codec.decode(record["payload"]).record
    flipped = codec.encode(codec.RUN_SEAL_V2, {**fields, "final": not fields["final"]})
    at = next(i for i, (a, b) in enumerate(zip(record["payload"], flipped, strict=True)) if a != b)
    two = bytearray(record["payload"])
    two[at] = 2
    value = codec.encode(
        codec.SEAL_RECORD, {**record, "payload": bytes(two), "signature": h.config.signer.sign(seal_signing_input(bytes(two)))}
    )
    [(native, python)] = native_and_python("journal", h.config, [value])
    assert native is None
    assert python[0] == rebuild._SEAL and python[5:7] == (True, True)  # signed, and final


@needs_native
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_records_are_handed_back_or_read_alike(data: st.DataObject) -> None:
    h = history()
    topic, values = data.draw(
        st.sampled_from([("journal", h.journal), ("audit", h.audit), ("checkpoints", h.checkpoints)]), label="topic"
    )
    value = data.draw(st.sampled_from(values), label="value")
    mutated = fuzz.mutate(value, data.draw(fuzz.EDITS, label="edits"))
    assert_same_or_handed_back(native_and_python(topic, h.config, [mutated]))


# ---------------------------------------------------------------------------
# whole folds: both paths, the same outcome
# ---------------------------------------------------------------------------


def fold_outcome(
    native: bool,
    config: SchedulerConfig,
    journal: list[Any],
    audit: list[Any],
    checkpoints: list[Any],
    *,
    start: SchedulerState | None = None,
    quarantined: frozenset[int] = frozenset(),
) -> tuple[Any, list[Skipped]]:
    """The state bytes (or the exception) and the reports of one fold, from generators (the fold streams)."""
    skipped: list[Skipped] = []
    try:
        state = rebuild_state(
            config,
            PARTITION,
            iter(journal),
            iter(audit),
            checkpoint_values=iter(checkpoints),
            journal_topic="t.journal",
            audit_topic="t.audit",
            checkpoints_topic="t.checkpoints",
            quarantined=quarantined,
            report=skipped.append,
            start=copy.deepcopy(start),
            native=native,
        )
        result: Any = ("state", state_bytes(state))
    except StateCorrupted as exc:
        result = ("corrupted", str(exc), exc.topic, exc.partition, exc.offset, exc.index)
    except Exception as exc:  # noqa: BLE001 - both paths must fail alike, whatever the failure
        result = ("raised", type(exc).__name__, str(exc))
    return result, skipped


def assert_same_fold(config: SchedulerConfig, journal: list[Any], audit: list[Any], checkpoints: list[Any], **kw: Any) -> Any:
    python = fold_outcome(False, config, journal, audit, checkpoints, **kw)
    native = fold_outcome(True, config, journal, audit, checkpoints, **kw)
    assert native == python
    if currently_in_test_context():  # the outcomes a property test reached (--hypothesis-show-statistics)
        event(f"{python[0][0]}, {len(python[1])} skipped" if python[0][0] != "corrupted" else python[0][1].split(":")[1][:40])
    return python[0]


@needs_native
@pytest.mark.parametrize("chunk", [1, 2, 5, 2048])
def test_an_untampered_history_folds_alike_at_any_chunk_size(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rebuild, "_CHUNK", chunk)
    h = history()
    journal, audit, checkpoints = (list(enumerate(v)) for v in (h.journal, h.audit, h.checkpoints))
    result = assert_same_fold(h.config, journal, audit, checkpoints)
    assert result == ("state", state_bytes(h.state))


def _record(value: bytes, schema: str) -> dict[str, Any] | None:
    """The record of a ``schema`` value with its decoded payload under "inner", or None (an earlier tampering broke it)."""
    try:
        decoded = codec.decode(value)
        if decoded.schema.name != schema:
            return None
        inner = codec.decode(decoded.record["payload"])
    except codec.DecodeError:
        return None
    return {**decoded.record, "inner": inner}


def forge_audit(value: bytes, **changes: Any) -> bytes:
    """An audit record with its entry changed and MACed again with the (leaked) audit key."""
    record = _record(value, codec.AUDIT_RECORD_V2)
    if record is None:
        return value
    inner = record.pop("inner")
    payload = codec.encode(inner.schema.name, {**inner.record, **changes})
    return codec.encode(
        codec.AUDIT_RECORD_V2, {**record, "payload": payload, "mac": audit_record_mac(AUDIT_KEY, record["key_id"], payload)}
    )


def forge_journal(value: bytes, **changes: Any) -> bytes:
    """A journal entry with its payload changed and its entry_hash recomputed (no key needed)."""
    record = _record(value, codec.JOURNAL_RECORD)
    if record is None:
        return value
    inner = record["inner"]
    payload = codec.encode(inner.schema.name, {**inner.record, **changes})
    return codec.encode(codec.JOURNAL_RECORD, {"payload": payload, "entry_hash": journal_entry_hash(payload)})


def resign(value: bytes, schema: str, signer: Ed25519Signer) -> bytes:
    """A seal or checkpoint signed again, by ``signer``."""
    record = _record(value, schema)
    if record is None:
        return value
    record.pop("inner")
    signing_input = checkpoint_signing_input if schema == codec.CHECKPOINT_RECORD else seal_signing_input
    return codec.encode(schema, {**record, "key_id": signer.key_id, "signature": signer.sign(signing_input(record["payload"]))})


OTHER = Ed25519Signer.from_seed(bytes(range(1, 33)))
TAMPERING = st.sampled_from(
    ["mutate", "delete", "duplicate", "swap", "garbage", "forge", "forge_mirror", "resign", "quarantine", "truncate"]
)


def tamper(data: st.DataObject, h: History) -> tuple[list[Any], list[Any], list[Any], frozenset[int]]:
    journal, audit, checkpoints = (list(enumerate(v)) for v in (h.journal, h.audit, h.checkpoints))
    quarantined: set[int] = set()
    for _ in range(data.draw(st.integers(1, 4), label="tamperings")):
        how = data.draw(TAMPERING, label="how")
        topic = data.draw(st.sampled_from(["journal", "audit", "checkpoints"]), label="topic")
        records = {"journal": journal, "audit": audit, "checkpoints": checkpoints}[topic]
        if not records:
            continue
        i = data.draw(st.integers(0, len(records) - 1), label="at")
        offset, value = records[i]
        if how == "mutate":
            records[i] = (offset, fuzz.mutate(value, data.draw(fuzz.EDITS, label="edits")))
        elif how == "delete":
            del records[i]
        elif how == "duplicate":
            records.insert(data.draw(st.integers(0, len(records)), label="to"), (offset, value))
        elif how == "swap" and i + 1 < len(records):
            records[i], records[i + 1] = records[i + 1], records[i]
        elif how == "garbage":
            records.insert(i, (offset, data.draw(st.binary(max_size=40), label="garbage")))
        elif how == "forge" and topic == "journal":
            records[i] = (offset, forge_journal(value, submission_id="forged"))
        elif how == "forge" and topic == "audit":
            records[i] = (offset, forge_audit(value, record_hash="sha256:" + "0" * 64))
        elif how == "forge_mirror":
            # a journal forgery whose audit mirror was MACed again with the leaked key: adopted, then judged
            j = data.draw(st.integers(0, len(journal) - 1), label="entry") if journal else 0
            forged = _record(forge_journal(journal[j][1], stage_id="forged-stage"), codec.JOURNAL_RECORD) if journal else None
            if forged is not None:
                journal[j] = (
                    journal[j][0],
                    codec.encode(codec.JOURNAL_RECORD, {k: forged[k] for k in ("payload", "entry_hash")}),
                )
                for k, (a_offset, a_value) in enumerate(audit):
                    mirror = _record(a_value, codec.AUDIT_RECORD_V2)
                    if mirror is not None and mirror["inner"].record["journal_seq"] == forged["inner"].record["seq"]:
                        audit[k] = (a_offset, forge_audit(a_value, record_hash=forged["entry_hash"]))
                        break
        elif how == "resign" and topic == "checkpoints":
            records[i] = (offset, resign(value, codec.CHECKPOINT_RECORD, OTHER))
        elif how == "resign" and topic == "journal":
            records[i] = (offset, resign(value, codec.SEAL_RECORD, OTHER))
        elif how == "quarantine" and topic == "journal":
            quarantined.add(offset)
        elif how == "truncate":
            del records[i:]
    return journal, audit, checkpoints, frozenset(quarantined)


@needs_native
@settings(max_examples=120, deadline=None)
@given(st.data())
def test_a_tampered_history_folds_alike(data: st.DataObject) -> None:
    h = history()
    journal, audit, checkpoints, quarantined = tamper(data, h)
    chunk = data.draw(st.sampled_from([1, 3, 7, 2048]), label="chunk")
    old = rebuild._CHUNK
    rebuild._CHUNK = chunk
    try:
        assert_same_fold(h.config, journal, audit, checkpoints, quarantined=quarantined)
    finally:
        rebuild._CHUNK = old


def split(h: History, j: int) -> tuple[History, History]:
    """The history as of its first ``j`` journal records (the audit records up to the last one's mirror, the
    checkpoints within them) and the rest: a snapshot's state and the tail after it."""
    audit_cut = 0
    mirrors = 0
    for k, value in enumerate(h.audit):
        if mirrors == j:
            break
        if codec.decode(codec.decode(value).record["payload"]).record["event"] in rebuild._MIRRORS_JOURNAL:
            mirrors += 1
            audit_cut = k + 1
    checkpoint_cut = sum(
        1 for v in h.checkpoints if codec.decode(codec.decode(v).record["payload"]).record["audit_seq"] <= audit_cut
    )
    head = History(h.config, h.state, h.journal[:j], h.audit[:audit_cut], h.checkpoints[:checkpoint_cut])
    tail = History(h.config, h.state, h.journal[j:], h.audit[audit_cut:], h.checkpoints[checkpoint_cut:])
    head.state = rebuild_state(h.config, PARTITION, head.journal, head.audit, checkpoint_values=head.checkpoints, native=False)
    return head, tail


@needs_native
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_tampered_tail_after_a_snapshot_folds_alike(data: st.DataObject) -> None:
    """The fold from a snapshot's state (``start``) over a tampered tail."""
    h = history()
    head, tail = split(h, data.draw(st.integers(0, len(h.journal)), label="cut"))
    untampered = assert_same_fold(
        h.config, list(enumerate(tail.journal)), list(enumerate(tail.audit)), list(enumerate(tail.checkpoints)), start=head.state
    )
    assert untampered == ("state", state_bytes(h.state))
    journal, audit, checkpoints, quarantined = tamper(data, tail)
    assert_same_fold(h.config, journal, audit, checkpoints, start=head.state, quarantined=quarantined)


# ---------------------------------------------------------------------------
# choosing the path
# ---------------------------------------------------------------------------


def test_without_the_extension_the_fold_runs_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rebuild, "native_status", lambda: (False, "not built here"))
    h = history()
    assert rebuild._fold_reader(h.config, None) is None
    assert rebuild_state(h.config, PARTITION, h.journal, h.audit, checkpoint_values=h.checkpoints) == h.state
    with pytest.raises(NativeUnavailable, match="not built here"):
        rebuild_state(h.config, PARTITION, h.journal, h.audit, native=True)


@needs_native
def test_the_extension_is_chosen_when_it_is_usable() -> None:
    h = history()
    assert rebuild._fold_reader(h.config, None) is not None
    assert rebuild._fold_reader(h.config, False) is None


@needs_native
def test_a_changed_schema_keeps_the_fold_in_python() -> None:
    import bernstein_native

    known = [(s.fingerprint, s.name) for s in codec.default_codec().schemas]
    changed = [(bytes(8), name) if name == codec.AUDIT_ENTRY_V2 else (fp, name) for fp, name in known]
    with pytest.raises(ValueError, match=r"schema AuditEntry.v2 changed"):
        bernstein_native.FoldReader(changed, [], b"k", [], [])
    assert {name: fp for name, fp in bernstein_native.FOLD_SCHEMAS} == {
        name: fp for fp, name in known if name in dict((n, f) for n, f in bernstein_native.FOLD_SCHEMAS)
    }


class _OpaqueSigner:
    """A signer that signs but does not expose its seed (a key held elsewhere)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def key_id(self) -> str:
        return str(self._inner.key_id)

    def sign(self, data: bytes) -> bytes:
        return bytes(self._inner.sign(data))


@needs_native
def test_seals_and_checkpoints_under_a_key_without_a_seed_are_checked_in_python() -> None:
    h = history()
    opaque = dataclasses.replace(h.config, signer=_OpaqueSigner(h.config.signer))
    seals = [v for v in h.journal if codec.decode(v).schema.name == codec.SEAL_RECORD]
    assert seals
    assert [native for native, _ in native_and_python("journal", opaque, seals)] == [None] * len(seals)
    assert [native for native, _ in native_and_python("checkpoints", opaque, h.checkpoints)] == [None] * len(h.checkpoints)
    journal, audit, checkpoints = (list(enumerate(v)) for v in (h.journal, h.audit, h.checkpoints))
    assert assert_same_fold(opaque, journal, audit, checkpoints) == ("state", state_bytes(h.state))


@needs_native
def test_a_rotated_key_ring_folds_alike() -> None:
    """Seals, checkpoints and audit records under retired keys of the rings (the rotation tests' history)."""
    d = rotated_driver()
    for i in range(6):
        d.feed(enc_sub(stage_id=f"s{i}", pages=[b"%d" % i]) if i < 5 else enc_close())
    key_ids = {codec.decode(v).record["key_id"] for v in d.audit_values()}
    assert len(key_ids) == 2
    journal, audit, checkpoints = (list(enumerate(v)) for v in (d.journal_values(), d.audit_values(), d.checkpoint_values()))
    assert assert_same_fold(d.config, journal, audit, checkpoints) == ("state", state_bytes(d.state))
    pairs = native_and_python("audit", d.config, d.audit_values())
    assert None not in [native for native, _ in pairs]


def _chained_audit(template: bytes, seq: int, prev_mac: str, event: str = "activity.refused") -> bytes:
    """An audit record at ``seq`` after ``prev_mac``, MACed with the (leaked) audit key."""
    record = codec.decode(template).record
    inner = codec.decode(record["payload"])
    payload = codec.encode(inner.schema.name, {**inner.record, "seq": seq, "prev_mac": prev_mac, "event": event})
    return codec.encode(
        codec.AUDIT_RECORD_V2, {**record, "payload": payload, "mac": audit_record_mac(AUDIT_KEY, record["key_id"], payload)}
    )


@needs_native
@pytest.mark.parametrize("chunk", [1, 2, 2048])
def test_a_record_the_native_walk_leaves_to_python_and_python_adopts_resumes_the_walk_after_it(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``macs_equal`` compares MACs as ASCII with replacement: a prev_mac of non-ASCII characters extends a head of
    '?'s (a start state's). The native walk does not decide such a record; the Python functions adopt it, and the
    walk of the rest of the chunk runs again from the chain after it."""
    monkeypatch.setattr(rebuild, "_CHUNK", chunk)
    h = history()
    start = copy.deepcopy(h.state)
    start.audit_head = "hmac-sha256:" + "?" * 64
    seq = start.audit_seq
    first = _chained_audit(h.audit[0], seq, "hmac-sha256:" + "\u00e9" * 64)
    second = _chained_audit(h.audit[0], seq + 1, codec.decode(first).record["mac"])
    third = _chained_audit(h.audit[0], seq + 2, codec.decode(second).record["mac"])
    audit = [(0, first), (1, second), (2, b"garbage"), (3, third)]
    walk = rebuild._fold_reader(h.config, True).audit_walk([v for _, v in audit], 0, PARTITION, seq, start.audit_head)
    # not decided: the first (non-ASCII), and the rest, which do not extend the chain as it stands without the first
    assert [event[:2] for event in walk[0]] == [(0, False), (1, False), (2, False), (3, False)]
    # from the chain after the first, the walk adopts the second and the third itself
    after = rebuild._fold_reader(h.config, True).audit_walk(
        [v for _, v in audit], 1, PARTITION, seq + 1, codec.decode(first).record["mac"]
    )
    assert [event[:2] for event in after[0]] == [(2, False)] and after[1:] == (seq + 3, codec.decode(third).record["mac"])
    walks: list[int] = []
    walk_from = rebuild._AuditWalk._walk

    def spy(self: Any, start: int) -> None:
        walks.append(start)
        walk_from(self, start)

    monkeypatch.setattr(rebuild._AuditWalk, "_walk", spy)
    result, skipped = fold_outcome(True, h.config, [], audit, [], start=start)
    assert walks == {1: [0, 1, 0, 0, 0], 2: [0, 1, 0], 2048: [0, 1]}[chunk]  # 1: the walk of the rest after the first
    assert (result, skipped) == fold_outcome(False, h.config, [], audit, [], start=start)
    assert [(s.offset, s.problem[:31]) for s in skipped] == [(2, "the audit record does not decod")]
    adopted = copy.deepcopy(start)
    adopted.audit_seq, adopted.audit_head = seq + 3, codec.decode(third).record["mac"]
    assert result == ("state", state_bytes(adopted))
