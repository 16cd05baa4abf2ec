"""The data/ops receipt: its model, its canonical bytes and exactly what is signed.

A ``DataOpsReceipt`` is the artifact of a data or ops activity. It binds the
run, the stage, the kind, the plan projection and every signed input and
output, and it is itself signed whole, so no part can be moved to another
receipt, dropped or reordered without a signature failing. It names its
signer by KEY ID only: a verifier looks that id up in its pinned keys and
never trusts a key found in the document it checks.

Signed bytes (all produced by ``bernstein.schemas.canonical.signing_input``)::

    artifact  PAE("bernstein/dataops-artifact/v1", canonical({run_id, stage_id,
              kind, role, index, ref, content_hash, plan_hash}))
              plan_hash is null for inputs (signed before the plan exists)
              and the plan hash for outputs (computed from that plan)
    receipt   PAE("bernstein/dataops-receipt/v1", canonical(<receipt document
              without receipt_signature>))

Signatures are Ed25519, base64url without padding.

A refused activity anchors a ``bernstein.dataops.refusal/v1`` document
instead (unsigned: it claims no effect)::

    {"format", "run_id", "stage_id", "kind", "code", "message",
     "inputs": ["sha256:...", ...], "plan_hash": "sha256:..." | null}

This module is the one home of both formats and of the rules decidable from
a submission's own bytes (``submission_violation``: structure, context,
plan projection, plan-before-effect order, observations), used by the SDK
(``bernstein.producers.dataops``), the scheduler and the verifier. Signatures are
verified offline only (``bernstein.substrate.dataops_receipts``). Nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

import orjson

from bernstein.schemas.canonical import (
    DOMAIN_DATAOPS_ARTIFACT,
    DOMAIN_DATAOPS_RECEIPT,
    canonical_json,
    is_digest,
    plan_document,
    plan_hash,
    sha256_digest,
    signing_input,
)
from bernstein.schemas.documents.common import Submission, Violation, clip, show
from bernstein.schemas.errors import CanonicalizationError, MalformedDigest, MalformedInput
from bernstein.schemas.records import RefusalCode, TerminalState

RECEIPT_FORMAT: Final = "bernstein.dataops.receipt/v1"
REFUSAL_FORMAT: Final = "bernstein.dataops.refusal/v1"
ROLE_INPUT: Final = "input"
ROLE_OUTPUT: Final = "output"
DATAOPS_KINDS: Final = frozenset({"data", "ops"})

ED25519_SIGNATURE_BYTES: Final = 64
_B64URL_RE: Final = re.compile(r"[A-Za-z0-9_-]*")

_RECEIPT_FIELDS: Final = frozenset(
    {
        "format",
        "run_id",
        "stage_id",
        "kind",
        "plan",
        "inputs",
        "outputs",
        "signer_key_id",
        "receipt_signature",
    }
)
_PLAN_FIELDS: Final = frozenset({"input_hashes", "steps", "plan_hash"})
_ITEM_FIELDS: Final = frozenset({"role", "index", "ref", "content_hash", "signature"})


class Signer(Protocol):
    """What signs: an Ed25519 key known by its key id (``bernstein.substrate.keys.Ed25519Signer``)."""

    @property
    def key_id(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


class MalformedReceipt(MalformedInput):
    """Bytes that do not parse into a ``bernstein.dataops.receipt/v1`` document."""

    code = "E_MALFORMED_RECEIPT"


# --------------------------------------------------------------------------
# Signature encoding and signed statements
# --------------------------------------------------------------------------


def encode_signature(signature: bytes) -> str:
    """base64url without padding: the one text form of a signature in a receipt."""
    return base64.urlsafe_b64encode(signature).rstrip(b"=").decode("ascii")


def decode_signature(text: str) -> bytes:
    """Strictly decode base64url-no-pad; ValueError unless it is the canonical form.

    Strict (re-encoding must give the same text) so that one signature has
    exactly one spelling and a flipped padding bit cannot hide in it.
    """
    if not _B64URL_RE.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not base64url without padding")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base64url: {exc}") from exc
    if encode_signature(raw) != text:
        raise ValueError("not the canonical base64url spelling")
    return raw


def artifact_statement(
    *,
    run_id: str,
    stage_id: str,
    kind: str,
    role: str,
    index: int,
    ref: str,
    content_hash: str,
    plan_hash: str | None,
) -> dict[str, Any]:
    """The document one input/output signature covers: the bytes and their full context."""
    return {
        "run_id": run_id,
        "stage_id": stage_id,
        "kind": kind,
        "role": role,
        "index": index,
        "ref": ref,
        "content_hash": content_hash,
        "plan_hash": plan_hash,
    }


def artifact_signing_input(**statement: Any) -> bytes:
    """Exact bytes an input/output signature covers (keywords of ``artifact_statement``)."""
    return signing_input(DOMAIN_DATAOPS_ARTIFACT, artifact_statement(**statement))


def receipt_signing_input(body: Mapping[str, Any]) -> bytes:
    """Exact bytes the receipt signature covers: the document minus ``receipt_signature``."""
    return signing_input(DOMAIN_DATAOPS_RECEIPT, {k: v for k, v in body.items() if k != "receipt_signature"})


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SignedArtifact:
    """One input or output: where it came from, its content hash and its signature."""

    role: str
    index: int
    ref: str
    content_hash: str
    signature: str
    """base64url-no-pad Ed25519 signature; "" when absent (the verifier names it)."""

    @property
    def label(self) -> str:
        """How failures name it: ``input 'orders.csv'``."""
        return f"{self.role} {self.ref!r}"

    def statement(self, *, run_id: str, stage_id: str, kind: str, plan_hash: str | None) -> dict[str, Any]:
        return artifact_statement(
            run_id=run_id,
            stage_id=stage_id,
            kind=kind,
            role=self.role,
            index=self.index,
            ref=self.ref,
            content_hash=self.content_hash,
            plan_hash=plan_hash if self.role == ROLE_OUTPUT else None,
        )

    def to_document(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "index": self.index,
            "ref": self.ref,
            "content_hash": self.content_hash,
            "signature": self.signature,
        }


@dataclass(frozen=True)
class DataOpsPlan:
    """The deterministic plan: sorted unique input hashes, ordered steps and their hash."""

    input_hashes: tuple[str, ...]
    steps: tuple[str, ...]
    plan_hash: str

    @classmethod
    def derive(cls, input_hashes: Iterable[str], steps: Sequence[str]) -> DataOpsPlan:
        """Project inputs and steps through ``bernstein.schemas.canonical`` (the only place the rule lives)."""
        hashes = list(input_hashes)
        document = plan_document(hashes, steps)
        return cls(
            input_hashes=tuple(document["input_hashes"]),
            steps=tuple(document["steps"]),
            plan_hash=plan_hash(hashes, steps),
        )

    def to_document(self) -> dict[str, Any]:
        return {"input_hashes": list(self.input_hashes), "steps": list(self.steps), "plan_hash": self.plan_hash}


@dataclass(frozen=True)
class DataOpsReceipt:
    """The signed artifact of one data/ops activity (format ``bernstein.dataops.receipt/v1``)."""

    run_id: str
    stage_id: str
    kind: str
    plan: DataOpsPlan
    inputs: tuple[SignedArtifact, ...]
    outputs: tuple[SignedArtifact, ...]
    signer_key_id: str
    receipt_signature: str = ""

    def body(self) -> dict[str, Any]:
        """The document without ``receipt_signature``: what the receipt signature covers."""
        return {
            "format": RECEIPT_FORMAT,
            "run_id": self.run_id,
            "stage_id": self.stage_id,
            "kind": self.kind,
            "plan": self.plan.to_document(),
            "inputs": [item.to_document() for item in self.inputs],
            "outputs": [item.to_document() for item in self.outputs],
            "signer_key_id": self.signer_key_id,
        }

    def document(self) -> dict[str, Any]:
        """The stored document: the body plus ``receipt_signature``."""
        return {**self.body(), "receipt_signature": self.receipt_signature}

    def canonical_bytes(self) -> bytes:
        """The artifact bytes: they hash to the submission's ``artifact_hash``."""
        return canonical_json(self.document())

    @property
    def artifact_hash(self) -> str:
        return sha256_digest(self.canonical_bytes())

    def signing_input(self) -> bytes:
        return receipt_signing_input(self.body())

    def signed(self, signer: Signer) -> DataOpsReceipt:
        """This receipt with ``signer_key_id`` set and the whole body signed by ``signer``."""
        unsigned = DataOpsReceipt(
            run_id=self.run_id,
            stage_id=self.stage_id,
            kind=self.kind,
            plan=self.plan,
            inputs=self.inputs,
            outputs=self.outputs,
            signer_key_id=signer.key_id,
        )
        signature = encode_signature(signer.sign(unsigned.signing_input()))
        return replace(unsigned, receipt_signature=signature)

    @classmethod
    def parse(cls, data: bytes) -> DataOpsReceipt:
        """Parse stored receipt bytes; MalformedReceipt names what is wrong.

        Signatures are not checked here (that is ``verify.verify_receipt``),
        and a missing signature parses as "" so verification can name it.
        """
        return cls.from_document(load_document(data, what="receipt"))

    @classmethod
    def from_document(cls, document: Any) -> DataOpsReceipt:
        doc = _require_object(document, "receipt")
        if doc.get("format") != RECEIPT_FORMAT:
            raise MalformedReceipt(f"receipt format is {doc.get('format')!r}, expected {RECEIPT_FORMAT!r}")
        _no_unknown_fields(doc, _RECEIPT_FIELDS, "receipt")
        kind = _require_str(doc, "kind", "receipt")
        if kind not in DATAOPS_KINDS:
            raise MalformedReceipt(f"receipt kind {kind!r} is not one of {sorted(DATAOPS_KINDS)}")
        plan_doc = _require_object(doc.get("plan"), "receipt plan")
        _no_unknown_fields(plan_doc, _PLAN_FIELDS, "receipt plan")
        plan = DataOpsPlan(
            input_hashes=tuple(
                _require_digest(h, f"plan input_hashes[{i}]")
                for i, h in enumerate(_require_list(plan_doc, "input_hashes", "receipt plan"))
            ),
            steps=tuple(_require_step(s, i) for i, s in enumerate(_require_list(plan_doc, "steps", "receipt plan"))),
            plan_hash=_require_digest(plan_doc.get("plan_hash"), "plan plan_hash"),
        )
        signature = doc.get("receipt_signature", "")
        if not isinstance(signature, str):
            raise MalformedReceipt("receipt_signature must be a string")
        return cls(
            run_id=_require_str(doc, "run_id", "receipt"),
            stage_id=_require_str(doc, "stage_id", "receipt"),
            kind=kind,
            plan=plan,
            inputs=_parse_items(doc, "inputs", ROLE_INPUT),
            outputs=_parse_items(doc, "outputs", ROLE_OUTPUT),
            signer_key_id=_require_digest(doc.get("signer_key_id"), "signer_key_id"),
            receipt_signature=signature,
        )


# --------------------------------------------------------------------------
# Parsing helpers (shared with the refusal document)
# --------------------------------------------------------------------------


def load_document(data: bytes, *, what: str) -> dict[str, Any]:
    """Parse JSON bytes into an object; MalformedReceipt (never a foreign error) otherwise."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        # The decoder's own wording is not part of the contract (refusal records must replay byte-identically).
        raise MalformedReceipt(f"{what} is not JSON (UTF-8, RFC 8259)") from None
    return _require_object(document, what)


def is_canonical(data: bytes, document: Any) -> bool:
    """True when ``data`` is exactly the RFC 8785 form of ``document`` (no floats, no duplicates)."""
    try:
        return canonical_json(document) == data
    except (CanonicalizationError, RecursionError):
        return False


def _parse_items(doc: Mapping[str, Any], field: str, role: str) -> tuple[SignedArtifact, ...]:
    items = []
    for position, raw in enumerate(_require_list(doc, field, "receipt")):
        where = f"receipt {field}[{position}]"
        item = _require_object(raw, where)
        _no_unknown_fields(item, _ITEM_FIELDS, where)
        if item.get("role") != role:
            raise MalformedReceipt(f"{where} has role {item.get('role')!r}, expected {role!r}")
        index = item.get("index")
        if isinstance(index, bool) or index != position:
            # The index is signed: an item out of place is a reordering, not a typo.
            raise MalformedReceipt(f"{where} has index {index!r}, expected {position}")
        signature = item.get("signature", "")
        if not isinstance(signature, str):
            raise MalformedReceipt(f"{where} signature must be a string")
        items.append(
            SignedArtifact(
                role=role,
                index=position,
                ref=_require_str(item, "ref", where),
                content_hash=_require_digest(item.get("content_hash"), f"{where} content_hash"),
                signature=signature,
            )
        )
    return tuple(items)


def _require_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedReceipt(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _require_list(doc: Mapping[str, Any], field: str, where: str) -> list[Any]:
    value = doc.get(field)
    if not isinstance(value, list):
        raise MalformedReceipt(f"{where} field {field!r} must be a list")
    return value


def _require_str(doc: Mapping[str, Any], field: str, where: str) -> str:
    value = doc.get(field)
    if not isinstance(value, str) or value == "":
        raise MalformedReceipt(f"{where} field {field!r} must be a non-empty string")
    return value


def _require_digest(value: Any, where: str) -> str:
    if not is_digest(value):
        raise MalformedReceipt(f"{where} is not a digest 'sha256:<64 lowercase hex>': {value!r}")
    assert isinstance(value, str)
    return value


def _require_step(value: Any, index: int) -> str:
    if not isinstance(value, str):
        raise MalformedReceipt(f"plan steps[{index}] must be a string")
    return value


def _no_unknown_fields(doc: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise MalformedReceipt(f"{where} has unknown fields {unknown} (v1 documents are closed)")


def parse_refusal_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """Shape-check a ``bernstein.dataops.refusal/v1`` document (raises MalformedReceipt)."""
    expected = {"format", "run_id", "stage_id", "kind", "code", "message", "inputs", "plan_hash"}
    if set(document) != expected:
        raise MalformedReceipt(f"refusal fields are {clip(str(sorted(document)))}, expected {sorted(expected)}")
    if document["format"] != REFUSAL_FORMAT:
        raise MalformedReceipt(f"refusal format is {show(document['format'])}, expected {REFUSAL_FORMAT!r}")
    for name in ("run_id", "stage_id", "kind", "code"):
        if not isinstance(document[name], str) or document[name] == "":
            raise MalformedReceipt(f"refusal field {name!r} must be a non-empty string")
    if not isinstance(document["message"], str):
        raise MalformedReceipt("refusal field 'message' must be a string")
    inputs = document["inputs"]
    if not isinstance(inputs, list) or not all(is_digest(h) for h in inputs):
        raise MalformedReceipt("refusal field 'inputs' must be a list of 'sha256:<hex>' digests")
    if document["plan_hash"] is not None and not is_digest(document["plan_hash"]):
        raise MalformedReceipt("refusal field 'plan_hash' must be a digest or null")
    return dict(document)


# --------------------------------------------------------------------------
# Rules decidable from the bytes (shared by the scheduler and the verifier)
# --------------------------------------------------------------------------

PLAN_INPUTS_MISMATCH: Final = "PLAN_INPUTS_MISMATCH"
PLAN_HASH_MISMATCH: Final = "PLAN_HASH_MISMATCH"
EFFECT_BEFORE_PLAN: Final = "EFFECT_BEFORE_PLAN"


@dataclass(frozen=True)
class Problem:
    """One broken rule: a stable code, a sentence, and the anchored/recomputed values."""

    code: str
    message: str
    where: str = ""
    """Where in the document or the observations (``plan.plan_hash``, ``observations[2]``)."""
    declared: str = ""
    recomputed: str = ""


def plan_problems(receipt: DataOpsReceipt) -> list[Problem]:
    """Re-derive the plan projection from the receipt's inputs and steps; both parts must match."""
    recomputed = DataOpsPlan.derive((item.content_hash for item in receipt.inputs), receipt.plan.steps)
    problems = []
    if recomputed.input_hashes != receipt.plan.input_hashes:
        problems.append(
            Problem(
                PLAN_INPUTS_MISMATCH,
                f"plan input_hashes mismatch: anchored {list(receipt.plan.input_hashes)}, "
                f"recomputed {list(recomputed.input_hashes)}",
                "plan.input_hashes",
                ",".join(receipt.plan.input_hashes),
                ",".join(recomputed.input_hashes),
            )
        )
    if recomputed.plan_hash != receipt.plan.plan_hash:
        problems.append(
            Problem(
                PLAN_HASH_MISMATCH,
                f"plan_hash mismatch: anchored {receipt.plan.plan_hash}, recomputed {recomputed.plan_hash}",
                "plan.plan_hash",
                receipt.plan.plan_hash,
                recomputed.plan_hash,
            )
        )
    return problems


def order_problem(observation_kinds: Sequence[object], *, plan_hash: str | None) -> Problem | None:
    """The plan-before-effect order, as the stage's observations record it.

    Inputs are recorded first, the plan is derived from all of them, and only
    then are effects (outputs) recorded; the observations list them in that
    order. So an ``input`` observed after an ``output`` is an effect before
    the plan (the plan did not yet cover every input), and a stage that never
    derived a plan (``plan_hash`` null) cannot have any output.
    """
    first_output: int | None = None
    for index, kind in enumerate(observation_kinds):
        if kind == ROLE_OUTPUT and first_output is None:
            first_output = index
            if plan_hash is None:
                return Problem(
                    EFFECT_BEFORE_PLAN,
                    f"observations[{index}] is an output, but no plan was derived (plan_hash is null): an effect before the plan",
                    f"observations[{index}]",
                    ROLE_OUTPUT,
                )
        elif kind == ROLE_INPUT and first_output is not None:
            return Problem(
                EFFECT_BEFORE_PLAN,
                f"observations[{index}] is an input recorded after output observations[{first_output}]: "
                "an effect before the plan (inputs are frozen once the plan is derived)",
                f"observations[{index}]",
                ROLE_INPUT,
            )
    return None


def observations_problems(receipt: DataOpsReceipt, observations: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """The receipt's inputs and outputs must be exactly the stage's input/output observations, in order.

    One problem per role that differs (its first difference), then one for
    observation kinds the receipt cannot list; ``where`` is the role or ``observations``.
    """
    problems = []
    for role, items in ((ROLE_INPUT, receipt.inputs), (ROLE_OUTPUT, receipt.outputs)):
        journalled = [(o.get("ref"), o.get("content_hash")) for o in observations if o.get("kind") == role]
        problem = _first_difference(role, items, journalled)
        if problem is not None:
            problems.append(problem)
    extra = sorted({str(o.get("kind")) for o in observations} - {ROLE_INPUT, ROLE_OUTPUT})
    if extra:
        problems.append(
            Problem(
                "OBSERVATIONS_MISMATCH",
                f"journal entry has observations of kind {clip(str(extra))} that the receipt does not list",
                "observations",
                clip(",".join(extra)),
            )
        )
    return problems


def _first_difference(role: str, items: Sequence[SignedArtifact], journalled: Sequence[tuple[Any, Any]]) -> Problem | None:
    """Name the first place the receipt's list and the journal's observations diverge."""
    for index, (item, (ref, content_hash)) in enumerate(zip(items, journalled, strict=False)):
        if item.ref != ref or item.content_hash != content_hash:
            return Problem(
                "OBSERVATIONS_MISMATCH",
                f"{role} {index} differs between receipt and journal entry: "
                f"receipt {show(item.ref)} {item.content_hash}, journal {show(ref)} {clip(str(content_hash))}",
                role,
                f"{clip(str(ref))} {clip(str(content_hash))}",
                f"{clip(item.ref)} {item.content_hash}",
            )
    if len(items) != len(journalled):
        noun = role if len(items) == 1 else f"{role}s"
        return Problem(
            "OBSERVATIONS_MISMATCH",
            f"receipt lists {len(items)} {noun}, the journal entry observed {len(journalled)}",
            role,
            str(len(journalled)),
            str(len(items)),
        )
    return None


# --------------------------------------------------------------------------
# The scheduler's rule
# --------------------------------------------------------------------------


def submission_violation(sub: Submission) -> Violation | None:
    """The first data/ops rule a submission breaks, decided from its own bytes only.

    * a ``bernstein.dataops.refusal/v1`` artifact: well formed and canonical,
      of this run/stage/kind, anchored as ``refused`` with reason_code = its
      code lower-cased, observations in plan-before-effect order (no output
      without a plan), its inputs = the input observations;
    * a ``failed`` / ``timed_out`` stage whose artifact is no receipt: nothing
      signed to check, accepted;
    * anything else must be a receipt: well formed and canonical, of this
      run/stage/kind, anchored as ``completed``, plan projection recomputes,
      observations in plan-before-effect order and equal to its inputs then
      outputs. Signatures are not checked here (the verifier's, with pinned keys).
    """
    try:
        fmt = load_document(sub.artifact, what="artifact").get("format")
    except MalformedReceipt:
        fmt = None
    except RecursionError:  # orjson caps nesting; belt and braces
        fmt = None
    if fmt == REFUSAL_FORMAT:
        return _refusal_violation(sub)
    if fmt != RECEIPT_FORMAT and sub.terminal_state in (TerminalState.FAILED, TerminalState.TIMED_OUT):
        return None
    return _receipt_violation(sub)


def _receipt_violation(sub: Submission) -> Violation | None:
    try:
        document = load_document(sub.artifact, what="receipt")
        receipt = DataOpsReceipt.from_document(document)
    except (MalformedReceipt, MalformedDigest) as exc:
        return Violation(RefusalCode.DATAOPS_RECEIPT_MALFORMED, f"receipt is malformed: {clip(exc.message, 512)}")
    if not is_canonical(sub.artifact, document):
        return Violation(
            RefusalCode.DATAOPS_RECEIPT_MALFORMED,
            "receipt bytes are not canonical JSON (RFC 8785): they are not the bytes that were signed and anchored",
        )
    context = _context_violation("receipt", receipt.run_id, receipt.stage_id, receipt.kind, sub)
    if context is not None:
        return context
    for problem in plan_problems(receipt):
        code = RefusalCode.DATAOPS_PLAN_INPUTS_MISMATCH
        if problem.code == PLAN_HASH_MISMATCH:
            code = RefusalCode.DATAOPS_PLAN_HASH_MISMATCH
        return Violation(code, clip(problem.message, 1024), f"artifact.{problem.where}", problem.declared, problem.recomputed)
    if sub.terminal_state != TerminalState.COMPLETED:
        return Violation(
            RefusalCode.DATAOPS_OUTCOME_MISMATCH,
            f"artifact is a receipt, which is anchored as 'completed', not {sub.terminal_state!r}",
            "terminal_state",
            sub.terminal_state,
            TerminalState.COMPLETED.value,
        )
    order = order_problem([o.get("kind") for o in sub.observations], plan_hash=receipt.plan.plan_hash)
    if order is not None:
        return Violation(RefusalCode.DATAOPS_EFFECT_BEFORE_PLAN, order.message, order.where, order.declared)
    for mismatch in observations_problems(receipt, sub.observations):
        return Violation(
            RefusalCode.DATAOPS_OBSERVATIONS_MISMATCH,
            clip(mismatch.message, 1024),
            "observations",
            mismatch.declared,
            mismatch.recomputed,
        )
    return None


def _refusal_violation(sub: Submission) -> Violation | None:
    try:
        document = load_document(sub.artifact, what="refusal")
        refusal = parse_refusal_document(document)
    except MalformedReceipt as exc:
        return Violation(RefusalCode.DATAOPS_REFUSAL_MALFORMED, f"refusal is malformed: {clip(exc.message, 512)}")
    if not is_canonical(sub.artifact, document):
        return Violation(RefusalCode.DATAOPS_REFUSAL_MALFORMED, "refusal bytes are not canonical JSON (RFC 8785)")
    context = _context_violation("refusal", refusal["run_id"], refusal["stage_id"], refusal["kind"], sub)
    if context is not None:
        return context
    code: str = refusal["code"]
    for name, declared, expected in (
        ("terminal_state", sub.terminal_state, TerminalState.REFUSED.value),
        ("reason_code", sub.reason_code, code.lower()),
    ):
        if declared != expected:
            return Violation(
                RefusalCode.DATAOPS_OUTCOME_MISMATCH,
                f"artifact is a refusal ({show(code)}), anchored with {name} {clip(expected)!r}, not {show(declared)}",
                name,
                declared,
                expected,
            )
    order = order_problem([o.get("kind") for o in sub.observations], plan_hash=refusal["plan_hash"])
    if order is not None:
        return Violation(RefusalCode.DATAOPS_EFFECT_BEFORE_PLAN, order.message, order.where, order.declared)
    observed_inputs = [o.get("content_hash") for o in sub.observations if o.get("kind") == ROLE_INPUT]
    if observed_inputs != refusal["inputs"]:
        return Violation(
            RefusalCode.DATAOPS_OBSERVATIONS_MISMATCH,
            clip(f"refusal lists inputs {refusal['inputs']}, the journal entry observed {observed_inputs}", 1024),
            "observations",
            ",".join(str(h) for h in observed_inputs),
            ",".join(refusal["inputs"]),
        )
    return None


def _context_violation(what: str, run_id: str, stage_id: str, kind: str, sub: Submission) -> Violation | None:
    for name, mine, anchored in (("run_id", run_id, sub.run_id), ("stage_id", stage_id, sub.stage_id), ("kind", kind, sub.kind)):
        if mine != anchored:
            return Violation(
                RefusalCode.DATAOPS_CONTEXT_MISMATCH,
                f"{what} {name} {show(mine)} does not match the submission's {anchored!r}",
                f"artifact.{name}",
                mine,
                anchored,
            )
    return None
