"""Who sent an input, and whether its envelope holds: the checks that come before the stage rules.

``InputValidation._validate`` is a submission's whole check in the order of ``bernstein.consumers.core.step``'s
module doc: its ids, its envelope (labels, time, record key = run id, the key's partition:
``_envelope_refusal``), the producer's signature (``_producer_refusal``), then the stage rules
(``rules.StageRules``). ``_validate_action`` is a computer-use action's, with its signed lineage entry
(``_lineage_refusal``). A refusal reached after the signature verified is marked authenticated. A separate
module because these checks decide who may write at all (docs/security.md); the stage rules then decide what.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from bernstein.consumers.core.evidence import _action_blobs, _cap_refusal, _size_refusal, _undeclared_refusal
from bernstein.consumers.core.model import InputRecord, Producer, ProducerKey, SchedulerState
from bernstein.consumers.core.refusal import _clip, _invalid_id, _malformed_digest, _Refusal, _too_deep, _too_large
from bernstein.consumers.core.rules import StageRules, _duplicate_submission
from bernstein.schemas import codec
from bernstein.schemas.canonical import (
    action_anchor,
    canonical_json,
    computer_use_genesis,
    is_digest,
    is_mac,
    json_nesting_exceeds,
    lineage_hmac,
    lineage_signing_input,
    macs_equal,
    run_close_statement,
    sha256_digest,
    submission_signing_input,
    submission_statement,
)
from bernstein.schemas.documents.browser import LineageBinding
from bernstein.schemas.ed25519 import verify_signature
from bernstein.schemas.errors import CanonicalizationError
from bernstein.schemas.partitioning import partition_for
from bernstein.schemas.records import (
    ACTION_KINDS,
    LABEL_RULE,
    MAX_LINEAGE_ENTRY_BYTES,
    MAX_OCCURRED_AT_MS,
    MAX_REF_LENGTH,
    RefusalCode,
    is_valid_id,
    is_valid_label,
)

_SIGNED_INPUTS = frozenset({codec.ACTIVITY_SUBMISSION_V3, codec.RUN_CLOSE_V2})
_SIGNED_VERSION = {
    codec.ACTIVITY_SUBMISSION: codec.ACTIVITY_SUBMISSION_V3,
    codec.ACTIVITY_SUBMISSION_V2: codec.ACTIVITY_SUBMISSION_V3,
    codec.RUN_CLOSE: codec.RUN_CLOSE_V2,
}
"""The signed schema that replaces each unsigned input schema (SUBMISSION_UNSIGNED names it)."""
_MAX_SIGNATURE_SHOWN = 128
"""A refusal shows at most this many bytes of a signature (hex)."""


class InputValidation(StageRules):
    """The checks of an input from its ids to its signature, a part of ``SchedulerCore``."""

    def _validate(self, state: SchedulerState, record: InputRecord, sub: dict[str, Any], schema: str) -> _Refusal | None:
        """The first refusal a submission earns, or None; refusals after its signature verified say so."""
        run_id, stage_id, role = sub["run_id"], sub["stage_id"], sub["role"]
        for code, field, value in (
            (RefusalCode.INVALID_RUN_ID, "run_id", run_id),
            (RefusalCode.INVALID_STAGE_ID, "stage_id", stage_id),
            (RefusalCode.INVALID_ROLE, "role", role),
        ):
            if not is_valid_id(value):
                return _invalid_id(code, field, value)
        refusal = _envelope_refusal(record, sub, self.config.submission_partitions) or self._producer_refusal(
            record, sub, schema, role=role
        )
        if refusal is not None:
            return refusal
        refusal = self._validate_signed(state, sub, schema)
        return None if refusal is None else replace(refusal, authenticated=True)

    def _producer_refusal(self, record: InputRecord, item: dict[str, Any], schema: str, *, role: str | None) -> _Refusal | None:
        """Who may submit (docs/security.md): a producer key registered in the manifest signed this very input.

        In order: unsigned -> key unknown -> producer mismatch -> key not valid at the input's Kafka
        timestamp -> signature -> role not granted (``role`` None: a run close, which takes no role).
        """
        if schema not in _SIGNED_INPUTS:
            signed = _SIGNED_VERSION[schema]
            return _Refusal(
                RefusalCode.SUBMISSION_UNSIGNED,
                f"this {schema} carries no producer signature; publish {signed}, signed by a producer key registered "
                "in the roles manifest",
                "producer_signature",
                schema,
                signed,
            )
        key_id: str = item["producer_key_id"]
        found = self.config.producers.lookup(key_id)
        if found is None:
            return _Refusal(
                RefusalCode.PRODUCER_KEY_UNKNOWN,
                f"the signing key {_clip(key_id, 80)} is not registered to any producer in the roles manifest ([[producers]])",
                "producer_key_id",
                _clip(key_id),
            )
        producer, key = found
        producer_id: str = item["producer"]["id"]
        refusal = _key_holder_refusal(producer, key, key_id, producer_id, record.timestamp_ms, "producer_key_id")
        if refusal is not None:
            return refusal
        signature: bytes = item["producer_signature"]
        shown = signature[:_MAX_SIGNATURE_SHOWN].hex()
        try:
            if schema == codec.RUN_CLOSE_V2:
                statement = run_close_statement(
                    item["submission_id"], item["run_id"], producer_id, item["occurred_at_ms"], key_id
                )
            else:
                statement = submission_statement(item, key_id)
            signed_bytes = submission_signing_input(statement)
        except CanonicalizationError:
            return _Refusal(
                RefusalCode.SUBMISSION_SIGNATURE_INVALID,
                "the submission statement has no canonical JSON form (an integer beyond 2**53 - 1): no signature "
                "can verify over it",
                "producer_signature",
                _clip(shown),
            )
        if not verify_signature(key.public_key, signature, signed_bytes):
            return _Refusal(
                RefusalCode.SUBMISSION_SIGNATURE_INVALID,
                f"the producer signature does not verify under key {key_id} over the {schema} statement "
                f"(signed bytes {sha256_digest(signed_bytes)})",
                "producer_signature",
                _clip(shown),
                sha256_digest(signed_bytes),
            )
        # An undeclared role is refused by the stage rules as UNKNOWN_ROLE, not as a missing grant.
        if role is not None and role in self.config.roles and role not in producer.roles:
            return _Refusal(
                RefusalCode.PRODUCER_ROLE_NOT_ALLOWED,
                f"producer {producer.name!r} is not granted role {role!r} in the roles manifest",
                "role",
                role,
                _clip(", ".join(sorted(producer.roles))),
                authenticated=True,  # the signature verified: only the grant is missing
            )
        return None

    def _validate_action(
        self, state: SchedulerState, record: InputRecord, act: dict[str, Any], *, sized: bool = False
    ) -> _Refusal | None:
        run_id, session_id = act["run_id"], act["session_id"]
        if not is_valid_id(run_id):
            return _invalid_id(RefusalCode.INVALID_RUN_ID, "run_id", run_id)
        if not is_valid_id(session_id):
            return _invalid_id(RefusalCode.INVALID_SESSION_ID, "session_id", session_id)
        refusal = _envelope_refusal(record, act, self.config.submission_partitions) or _duplicate_submission(state, act)
        if refusal is not None:
            return refusal
        action = act["action"]
        if action["kind"] not in ACTION_KINDS:
            return _Refusal(
                RefusalCode.UNKNOWN_ACTION_KIND,
                f"action kind {_clip(action['kind'], 64)!r} is not one of {', '.join(sorted(ACTION_KINDS))}",
                "action.kind",
                _clip(action["kind"]),
            )
        if len(action["target"]) > MAX_REF_LENGTH or act["action_index"] < 0:
            return _Refusal(
                RefusalCode.INVALID_ACTION,
                f"action target longer than {MAX_REF_LENGTH} or negative index",
                "action",
                _clip(action["target"]),
            )
        for name in ("prev_anchor", "screenshot_hash", "dom_digest", "observation_hash", "anchor"):
            if not is_digest(act[name]):
                return _malformed_digest(name, act[name])
        if action["value_digest"] and not is_mac(action["value_digest"]):
            return _malformed_digest("action.value_digest", action["value_digest"])
        if sized:
            refusal = _size_refusal("screenshot_size", act["screenshot_size"]) or _size_refusal("dom_size", act["dom_size"])
            if refusal is not None:
                return refusal
        recomputed = action_anchor(act["prev_anchor"], act["observation_hash"], action)
        if recomputed != act["anchor"]:
            return _Refusal(
                RefusalCode.ANCHOR_MISMATCH,
                f"anchor mismatch at action {act['action_index']}: declared {act['anchor']}, recomputed {recomputed}",
                "anchor",
                act["anchor"],
                recomputed,
            )
        run = state.runs.get(run_id)
        if run is not None and run.closed:
            return _Refusal(
                RefusalCode.RUN_CLOSED, f"run {run_id!r} is closed and sealed; no action may follow", "run_id", run_id
            )
        session = run.sessions.get(session_id) if run is not None else None
        if session is not None and session.closed:
            return _Refusal(
                RefusalCode.SESSION_CLOSED,
                f"session {session_id!r} already ended with its browser result",
                "session_id",
                session_id,
            )
        expected_index = session.next_index if session is not None else 0
        expected_prev = session.last_anchor if session is not None else computer_use_genesis(run_id, session_id)
        if act["action_index"] != expected_index:
            return _Refusal(
                RefusalCode.ACTION_OUT_OF_ORDER,
                f"session {session_id!r} expects action {expected_index}, got {act['action_index']}",
                "action_index",
                str(act["action_index"]),
                str(expected_index),
            )
        if act["prev_anchor"] != expected_prev:
            return _Refusal(
                RefusalCode.ANCHOR_DOES_NOT_FOLLOW,
                f"action {expected_index} of session {session_id!r} does not follow the last accepted anchor",
                "prev_anchor",
                act["prev_anchor"],
                expected_prev,
            )
        refusal = self._lineage_refusal(record, act)
        if refusal is not None:
            return refusal
        refusal = self._owner_refusal(run_id, act["producer"]["id"])
        if refusal is None and sized:
            refusal = _cap_refusal(run_id, run, _action_blobs(act))
        elif refusal is None and not self.config.accept_undeclared_sizes:
            refusal = _undeclared_refusal(codec.COMPUTER_USE_ACTION, "a screenshot and a DOM snapshot", "evidence")
        refusal = refusal or self._open_runs_refusal(state, run_id, act["producer"]["id"])
        return None if refusal is None else replace(refusal, authenticated=True)

    def _lineage_refusal(self, record: InputRecord, act: dict[str, Any]) -> _Refusal | None:
        """The signed lineage entry must bind this very action, under a registered producer key.

        Its Ed25519 signature is the producer's signature (docs/security.md): the key must be registered
        to producer.id, valid at the input's Kafka timestamp, and the producer granted agent kind browser.
        The HMAC envelope is checked only when ``hmac_key_id`` names one of the scheduler's audit keys
        (entries written before producer identities); otherwise it is keyed with the producer's own
        lineage key, which the scheduler does not hold, and only its form is checked.
        """
        lineage = act["lineage"]
        entry_bytes: bytes = lineage["entry"]
        if len(entry_bytes) > MAX_LINEAGE_ENTRY_BYTES:
            return _too_large(
                RefusalCode.LINEAGE_TOO_LARGE, "lineage entry", "lineage.entry", entry_bytes, MAX_LINEAGE_ENTRY_BYTES
            )
        if json_nesting_exceeds(entry_bytes):
            return _too_deep("lineage.entry")
        try:
            entry = json.loads(entry_bytes)
            if not isinstance(entry, dict) or canonical_json(entry) != entry_bytes:
                raise ValueError("not canonical JSON")
        except (ValueError, UnicodeDecodeError, CanonicalizationError):
            return _Refusal(RefusalCode.LINEAGE_MALFORMED, "lineage entry is not a canonical JSON object", "lineage.entry")
        binding = LineageBinding(
            act["run_id"], act["session_id"], act["action_index"], act["anchor"], act["prev_anchor"], act["producer"]["id"]
        )
        expected = binding.required(lineage["key_id"])
        for name, value in expected.items():
            if entry.get(name) != value:
                return _Refusal(
                    RefusalCode.LINEAGE_MISMATCH,
                    f"lineage entry field {name!r} does not bind this action",
                    f"lineage.entry.{name}",
                    _clip(json.dumps(entry.get(name))),
                    _clip(json.dumps(value)),
                )
        hmac_key_id = entry.get("hmac_key_id")
        audit_secret = self.config.audit_secret(hmac_key_id) if isinstance(hmac_key_id, str) else None
        if audit_secret is not None:
            hmac_ok = macs_equal(lineage_hmac(audit_secret, entry_bytes), lineage["hmac"])
        else:
            hmac_ok = is_mac(lineage["hmac"])
        if not hmac_ok:
            return _Refusal(
                RefusalCode.LINEAGE_HMAC_INVALID,
                "lineage entry HMAC envelope does not verify"
                if audit_secret is not None
                else "lineage entry HMAC envelope is not of the form hmac-sha256:<64 lowercase hex>",
                "lineage.hmac",
                _clip(lineage["hmac"]),
            )
        key_id = lineage["key_id"]
        found = self.config.producers.lookup(key_id)
        if found is None:
            return _Refusal(
                RefusalCode.LINEAGE_KEY_NOT_PINNED,
                f"lineage entry is signed by key {_clip(key_id, 80)}, which is not a registered producer key",
                "lineage.key_id",
                _clip(key_id),
            )
        producer, key = found
        refusal = _key_holder_refusal(producer, key, key_id, act["producer"]["id"], record.timestamp_ms, "lineage.key_id")
        if refusal is not None:
            return refusal
        if not verify_signature(key.public_key, lineage["signature"], lineage_signing_input(entry_bytes)):
            return _Refusal(RefusalCode.LINEAGE_SIGNATURE_INVALID, "lineage entry signature does not verify", "lineage.signature")
        if "browser" not in producer.agent_kinds:
            return _Refusal(
                RefusalCode.PRODUCER_ROLE_NOT_ALLOWED,
                f"producer {producer.name!r} is not granted agent kind 'browser' in the roles manifest",
                "kind",
                "browser",
                _clip(", ".join(sorted(producer.agent_kinds))),
                authenticated=True,  # the signature verified: only the grant is missing
            )
        return None


def _key_holder_refusal(
    producer: Producer, key: ProducerKey, key_id: str, producer_id: str, timestamp_ms: int, key_field: str
) -> _Refusal | None:
    """A registered key must sign for the producer it belongs to, inside its lifetime (submissions and lineage alike)."""
    if producer_id != producer.name:
        return _Refusal(
            RefusalCode.PRODUCER_MISMATCH,
            f"producer.id {producer_id!r} is not {producer.name!r}, the producer key {key_id} is registered to",
            "producer.id",
            producer_id,
            _clip(producer.name),
        )
    if not key.lifetime.contains(timestamp_ms):
        valid = _lifetime_text(key.lifetime.valid_from_ms, key.lifetime.valid_until_ms)
        return _Refusal(
            RefusalCode.PRODUCER_KEY_NOT_VALID,
            f"producer key {key_id} of {producer.name!r} signs inputs stamped {valid}; this input is stamped "
            f"{timestamp_ms} (retired, revoked or not yet valid)",
            key_field,
            str(timestamp_ms),
            valid,
        )
    return None


def _envelope_refusal(record: InputRecord, item: dict[str, Any], partitions: int | None) -> _Refusal | None:
    """The fields every input record carries besides its ids: labels, time, the record key and its partition.

    ``item`` is an ActivitySubmission, ComputerUseAction or RunClose whose run_id is valid; ``partitions``
    the submissions topic's partition count (None: the partition is not checked).
    """
    submission_id = item["submission_id"]
    if not is_valid_label(submission_id):
        return _Refusal(RefusalCode.INVALID_SUBMISSION_ID, f"submission_id {LABEL_RULE}", "submission_id", _clip(submission_id))
    for name in ("id", "sdk"):
        value = item["producer"][name]
        if not is_valid_label(value):
            return _Refusal(RefusalCode.INVALID_PRODUCER, f"producer.{name} {LABEL_RULE}", f"producer.{name}", _clip(value))
    occurred_at_ms = item["occurred_at_ms"]
    if not 0 <= occurred_at_ms <= MAX_OCCURRED_AT_MS:
        return _Refusal(
            RefusalCode.INVALID_OCCURRED_AT,
            f"occurred_at_ms must be 0 to {MAX_OCCURRED_AT_MS} (1970-01-01 to 9999-12-31 UTC), got {occurred_at_ms}",
            "occurred_at_ms",
            str(occurred_at_ms),
            str(MAX_OCCURRED_AT_MS),
        )
    run_id: str = item["run_id"]
    expected = run_id.encode()
    key = _key_of(record)
    if key != expected:
        run_digest = sha256_digest(expected)
        if key is None:
            message = f"the record has no key; a record of run {run_id!r} ({run_digest}) must be keyed by its run id"
            declared = ""
        else:
            declared = sha256_digest(key)
            message = (
                f"the record key ({len(key)} bytes, {declared}) is not the run id {run_id!r} ({run_digest}): "
                "a record must be keyed by its run id"
            )
        return _Refusal(RefusalCode.RUN_KEY_MISMATCH, message, "key", declared, run_digest)
    if partitions is not None:
        return _partition_refusal(run_id, expected, record.partition, partitions)
    return None


def _partition_refusal(run_id: str, key: bytes, partition: int, partitions: int) -> _Refusal | None:
    """A record keyed by its run id sits on the partition Kafka's murmur2 partitioner gives that key, or is refused.

    Otherwise a producer on another partitioner (librdkafka's CRC-32 default) would split the run over
    several partitions, each with its own chain. Evidence: the record's partition (``declared``), the
    expected one (``recomputed``); the message names the partition count.
    """
    wanted = partition_for(key, partitions)
    if partition == wanted:
        return None
    return _Refusal(
        RefusalCode.WRONG_PARTITION,
        f"the record of run {run_id!r} is on partition {partition} of {partitions}, but its key belongs on partition "
        f"{wanted}: produce with Kafka's murmur2 partitioner, (murmur2(key) & 0x7fffffff) % {partitions}",
        "partition",
        str(partition),
        str(wanted),
    )


def _lifetime_text(valid_from_ms: int, valid_until_ms: int | None) -> str:
    """A key's validity range as a refusal shows it: ``[from, until)``, ``[from, )`` when open-ended."""
    return f"[{valid_from_ms}, {'' if valid_until_ms is None else valid_until_ms})"


def _key_of(record: InputRecord) -> bytes | None:
    """The record's key as bytes (Kafka's are; a str key, as a test may pass, counts as its UTF-8)."""
    key: object = record.key
    if key is None or type(key) is bytes:
        return key
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    return repr(key).encode()  # not a key Kafka could deliver; never fail on it
