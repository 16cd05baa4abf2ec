"""Audit-chain vectors (``schemas/vectors/audit_walks.json``): audit chains, altered, with what every judge concludes.

    python -m tests.vectors.audit_vectors          # write schemas/vectors/audit_walks.json
    python -m tests.vectors.audit_vectors --check  # exit 1 if it would change

The audit chain is judged in five places: the scheduler's rebuild (``consumers/core/rebuild.py``)
and its native fold (``native/src/fold.rs``) decide what to adopt at a restart; the verifier
(``verifier/verify.py`` over ``verifier/audit_chain.py``, in Python and with the native plain walk
``native/src/walk.rs``) reports problems; ``audit follow`` (``verifier/follow/checker.py``, over the
same ``verifier/audit_chain.py``) raises alerts. Every case here is a partition's records as the
Python reference core wrote them (``bernstein.consumers.core.step``) under the fixed keys of the step vectors,
then altered the way an attacker or an insider could: each audit field edited, a MAC flipped, a
key id swapped, a record deleted, replayed, reordered, copied from another partition, forged in,
garbled, a rotation's keys pinned wrongly, the tail truncated, the chain rewritten under the audit
key behind a signed checkpoint, and the follower resumed from its saved state after a time-based
alert. ``expect`` holds each judge's verdict, reviewed case by case against the rules in
``verifier/audit_chain.py`` and the rebuild's module doc; ``judgements`` is the one table of how a
verifier code reads as an alert of ``audit follow`` (none: the follower cannot see it from the chain
alone). tests/unit/differential/test_audit_walks.py runs every judge over every case and fails when a judge
skips one.

It lives with the scheduler, like ``tests/vectors/step_vectors.py``: it runs the scheduler's core.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from bernstein.schemas import canonical, codec
from tests.vectors import step_vectors as sv

OUT: Final = Path(__file__).resolve().parents[2] / "schemas" / "vectors" / "audit_walks.json"
FORMAT: Final = "bernstein.audit-walks/1"
STREAMS: Final = ("journal", "refusals", "audit", "deadletter", "checkpoints")
CHECKPOINT_EVERY: Final = 3
OTHER_AUDIT_KEY: Final = bytes.fromhex("b1" * 32)
"""The audit key a rotation moves to."""
FORGER_KEY: Final = bytes.fromhex("c2" * 32)
"""A key no scheduler holds: what a forger MACs with."""
ROTATE_AT: Final = sv.BASE_TS + 4
"""The rotation's moment: inputs stamped from here on are MACed with ``OTHER_AUDIT_KEY``."""
TICK_LATE_MS: Final = 7_200_000
"""How long after its last record a resumed follower's clock says it is (past every time-based threshold)."""

JUDGEMENTS: Final = {
    "AUDIT_UNDECODABLE": "undecodable",
    "KEY_PURPOSE_MISMATCH": "key_misuse",
    "AUDIT_KEY_NOT_PINNED": "unknown_key",
    "AUDIT_MAC_MISMATCH": "mac_mismatch",
    "AUDIT_WRONG_PARTITION": "wrong_partition",
    "AUDIT_OUT_OF_ORDER": "out_of_order",
    "KEY_OUTSIDE_VALIDITY": "key_not_valid",
    "AUDIT_GAP": "gap",
    "AUDIT_LINK_BROKEN": "chain_break",
}
"""Verifier code -> the alert ``audit follow`` raises for the same record. Every other code a case expects
comes from the joins the follower does not make (the journal, seals, checkpoints): no alert."""


Record = list[Any]
"""[offset, timestamp_ms, key_hex or None, value_hex]"""


@dataclass
class Base:
    """One partition's records as the reference core wrote them, and the keys that wrote them."""

    name: str
    partition: int
    audit_keys: list[dict[str, Any]]
    records: dict[str, list[Record]] = field(default_factory=dict)


def _inputs() -> list[sv.Input]:
    page_b = [("https://example.test/b", b"page b")]
    page_c = [("https://example.test/c", b"page c")]
    return [
        sv.stage(),
        sv.stage(stage_id="stage-1", pages=page_b),
        sv.stage(stage_id="stage-1", pages=page_b, submission_id="again"),  # refused: the stage is redundant
        sv.raw(b"not an avro record"),  # dead-lettered
        sv.stage(run_id="run-2"),
        sv.close(),  # run-1's final seal, its audit record and a checkpoint
        sv.stage(run_id="run-2", stage_id="stage-1", pages=page_b),
        sv.stage(run_id="run-2", stage_id="stage-2", pages=page_c),
    ]


def _audit_key(secret: bytes, valid_from: int = 0, valid_until: int | None = None) -> dict[str, Any]:
    return {
        "key_id": canonical.hmac_key_id(secret),
        "secret_hex": secret.hex(),
        "valid_from_ms": valid_from,
        "valid_until_ms": valid_until,
    }


def scheduler_config(audit_keys: list[dict[str, Any]]) -> Any:
    """The vectors' scheduler config with this audit key ring (oldest first)."""
    from bernstein.consumers.core.model import AuditKeyVersion, Lifetime

    ring = tuple(
        AuditKeyVersion(bytes.fromhex(k["secret_hex"]), k["key_id"], Lifetime(k["valid_from_ms"], k["valid_until_ms"]))
        for k in audit_keys
    )
    config = replace(sv.scheduler_config(), checkpoint_every=CHECKPOINT_EVERY)
    if len(ring) == 1:
        return replace(config, audit_key=ring[0].secret, audit_key_id=ring[0].key_id)
    return replace(config, audit_key=ring[-1].secret, audit_key_id=ring[-1].key_id, audit_keys=ring)


def _run(name: str, partition: int, audit_keys: list[dict[str, Any]]) -> Base:
    from bernstein.consumers.core.model import InputRecord
    from bernstein.consumers.core.step import SchedulerCore, initial_state

    config = scheduler_config(audit_keys)
    core = SchedulerCore(config)
    state = initial_state(config, partition)
    base = Base(name, partition, audit_keys, {stream: [] for stream in STREAMS})
    for index, item in enumerate(_inputs()):
        value = item.value
        assert value is not None
        state, outputs = core.step(state, InputRecord(sv.TOPIC, partition, index, sv.BASE_TS + index, item.key, value))
        for out in outputs:
            records = base.records[out.stream.value]
            records.append([len(records), out.timestamp_ms, out.key.hex(), out.value.hex()])
    return base


def trusted_document(audit_keys: list[dict[str, Any]]) -> dict[str, Any]:
    """A trusted-keys v2 document pinning the seal key, the vectors' producers and ``audit_keys`` (with lifetimes)."""
    keys: list[dict[str, Any]] = [
        {"key_id": sv._Key(sv.SEAL_SEED).key_id, "purpose": "seal", "public_key": sv._Key(sv.SEAL_SEED).public_key_raw.hex()}
    ]
    for name, key in sorted(sv.KEYS.items()):
        if name != sv.UNREGISTERED:
            keys.append({"key_id": key.key_id, "purpose": "producer", "public_key": key.public_key_raw.hex(), "producer": name})
    for k in audit_keys:
        item = {"key_id": k["key_id"], "purpose": "audit", "secret": k["secret_hex"], "valid_from_ms": k["valid_from_ms"]}
        if k["valid_until_ms"] is not None:
            item["valid_until_ms"] = k["valid_until_ms"]
        keys.append(item)
    return {"format": "bernstein.trusted-keys/v2", "keys": sorted(keys, key=lambda item: item["key_id"])}


# -- altering records ---------------------------------------------------------------


def _split(value_hex: str) -> tuple[dict[str, Any], str, str]:
    _, (payload, key_id, mac) = codec.split_envelope(bytes.fromhex(value_hex))
    return dict(codec.decode(payload).record), key_id, mac


def _envelope(fields: dict[str, Any], key_id: str, mac: str) -> str:
    payload = codec.encode(codec.AUDIT_ENTRY, fields)
    return codec.encode(codec.AUDIT_RECORD_V2, {"key_id": key_id, "payload": payload, "mac": mac}).hex()


def _macd(fields: dict[str, Any], secret: bytes, key_id: str | None = None) -> tuple[str, str]:
    """(value_hex, mac) of ``fields`` MACed with ``secret`` under ``key_id`` (default: the secret's own id)."""
    key_id = key_id or canonical.hmac_key_id(secret)
    payload = codec.encode(codec.AUDIT_ENTRY, fields)
    mac = canonical.audit_record_mac(secret, key_id, payload)
    return codec.encode(codec.AUDIT_RECORD_V2, {"key_id": key_id, "payload": payload, "mac": mac}).hex(), mac


def _renumber(records: list[Record]) -> list[Record]:
    """Offsets as a rewritten topic has them: dense from 0."""
    return [[index, *record[1:]] for index, record in enumerate(records)]


def _edit(index: int, **changes: Any) -> Callable[[list[Record]], list[Record]]:
    """The audit record at ``index`` with payload fields changed, its stored key id and MAC kept."""

    def alter(audit: list[Record]) -> list[Record]:
        fields, key_id, mac = _split(audit[index][3])
        for name, value in changes.items():
            if name == "input_offset":
                fields["input"] = {**fields["input"], "offset": value}
            else:
                fields[name] = value(fields[name]) if callable(value) else value
        out = [list(r) for r in audit]
        out[index][3] = _envelope(fields, key_id, mac)
        return out

    return alter


def _envelope_edit(index: int, *, key_id: str | None = None, flip_mac: bool = False) -> Callable[[list[Record]], list[Record]]:
    def alter(audit: list[Record]) -> list[Record]:
        fields, stored_key, mac = _split(audit[index][3])
        if flip_mac:
            mac = mac[:-1] + ("0" if mac[-1] != "0" else "1")
        out = [list(r) for r in audit]
        out[index][3] = _envelope(fields, key_id or stored_key, mac)
        return out

    return alter


def _remac(index: int, secret: bytes, key_id: str) -> Callable[[list[Record]], list[Record]]:
    def alter(audit: list[Record]) -> list[Record]:
        fields, _, _ = _split(audit[index][3])
        out = [list(r) for r in audit]
        out[index][3] = _macd(fields, secret, key_id)[0]
        return out

    return alter


def _remac_edited(index: int, secret: bytes, **changes: Any) -> Callable[[list[Record]], list[Record]]:
    """An insider with the audit key: record ``index`` with fields changed and MACed again (its key id kept)."""

    def alter(audit: list[Record]) -> list[Record]:
        fields, key_id, _ = _split(audit[index][3])
        out = [list(r) for r in audit]
        out[index][3] = _macd({**fields, **changes}, secret, key_id)[0]
        return out

    return alter


def _delete(*indexes: int) -> Callable[[list[Record]], list[Record]]:
    return lambda audit: _renumber([r for i, r in enumerate(audit) if i not in indexes])


def _insert(at: int, record: Callable[[list[Record]], Record]) -> Callable[[list[Record]], list[Record]]:
    return lambda audit: _renumber([*audit[:at], record(audit), *audit[at:]])


def _replace(at: int, record: Callable[[list[Record]], Record]) -> Callable[[list[Record]], list[Record]]:
    return lambda audit: [*audit[:at], [at, *record(audit)[1:]], *audit[at + 1 :]]


def _copy(index: int) -> Callable[[list[Record]], Record]:
    return lambda audit: list(audit[index])


def _forged(seq: int, prev_of: int) -> Callable[[list[Record]], Record]:
    """A record claiming ``seq``, linking to record ``prev_of``'s MAC, MACed with a key no scheduler holds under the
    scheduler's key id."""

    def make(audit: list[Record]) -> Record:
        fields, key_id, _ = _split(audit[prev_of][3])
        _, _, prev_mac = _split(audit[prev_of][3])
        forged = {**fields, "seq": seq, "prev_mac": prev_mac, "run_id": "run-forged", "record_hash": "sha256:" + "f" * 64}
        return [0, audit[prev_of][1], audit[prev_of][2], _macd(forged, FORGER_KEY, key_id)[0]]

    return make


def _garbage(audit: list[Record]) -> Record:
    return [0, audit[-1][1], audit[-1][2], b"\x00\x01not an audit record".hex()]


def _rechained_from(index: int, secret: bytes, **changes: Any) -> Callable[[list[Record]], list[Record]]:
    """An insider with the audit key: record ``index`` rewritten (``changes``) and every later one re-MACed to link."""

    def alter(audit: list[Record]) -> list[Record]:
        out = [list(r) for r in audit]
        prev = _split(out[index - 1][3])[2] if index else None
        for i in range(index, len(out)):
            fields, key_id, _ = _split(out[i][3])
            if i == index:
                fields.update(changes)
            if prev is not None:
                fields["prev_mac"] = prev
            out[i][3], prev = _macd(fields, secret, key_id)
        return out

    return alter


# -- the cases ------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    about: str
    base: str
    verify: list[tuple[str, str, int]]
    """(code, stream, offset) of every problem the verifier reports, in any order."""
    rebuild: tuple[int, str | None]
    """(audit records adopted, None or the kind of topic whose record stops the rebuild)."""
    alter: Callable[[list[Record]], list[Record]] | None = None
    trust: list[int] | None = None
    """Which of the base's audit keys the verifier and follower pin (None: all), with ``lifetimes`` overriding theirs."""
    lifetimes: dict[int, tuple[int, int | None]] = field(default_factory=dict)
    delete_checkpoints: bool = False
    resume_after: int | None = None
    """``audit follow`` checks this many records, saves its state, is told the time is ``TICK_LATE_MS`` later
    (time-based alerts may fire; they are not tamper), and resumes from the saved state for the rest."""
    follow: list[tuple[str, int]] | None = None
    """Overrides the alerts derived from ``verify`` through ``JUDGEMENTS`` (None: derived)."""


def _field_cases() -> list[Case]:
    """Each field of the last audit record (after the last checkpoint) edited, its MAC kept."""
    changes: dict[str, Any] = {
        "partition": 1,
        "seq": 9,
        "prev_mac": "0" * 64,
        "event": "activity.refused",
        "run_id": "run-9",
        "stage_id": "stage-9",
        "kind": "research",
        "terminal_state": "failed",
        "reason_code": "edited",
        "artifact_hash": "sha256:" + "9" * 64,
        "evidence_set_hash": "sha256:" + "9" * 64,
        "record_hash": "sha256:" + "9" * 64,
        "journal_seq": 9,
        "input_offset": 9,
    }
    return [
        Case(
            f"edited_{name}",
            f"the last audit record's {name} edited, its key id and MAC kept (a forgery without the key)",
            "single",
            [("AUDIT_MAC_MISMATCH", "audit", 7)],
            (7, None),
            _edit(7, **{name: value}),
        )
        for name, value in changes.items()
    ]


def cases(single: Base, rotated: Base, other: Base) -> list[Case]:
    key0 = single.audit_keys[0]["key_id"]
    seal_key_id = sv._Key(sv.SEAL_SEED).key_id
    out = [
        Case("valid", "the chain as the scheduler wrote it", "single", [], (8, None)),
        *_field_cases(),
        Case(
            "edited_before_checkpoint",
            "a record a signed checkpoint covers, edited",
            "single",
            [("AUDIT_MAC_MISMATCH", "audit", 4)],
            (4, "checkpoints"),
            _edit(4, record_hash="sha256:" + "9" * 64),
        ),
        Case(
            "mac_flipped",
            "one character of the last record's MAC changed",
            "single",
            [("AUDIT_MAC_MISMATCH", "audit", 7)],
            (7, None),
            _envelope_edit(7, flip_mac=True),
        ),
        Case(
            "remacd_with_another_key",
            "the last record MACed with a key no scheduler holds, under the pinned key id",
            "single",
            [("AUDIT_MAC_MISMATCH", "audit", 7)],
            (7, None),
            _remac(7, FORGER_KEY, key0),
        ),
        Case(
            "key_id_swapped_to_unpinned",
            "the last record's envelope names an audit key id nobody pinned",
            "single",
            [("AUDIT_KEY_NOT_PINNED", "audit", 7)],
            (7, None),
            _envelope_edit(7, key_id=canonical.hmac_key_id(FORGER_KEY)),
        ),
        Case(
            "key_id_swapped_to_seal_key",
            "the last record's envelope names the seal key's id",
            "single",
            [("KEY_PURPOSE_MISMATCH", "audit", 7)],
            (7, None),
            _envelope_edit(7, key_id=seal_key_id),
        ),
        Case("gap", "the record after the last checkpoint deleted", "single", [("AUDIT_GAP", "audit", 6)], (6, None), _delete(6)),
        Case(
            "gap_behind_checkpoint",
            "a record a signed checkpoint covers deleted",
            "single",
            [("AUDIT_GAP", "audit", 4)],
            (4, "checkpoints"),
            _delete(4),
        ),
        Case(
            "replay_appended",
            "a copy of an earlier record appended",
            "single",
            [("AUDIT_OUT_OF_ORDER", "audit", 8)],
            (8, None),
            _insert(8, _copy(2)),
        ),
        Case(
            "replay_in_place",
            "the last record replaced by a copy of an earlier one",
            "single",
            [("AUDIT_OUT_OF_ORDER", "audit", 7)],
            (7, None),
            _replace(7, _copy(3)),
        ),
        Case(
            "reorder",
            "the last two records swapped",
            "single",
            [("AUDIT_GAP", "audit", 6), ("AUDIT_OUT_OF_ORDER", "audit", 7)],
            (7, None),
            lambda audit: _renumber([*audit[:6], audit[7], audit[6]]),
        ),
        Case(
            "forged_inserted",
            "a record MACed with a key no scheduler holds, inserted before the last one",
            "single",
            [("AUDIT_MAC_MISMATCH", "audit", 7)],
            (8, None),
            _insert(7, _forged(7, 6)),
        ),
        Case(
            "forged_appended",
            "a record MACed with a key no scheduler holds, appended",
            "single",
            [("AUDIT_MAC_MISMATCH", "audit", 8)],
            (8, None),
            _insert(8, _forged(8, 7)),
        ),
        Case(
            "garbage_appended",
            "bytes that are no audit record appended",
            "single",
            [("AUDIT_UNDECODABLE", "audit", 8)],
            (8, None),
            _insert(8, _garbage),
        ),
        Case(
            "garbage_in_place",
            "the last record replaced by bytes that are no audit record",
            "single",
            [("AUDIT_UNDECODABLE", "audit", 7)],
            (7, None),
            _replace(7, _garbage),
        ),
        Case(
            "wrong_partition_appended",
            "partition 1's last record appended to partition 0",
            "single",
            [("AUDIT_WRONG_PARTITION", "audit", 8)],
            (8, None),
            _insert(8, lambda _a: list(other.records["audit"][7])),
        ),
        Case(
            "wrong_partition_in_place",
            "the last record replaced by partition 1's",
            "single",
            [("AUDIT_WRONG_PARTITION", "audit", 7)],
            (7, None),
            _replace(7, lambda _a: list(other.records["audit"][7])),
        ),
        Case(
            "truncated",
            "the last two audit records deleted (after the last checkpoint): the journal entries they mirrored have none",
            "single",
            [("AUDIT_MISSING_ENTRY", "journal", 4)],
            (6, None),
            _delete(6, 7),
        ),
        Case(
            "truncated_behind_checkpoint",
            "the last three audit records deleted, one of them covered by a checkpoint",
            "single",
            [
                ("AUDIT_MISSING_ENTRY", "journal", 4),
                ("AUDIT_TRUNCATED", "journal", 3),
                ("AUDIT_TRUNCATED_BEFORE_CHECKPOINT", "checkpoints", 1),
            ],
            (5, "checkpoints"),
            _delete(5, 6, 7),
        ),
        Case(
            "rewritten_behind_checkpoint",
            "an insider with the audit key rewrites a record a checkpoint covers and re-links the rest",
            "single",
            [("CHECKPOINT_AUDIT_HEAD_MISMATCH", "checkpoints", 1)],
            (8, "audit"),
            _rechained_from(5, sv.AUDIT_KEY, record_hash="sha256:" + "9" * 64),
        ),
        Case(
            "relinked_with_the_audit_key",
            "an insider with the audit key points the last record's prev_mac elsewhere and re-MACs it",
            "single",
            [("AUDIT_LINK_BROKEN", "audit", 7)],
            (7, None),
            _remac_edited(7, sv.AUDIT_KEY, prev_mac="0" * 64),
        ),
        Case(
            "genesis_relinked",
            "an insider with the audit key makes the first record follow another genesis (and so its MAC, which the second "
            "record no longer links to, changes)",
            "single",
            [("AUDIT_LINK_BROKEN", "audit", 0), ("AUDIT_LINK_BROKEN", "audit", 1)],
            (0, "audit"),
            _remac_edited(0, sv.AUDIT_KEY, prev_mac="0" * 64),
        ),
        Case(
            "resumed_after_time_based_alert",
            "the follower saves its state after five records, its clock jumps two hours, it resumes",
            "single",
            [],
            (8, None),
            resume_after=5,
        ),
        Case(
            "resumed_then_edited",
            "resumed after a time-based alert; a record after the resume point edited",
            "single",
            [("AUDIT_MAC_MISMATCH", "audit", 7)],
            (7, None),
            _edit(7, run_id="run-9"),
            resume_after=5,
        ),
        Case(
            "resumed_at_the_edit",
            "resumed right before an edited record",
            "single",
            [("AUDIT_MAC_MISMATCH", "audit", 7)],
            (7, None),
            _edit(7, run_id="run-9"),
            resume_after=7,
        ),
        Case("rotation", "the audit key rotates at the fifth input; both keys pinned", "rotated", [], (8, None)),
        Case(
            "rotation_new_key_not_pinned",
            "only the retired key pinned",
            "rotated",
            [("AUDIT_KEY_NOT_PINNED", "audit", i) for i in range(4, 8)],
            (8, None),
            trust=[0],
        ),
        Case(
            "rotation_old_key_pinned_too_short",
            "the retired key pinned as ending one record before it did",
            "rotated",
            [("KEY_OUTSIDE_VALIDITY", "audit", 3)],
            (8, None),
            lifetimes={0: (0, sv.BASE_TS + 3)},
        ),
        Case(
            "rotation_boundary_key_swapped",
            "the first record after the rotation names the retired key id, MAC kept",
            "rotated",
            [("AUDIT_MAC_MISMATCH", "audit", 4)],
            (4, "checkpoints"),
            _envelope_edit(4, key_id=rotated.audit_keys[0]["key_id"]),
        ),
    ]
    return out


def case_document(case: Case, base: Base) -> dict[str, Any]:
    audit = base.records["audit"]
    altered = case.alter(audit) if case.alter is not None else audit
    keys = [dict(k) for i, k in enumerate(base.audit_keys) if case.trust is None or i in case.trust]
    for index, (start, until) in case.lifetimes.items():
        keys[index]["valid_from_ms"], keys[index]["valid_until_ms"] = start, until
    follow = case.follow
    if follow is None:
        follow = [(JUDGEMENTS[code], offset) for code, stream, offset in case.verify if stream == "audit" and code in JUDGEMENTS]
    document: dict[str, Any] = {
        "name": case.name,
        "about": case.about,
        "base": case.base,
        "trusted_keys": trusted_document(keys),
        "audit": altered if case.alter is not None else None,
        "resume_after": case.resume_after,
        "expect": {
            "verify": sorted([list(p) for p in case.verify]),
            "follow": sorted([list(a) for a in follow]),
            "rebuild": {"adopted": case.rebuild[0], "stops": case.rebuild[1]},
        },
    }
    return document


def audit_walks() -> dict[str, Any]:
    single = _run("single", 0, [_audit_key(sv.AUDIT_KEY)])
    other = _run("other", 1, [_audit_key(sv.AUDIT_KEY)])
    rotated = _run("rotated", 0, [_audit_key(sv.AUDIT_KEY, 0, ROTATE_AT), _audit_key(OTHER_AUDIT_KEY, ROTATE_AT)])
    bases = {"single": single, "rotated": rotated}
    return {
        "format": FORMAT,
        "about": (__doc__ or "").strip().split("\n\n")[2] if __doc__ else "",
        "judgements": {code: {"follow": kind} for code, kind in JUDGEMENTS.items()},
        "submissions_topic": sv.TOPIC,
        "tick_late_ms": TICK_LATE_MS,
        "bases": {
            name: {"partition": base.partition, "scheduler_audit_keys": base.audit_keys, "records": base.records}
            for name, base in bases.items()
        },
        "cases": [case_document(case, bases[case.base]) for case in cases(single, rotated, other)],
    }


def render() -> str:
    return json.dumps(audit_walks(), indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run `python -m tests.vectors.audit_vectors`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(json.loads(text)['cases'])} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
