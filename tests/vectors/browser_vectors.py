"""browser.json: one browser session's computer-use action records, as a producer SDK builds them.

    python -m tests.vectors.generate          # writes it with the other files (FILES["browser.json"])

modalities.json and signatures.json pin the primitives (observation hash, anchor, genesis, typed-value
digest, lineage HMAC and signature); steps.json pins what the scheduler does with action records. This
file pins everything in between, from a producer's raw inputs: the frames a driver saw (screenshot bytes
and the raw accessibility snapshot), the actions the agent proposed (raw typed values included) and the
producer's keys give, per action, the normalised and redacted snapshot, the canonical action (its value a
keyed digest), the hashes, the anchor chain, the lineage entry sealed with the lineage HMAC and the
Ed25519 producer signature, the submission id and the exact ``ComputerUseAction.v2`` bytes; then the
session's action log, its session document and the signed browser result (``ActivitySubmission.v3``). It
is composed from the same functions ``producers/computer_use/session.py`` calls (``normalise_snapshot``,
``canonical_action``, ``observation_hashes``, ``anchor``, ``lineage_entry``, ``seal_lineage``,
``action_log_bytes``, ``session_document``, ``ActivityResult.build``), with the wall clock and the
random submission id of the result replaced by stated values. Added, never rewritten.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from bernstein.producers.activity import ActivityResult
from bernstein.producers.computer_use.boundary import VALUE_KINDS, ProposedAction, canonical_action, validate_proposal
from bernstein.producers.computer_use.errors import InvalidAction
from bernstein.producers.computer_use.lineage import seal_lineage
from bernstein.producers.computer_use.session import SCRUBBED_KINDS
from bernstein.producers.computer_use.snapshot import MIN_SCRUB_CHARS, normalise_snapshot
from bernstein.schemas import canonical, codec
from bernstein.schemas.documents.browser import (
    TERMINAL_STATE_MAP,
    ActionRecord,
    ComputerUseTerminalState,
    LineageBinding,
    action_log_bytes,
    activity_terminal_state,
    anchor,
    genesis,
    lineage_entry,
    observation_hashes,
    session_document,
)
from bernstein.schemas.documents.pointer import MAX_COORDINATE, PointerTarget
from bernstein.schemas.records import ACTION_KINDS, Observation

RUN_ID = "run-42"
SESSION_ID = "browser-0"
WORKER = "worker@host"
ROLE = "navigator"
ADAPTER = "playwright"
SDK = "bernstein-python/0.1.0 computer-use"
RESULT_SUBMISSION_ID = "00000000000000000000000000000042"
OCCURRED_AT = 1767225600100
URL = "http://127.0.0.1:8000/signup.html"

FRAMES: list[tuple[bytes, str, str]] = [
    (
        b"\x89PNG frame 0: blank",
        "- document [ref=e1]\r\n",
        "about:blank",
    ),
    (
        b"\x89PNG frame 1: the signup form",
        '- heading "Sign up" [level=1] [ref=e1]\r\n- textbox "Email" [ref=e2]\r\n- textbox "Password" [ref=e3]\r\n'
        '- button "Create account" [ref=e4] [cursor=pointer]   \r\n\r\n',
        URL,
    ),
    (
        b"\x89PNG frame 2: email typed",
        '- heading "Sign up" [level=1] [ref=e1]\n- textbox "Email" [ref=e2]: ada@example.org\n- textbox "Password" [ref=e3]\n'
        '- button "Create account" [ref=e4]\n',
        URL,
    ),
    (
        b"\x89PNG frame 3: password typed",
        '- heading "Sign up" [level=1] [ref=e1]\n- textbox "Email" [ref=e2]: "ada@example.org"\n'
        '- textbox "Password" [ref=e3]: hunter2-secret\n- button "Create account" [ref=e4]\n',
        URL,
    ),
]
PROPOSALS: list[ProposedAction] = [
    ProposedAction("navigate", URL),
    ProposedAction("type", "#email", "ada@example.org"),
    ProposedAction("type", "#password", "hunter2-secret"),
    ProposedAction("click", "#create"),
]
FINAL: tuple[bytes, str, str] = (
    b"\x89PNG frame 4: welcome",
    '- heading "Welcome, ada@example.org" [level=1] [ref=e1]\n- paragraph: Your password hunter2-secret is set.\n',
    "http://127.0.0.1:8000/welcome.html",
)

POINTER_SESSION_ID = "browser-1"
POINTER_RESULT_SUBMISSION_ID = "00000000000000000000000000000043"
BOARD = "http://127.0.0.1:8000/board.html"
_TITLE = 'internal:role=textbox[name="Task title"i]'
_CODE = 'internal:role=textbox[name="Access code"i]'
_CARD = 'internal:role=button[name="Card: Write report"i]'
_BOARD_ARIA = (
    '- textbox "Task title" [ref=e1]\n- textbox "Access code" [ref=e2]\n- button "Add task" [ref=e3]\n'
    '- button "Help" [ref=e4]\n- button "Card: Write report" [ref=e5]: Write report\n- region "Done" [ref=e6]\n'
)
POINTER_FRAMES: list[tuple[bytes, str, str]] = [
    (b"\x89PNG board 0", _BOARD_ARIA + "- status: Ready\n", BOARD),
    (b"\x89PNG board 1", _BOARD_ARIA + "- status: Ready\n", BOARD),
    (b"\x89PNG board 2", _BOARD_ARIA.replace('"Task title" [ref=e1]', '"Task title" [ref=e1]: Quarterly report'), BOARD),
    (b"\x89PNG board 3", _BOARD_ARIA + "- status: Added: Quarterly report\n", BOARD),
    (b"\x89PNG board 4", _BOARD_ARIA + "- status: Help shown\n", BOARD),
    (b"\x89PNG board 5", _BOARD_ARIA + "- status: Editing: Write report\n", BOARD),
    (b"\x89PNG board 6", _BOARD_ARIA + "- status: Moved Write report to Done\n", BOARD),
    (b"\x89PNG board 7", _BOARD_ARIA + "- status: Archive menu open\n", BOARD),
]
POINTER_PROPOSALS: list[ProposedAction] = [
    ProposedAction("click", PointerTarget(_TITLE, at=(190, 56)).text()),
    ProposedAction("type", PointerTarget(_TITLE, focused=True).text(), "Quarterly report"),
    ProposedAction("click", PointerTarget('internal:role=button[name="Add task"i]', at=(100, 180)).text()),
    ProposedAction("hover", PointerTarget('internal:role=button[name="Help"i]', at=(450, 60)).text()),
    ProposedAction("double_click", PointerTarget(_CARD, at=(120, 270)).text()),
    ProposedAction(
        "drag", PointerTarget(_CARD, at=(120, 270), to=(500, 340), to_element='internal:role=region[name="Done"i]').text()
    ),
    ProposedAction("right_click", PointerTarget('internal:role=button[name="Archive"i]', at=(280, 270)).text()),
    ProposedAction("scroll", PointerTarget('internal:text="Review"i', at=(120, 380)).text(), "0,300"),
]
POINTER_FINAL: tuple[bytes, str, str] = (b"\x89PNG board 8", _BOARD_ARIA + "- status: Backlog scrolled to 170\n", BOARD)
"""A session driven in a model's computer-use format: every target a pointer target (bernstein.schemas.documents.pointer)."""

POINTER_TARGETS: list[tuple[str, PointerTarget]] = [
    ("point", PointerTarget(_TITLE, at=(190, 56))),
    ("point_nothing_there", PointerTarget("", at=(0, 0))),
    ("point_largest", PointerTarget("html", at=(MAX_COORDINATE, MAX_COORDINATE))),
    ("drag_points", PointerTarget(_CARD, at=(120, 270), to=(500, 340), to_element='internal:role=region[name="Done"i]')),
    ("drag_elements", PointerTarget("#card", to_element="#done")),
    ("focused", PointerTarget(_CODE, focused=True)),
    ("unicode_and_escapes", PointerTarget('internal:text="caf\u00e9 \\ "\u2028"i', at=(1, 2))),
]
"""(name, fields): a pointer target's canonical text, for SDKs that build one."""

SNAPSHOT_CASES: list[tuple[str, str, list[str]]] = [
    ("crlf_refs_and_trailing_space", '- heading "A" [ref=e1]  \r\n- link "B" [cursor=pointer] [ref=e2]\r- text: x \n\n\n', []),
    ("empty", "", []),
    ("only_newlines", "\n\n", []),
    ("every_value_role", '- textbox: a\n- searchbox "S": b\n- combobox "C" [expanded]: c\n- spinbutton "N" [ref=e9]: "42"\n', []),
    ("quoted_with_escapes", '- textbox "Say \\"hi\\"": "line \\"one\\" \\u00e9"\n', []),
    ("quoted_not_json", '- textbox "T": "unterminated \\"\n', []),
    ("not_a_value_role", '- button "Go": pressed\n- textbox\n- textbox:\n  - textbox "Nested": deep\n', []),
    (
        "typed_values_scrubbed_longest_first",
        "- text: Welcome, ada@example.org (ada)\n- text: hunter2-secret hunter2\n",
        ["ada", "hunter2", "ada@example.org", "hunter2-secret"],
    ),
    ("unicode_whitespace", '- text: caf\u00e9\u00a0\u2003\n- textbox "\u00e9": \u00fcber\u3000\n', []),
]
"""(name, raw snapshot, typed values): the normalisation and redaction rule (producers/computer_use/snapshot.py)."""

INVALID_PROPOSALS: list[tuple[str, ProposedAction]] = [
    ("unknown_kind", ProposedAction("triple_click", "#a")),
    ("target_too_long", ProposedAction("click", "#" + "a" * 4096)),
    ("navigate_without_target", ProposedAction("navigate", "  ")),
    ("click_with_value", ProposedAction("click", "#a", "x")),
    ("type_without_value", ProposedAction("type", "#a")),
    ("select_without_value", ProposedAction("select", "#a")),
    ("submit_without_target", ProposedAction("submit", "")),
    ("hover_with_value", ProposedAction("hover", "#a", "x")),
    ("drag_without_pointer_target", ProposedAction("drag", "#a")),
    ("pointer_target_not_canonical", ProposedAction("click", '{"at": [1, 2], "element": "#a"}')),
    ("pointer_target_key_order", ProposedAction("click", '{"element":"#a","at":[1,2]}')),
    ("pointer_target_unknown_field", ProposedAction("click", '{"at":[1,2],"element":"#a","x":1}')),
    ("pointer_target_not_json", ProposedAction("click", "{#a")),
    ("pointer_target_fraction", ProposedAction("click", '{"at":[1.5,2],"element":"#a"}')),
    ("pointer_target_negative", ProposedAction("click", '{"at":[-1,2],"element":"#a"}')),
    ("pointer_target_too_large", ProposedAction("click", f'{{"at":[{MAX_COORDINATE + 1},2],"element":"#a"}}')),
    ("pointer_target_without_point", ProposedAction("click", '{"element":"#a"}')),
    ("pointer_target_on_navigate", ProposedAction("navigate", '{"at":[1,2],"element":"#a"}')),
    ("type_pointer_not_focused", ProposedAction("type", '{"at":[1,2],"element":"#a"}', "x")),
    ("drag_one_point", ProposedAction("drag", '{"at":[1,2],"element":"#a","to_element":"#b"}')),
    ("focused_false", ProposedAction("type", '{"element":"#a","focused":false}', "x")),
    ("pointer_target_lone_surrogate", ProposedAction("click", '{"at":[1,2],"element":"\\ud800"}')),
    ("pointer_target_deep_nesting", ProposedAction("click", '{"at":' + "[" * 2000)),
]


@dataclass(frozen=True)
class _Key:
    secret: bytes
    key_id: str


def _hexify(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {k: _hexify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hexify(v) for v in value]
    return value


def _pointer_case(name: str, target: PointerTarget) -> dict[str, Any]:
    return {"name": name, "fields": target.fields(), "text": target.text()}


def _proposal(p: ProposedAction) -> dict[str, Any]:
    return {"kind": p.kind, "target": p.target, "value": p.value}


def browser_vectors() -> dict[str, Any]:
    from tests.vectors.generate import LINEAGE_KEY, PRODUCER_SEED, REDACTION_KEY, _producer

    signer = _producer()
    lineage_key = _Key(LINEAGE_KEY, canonical.hmac_key_id(LINEAGE_KEY))
    session = _session(SESSION_ID, FRAMES, PROPOSALS, FINAL, signer, lineage_key, REDACTION_KEY, RESULT_SUBMISSION_ID)
    pointer_session = _session(
        POINTER_SESSION_ID,
        POINTER_FRAMES,
        POINTER_PROPOSALS,
        POINTER_FINAL,
        signer,
        lineage_key,
        REDACTION_KEY,
        POINTER_RESULT_SUBMISSION_ID,
    )
    snapshot_cases = [
        {
            "name": name,
            "raw": raw,
            "typed_values": values,
            "normalised": normalise_snapshot(raw, key=REDACTION_KEY, typed_values=values),
        }
        for name, raw, values in SNAPSHOT_CASES
    ]
    invalid = []
    for name, proposed in INVALID_PROPOSALS:
        try:
            validate_proposal(proposed, index=0)
        except InvalidAction as exc:
            invalid.append({"name": name, "proposed": _proposal(proposed), "code": exc.code, "field": exc.field})
        else:  # pragma: no cover - a generator bug
            raise AssertionError(f"{name} is a valid proposal")
    return {
        "description": (
            "One browser session's computer-use action records as a producer SDK builds them (tests/vectors/"
            "browser_vectors.py; producers/computer_use/session.py). Per step: the driver's frame (screenshot bytes, "
            "raw accessibility snapshot, url) and the agent's proposal (kind, target, raw value or null) give the "
            "normalised, redacted snapshot (redaction key, and the values of the session's earlier type/select "
            'actions), the canonical action (value_digest = typed-value digest under the redaction key, or ""), '
            "screenshot_hash, dom_digest = sha256(snapshot), observation_hash, prev_anchor (the session genesis for "
            "action 0), anchor, the lineage entry (canonical JSON), its HMAC under the lineage key and Ed25519 "
            "signature under the producer key, both over PAE(bernstein/lineage-entry/v1, entry), the submission id "
            "(first 32 hex digits of sha256(run_id NUL session_id NUL decimal index NUL anchor)) and the "
            "ComputerUseAction.v2 record and bytes (producer.sdk and occurred_at_ms as stated). The session then "
            "ends: final_observation, the action log blob, the session document and the signed browser result "
            "(observations: each step's screenshot and snapshot, first occurrence only, ref action-<index, 6 "
            "digits>, then the final frame's (ref final), then the action log (ref session:<session id>)). "
            "pointer_session is a second session of the same run driven in a model's computer-use format: every "
            "target is a pointer target (canonical JSON naming the point and the element under it, or the focused "
            "element; bernstein.schemas.documents.pointer), its result submission id stated; pointer_targets pins "
            "a pointer target's canonical text from its fields. snapshots pins the normalisation and redaction rule; "
            "invalid_proposals the proposals the boundary refuses before any value is digested."
        ),
        "keys": {
            "producer_id": WORKER,
            "ed25519_seed_hex": PRODUCER_SEED.hex(),
            "key_id": signer.key_id,
            "lineage_hmac_key_hex": LINEAGE_KEY.hex(),
            "lineage_hmac_key_id": lineage_key.key_id,
            "redaction_hmac_key_hex": REDACTION_KEY.hex(),
        },
        "rules": {
            "action_kinds": sorted(ACTION_KINDS),
            "value_kinds": sorted(VALUE_KINDS),
            "scrubbed_kinds": sorted(SCRUBBED_KINDS),
            "min_scrub_chars": MIN_SCRUB_CHARS,
            "terminal_states": {state.value: mapped.value for state, mapped in TERMINAL_STATE_MAP.items()},
        },
        "session": session,
        "pointer_session": pointer_session,
        "pointer_targets": [_pointer_case(name, t) for name, t in POINTER_TARGETS],
        "snapshots": snapshot_cases,
        "invalid_proposals": invalid,
    }


def _session(
    session_id: str,
    frames: list[tuple[bytes, str, str]],
    proposals: list[ProposedAction],
    final_frame: tuple[bytes, str, str],
    signer: Any,
    lineage_key: _Key,
    redaction_key: bytes,
    result_submission_id: str,
) -> dict[str, Any]:
    """One session's steps, final observation, action log, document and signed result (the vectors' "session")."""
    start = genesis(RUN_ID, session_id)
    typed: set[str] = set()
    records: list[ActionRecord] = []
    sizes: dict[str, int] = {}
    steps = []
    for index, ((shot, aria, url), proposed) in enumerate(zip(frames, proposals, strict=True)):
        snapshot = normalise_snapshot(aria, key=redaction_key, typed_values=typed).encode()
        hashes = observation_hashes(shot, snapshot)
        action = canonical_action(proposed, key=redaction_key, index=index)
        prev = records[-1].anchor if records else start
        link = anchor(prev, hashes.observation_hash, action)
        envelope = seal_lineage(
            lineage_entry(
                LineageBinding(RUN_ID, session_id, index, link, prev, WORKER),
                key_id=signer.key_id,
                hmac_key_id=lineage_key.key_id,
                observation_hash=hashes.observation_hash,
                screenshot_hash=hashes.screenshot_hash,
                dom_digest=hashes.dom_digest,
                action=action,
            ),
            signer=signer,  # type: ignore[arg-type]
            envelope_key=lineage_key,  # type: ignore[arg-type]
        )
        record = ActionRecord(
            index, prev, link, hashes.screenshot_hash, hashes.dom_digest, hashes.observation_hash, action, envelope
        )
        submission_id = hashlib.sha256(f"{RUN_ID}\x00{session_id}\x00{index}\x00{link}".encode()).hexdigest()[:32]
        wire = {
            "submission_id": submission_id,
            "run_id": RUN_ID,
            "session_id": session_id,
            "action_index": index,
            "producer": {"id": WORKER, "sdk": SDK},
            "prev_anchor": prev,
            "screenshot_hash": hashes.screenshot_hash,
            "screenshot_size": len(shot),
            "dom_digest": hashes.dom_digest,
            "dom_size": len(snapshot),
            "observation_hash": hashes.observation_hash,
            "action": action.to_record(),
            "anchor": link,
            "lineage": envelope.to_record(),
            "occurred_at_ms": OCCURRED_AT + index,
        }
        steps.append(
            {
                "frame": {"screenshot_hex": shot.hex(), "aria_snapshot": aria, "url": url},
                "proposed": _proposal(proposed),
                "occurred_at_ms": OCCURRED_AT + index,
                "snapshot_normalised": snapshot.decode(),
                "screenshot_hash": hashes.screenshot_hash,
                "dom_digest": hashes.dom_digest,
                "observation_hash": hashes.observation_hash,
                "action": action.to_record(),
                "prev_anchor": prev,
                "anchor": link,
                "lineage_entry_canonical_utf8": envelope.entry.decode(),
                "lineage_hmac": envelope.hmac,
                "lineage_signature_hex": envelope.signature.hex(),
                "lineage_entry_hash": envelope.entry_hash,
                "submission_id": submission_id,
                "record": _hexify(wire),
                "value_hex": codec.encode(codec.COMPUTER_USE_ACTION_V2, wire).hex(),
            }
        )
        records.append(record)
        sizes.setdefault(hashes.screenshot_hash, len(shot))
        sizes.setdefault(hashes.dom_digest, len(snapshot))
        if proposed.kind in SCRUBBED_KINDS and proposed.value:
            typed.add(proposed.value)
    final_shot, final_aria, final_url = final_frame
    final_snapshot = normalise_snapshot(final_aria, key=redaction_key, typed_values=typed).encode()
    final = observation_hashes(final_shot, final_snapshot)
    sizes.setdefault(final.screenshot_hash, len(final_shot))
    sizes.setdefault(final.dom_digest, len(final_snapshot))
    log = action_log_bytes(RUN_ID, session_id, records)
    log_hash = canonical.sha256_digest(log)
    state = ComputerUseTerminalState.OK
    document = session_document(
        run_id=RUN_ID,
        session_id=session_id,
        genesis=start,
        records=records,
        action_log=log_hash,
        terminal_state=state,
        reason_code="ok",
        adapter=ADAPTER,
        worker_id=WORKER,
        final=final,
    )
    observations: list[Observation] = []
    seen: set[str] = set()
    for r in records:
        for kind, digest in (("screenshot", r.screenshot_hash), ("snapshot", r.dom_digest)):
            if digest not in seen:
                seen.add(digest)
                observations.append(Observation(kind, f"action-{r.index:06d}", digest, sizes[digest]))
    for kind, digest in (("screenshot", final.screenshot_hash), ("snapshot", final.dom_digest)):
        if digest not in seen:
            seen.add(digest)
            observations.append(Observation(kind, "final", digest, sizes[digest]))
    observations.append(Observation("action_log", f"session:{session_id}", log_hash, len(log)))
    result = ActivityResult.build(
        "browser", document, observations, terminal_state=activity_terminal_state(state), reason_code="ok"
    )
    statement_record: dict[str, Any] = {
        "submission_id": result_submission_id,
        "run_id": RUN_ID,
        "stage_id": session_id,
        "role": ROLE,
        "producer": {"id": WORKER, "sdk": SDK},
        "kind": "browser",
        "artifact": result.artifact,
        "artifact_hash": result.artifact_hash,
        "evidence_set_hash": result.evidence_set_hash,
        "observations": [o.to_record() for o in observations],
        "terminal_state": result.terminal_state.value,
        "reason_code": result.reason_code,
        "occurred_at_ms": OCCURRED_AT + len(records),
    }
    statement = canonical.submission_statement(statement_record, signer.key_id)
    statement_record["producer_key_id"] = signer.key_id
    statement_record["producer_signature"] = signer.sign(canonical.submission_signing_input(statement))
    return {
        "run_id": RUN_ID,
        "session_id": session_id,
        "role": ROLE,
        "adapter": ADAPTER,
        "sdk": SDK,
        "genesis": start,
        "steps": steps,
        "final": {
            "frame": {"screenshot_hex": final_shot.hex(), "aria_snapshot": final_aria, "url": final_url},
            "snapshot_normalised": final_snapshot.decode(),
            "screenshot_hash": final.screenshot_hash,
            "dom_digest": final.dom_digest,
            "observation_hash": final.observation_hash,
        },
        "action_log_canonical_utf8": log.decode(),
        "action_log_hash": log_hash,
        "document": document,
        "document_canonical_utf8": result.artifact.decode(),
        "result": {
            "submission_id": result_submission_id,
            "occurred_at_ms": OCCURRED_AT + len(records),
            "statement": statement,
            "record": _hexify(statement_record),
            "value_hex": codec.encode(codec.ACTIVITY_SUBMISSION_V3, statement_record).hex(),
        },
    }
