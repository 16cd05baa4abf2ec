"""The data/ops phase machine: signed inputs, then one plan, then signed outputs.

The order is the guarantee. Inputs are recorded (stored, signed) first; the
plan is derived once from their hashes and the declared steps; only then may
effects run and outputs be recorded; ``finish`` seals everything into a signed
``DataOpsReceipt``. Because outputs can only exist after the plan, and inputs
can no longer change once it exists, the plan is provably the projection the
effects were computed from.

Every violation is refused with a typed ``DataOpsPhaseError`` carrying a
stable code, and is sticky: an activity that tried an effect before its plan
never yields a receipt, only ``refused_result`` (a recordable refusal).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Final

from bernstein.producers.activity import ActivityRejected, ActivityResult, require_valid_ids
from bernstein.schemas.canonical import sha256_digest
from bernstein.schemas.documents.dataops import (
    DATAOPS_KINDS,
    REFUSAL_FORMAT,
    ROLE_INPUT,
    ROLE_OUTPUT,
    DataOpsPlan,
    DataOpsReceipt,
    SignedArtifact,
    Signer,
    artifact_signing_input,
    encode_signature,
)
from bernstein.schemas.records import MAX_REF_LENGTH, ActivityKind, Observation, TerminalState
from bernstein.substrate.cas import BlobStore

MAX_STEPS: Final = 1024
MAX_STEP_LENGTH: Final = 4096


class DataOpsPhaseError(ActivityRejected):
    """A data/ops call made out of order; ``code`` says which rule was broken."""

    code = "DATAOPS_PHASE"

    def __init__(self, message: str, *, evidence: dict[str, str] | None = None) -> None:
        super().__init__(message, evidence=evidence)


class EffectBeforePlan(DataOpsPhaseError):
    code = "EFFECT_BEFORE_PLAN"


class InputAfterPlan(DataOpsPhaseError):
    code = "INPUT_AFTER_PLAN"


class PlanAlreadyDerived(DataOpsPhaseError):
    code = "PLAN_ALREADY_DERIVED"


class NoPlan(DataOpsPhaseError):
    code = "NO_PLAN"


class ActivityFinished(DataOpsPhaseError):
    """The activity already produced its receipt or its refusal."""

    code = "ACTIVITY_FINISHED"


class Phase(StrEnum):
    INPUTS = "inputs"
    """Recording signed inputs; no plan yet."""
    EFFECTS = "effects"
    """The plan is fixed; effects run and outputs are recorded."""
    FINISHED = "finished"
    """A receipt or a refusal was produced."""


class DataOpsActivity:
    """One data or ops activity of a run's stage, enforcing inputs -> plan -> outputs.

    ``store`` receives every input and output (and the receipt) before any
    event names them; ``signer`` is this producer's key (``load_producer_keys(dir).signer``),
    never a scheduler key.
    """

    def __init__(self, kind: str | ActivityKind, run_id: str, stage_id: str, *, store: BlobStore, signer: Signer) -> None:
        kind_value = kind.value if isinstance(kind, ActivityKind) else kind
        if kind_value not in DATAOPS_KINDS:
            raise ActivityRejected(
                f"a data/ops activity has kind 'data' or 'ops', not {kind_value!r}",
                code="UNKNOWN_KIND",
                evidence={"kind": str(kind_value)},
            )
        require_valid_ids(("run_id", run_id), ("stage_id", stage_id), with_evidence=True)
        self.kind: Final = ActivityKind(kind_value)
        self.run_id: Final = run_id
        self.stage_id: Final = stage_id
        self._store = store
        self._signer = signer
        self._inputs: list[SignedArtifact] = []
        self._outputs: list[SignedArtifact] = []
        self._plan: DataOpsPlan | None = None
        self._phase = Phase.INPUTS
        self._violation: DataOpsPhaseError | None = None
        self._sizes: dict[str, int] = {}
        """content hash -> byte length of every recorded input and output (declared in the submission)."""

    # -- state ----------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def plan_hash(self) -> str | None:
        return self._plan.plan_hash if self._plan is not None else None

    @property
    def violation(self) -> DataOpsPhaseError | None:
        """The first phase rule this activity broke (sticky), if any."""
        return self._violation

    def observations(self) -> tuple[Observation, ...]:
        """One observation per recorded input, then per output, in recording order."""
        return tuple(
            Observation(kind=item.role, ref=item.ref, content_hash=item.content_hash, size=self._sizes.get(item.content_hash))
            for item in (*self._inputs, *self._outputs)
        )

    # -- phases ---------------------------------------------------------------

    def add_input(self, ref: str, content: bytes) -> str:
        """Store and sign one input; only before the plan. Returns its content hash."""
        if self._phase is not Phase.INPUTS:
            self._refuse_after_finish("add an input")
            raise self._violate(
                InputAfterPlan(
                    f"inputs are frozen once the plan is derived; input {ref!r} arrived after plan {self.plan_hash}",
                    evidence={"ref": str(ref), "content_hash": _hash_of(content), "plan_hash": self.plan_hash or ""},
                )
            )
        return self._record(ROLE_INPUT, ref, content)

    def plan(self, steps: Sequence[str]) -> str:
        """Derive the plan once from the recorded input hashes and the ordered steps."""
        if self._phase is not Phase.INPUTS:
            self._refuse_after_finish("derive a plan")
            raise self._violate(
                PlanAlreadyDerived(
                    f"a plan was already derived ({self.plan_hash}); an activity has exactly one plan",
                    evidence={"plan_hash": self.plan_hash or ""},
                )
            )
        steps = _validate_steps(steps)
        self._plan = DataOpsPlan.derive((item.content_hash for item in self._inputs), steps)
        self._phase = Phase.EFFECTS
        return self._plan.plan_hash

    def add_output(self, ref: str, content: bytes) -> str:
        """Store and sign one output (an effect's result); only after the plan."""
        if self._phase is Phase.INPUTS:
            raise self._violate(
                EffectBeforePlan(
                    f"cannot record a side effect before the plan is derived (output {ref!r})",
                    evidence={"ref": str(ref), "content_hash": _hash_of(content)},
                )
            )
        self._refuse_after_finish("add an output")
        return self._record(ROLE_OUTPUT, ref, content)

    def finish(self) -> tuple[ActivityResult, DataOpsReceipt]:
        """Sign the receipt whole, store it, and return the result whose artifact it is."""
        self._refuse_after_finish("finish")
        if self._violation is not None:
            # Sticky: re-raise the broken rule so the caller publishes refused_result().
            first = self._violation
            raise type(first)(f"{first.message} (this activity can only be recorded as refused)", evidence=first.evidence)
        if self._plan is None:
            raise self._violate(
                NoPlan("no plan was derived: call plan(steps) before finish()", evidence={"inputs": str(len(self._inputs))})
            )
        receipt = DataOpsReceipt(
            run_id=self.run_id,
            stage_id=self.stage_id,
            kind=self.kind.value,
            plan=self._plan,
            inputs=tuple(self._inputs),
            outputs=tuple(self._outputs),
            signer_key_id=self._signer.key_id,
        ).signed(self._signer)
        body = receipt.canonical_bytes()
        result = ActivityResult.build(self.kind, body, self.observations())
        self._put(body, "receipt")
        self._phase = Phase.FINISHED
        return result, receipt

    def refused_result(self, error: ActivityRejected | None = None) -> ActivityResult:
        """The refused activity as a recordable result (defaults to the recorded violation).

        Artifact: ``bernstein.dataops.refusal/v1`` naming the code, the message,
        the input hashes recorded so far and the plan hash (or null).
        """
        error = error if error is not None else self._violation
        if error is None:
            raise ValueError("refused_result() needs the refusal: nothing was refused")
        document = {
            "format": REFUSAL_FORMAT,
            "run_id": self.run_id,
            "stage_id": self.stage_id,
            "kind": self.kind.value,
            "code": error.code,
            "message": error.message,
            "inputs": [item.content_hash for item in self._inputs],
            "plan_hash": self.plan_hash,
        }
        result = ActivityResult.build(
            self.kind,
            document,
            self.observations(),
            terminal_state=TerminalState.REFUSED,
            reason_code=error.code.lower(),
        )
        self._put(result.artifact, "refusal")
        self._phase = Phase.FINISHED
        return result

    # -- internals ------------------------------------------------------------

    def _record(self, role: str, ref: str, content: bytes) -> str:
        if not isinstance(ref, str) or ref == "" or len(ref) > MAX_REF_LENGTH:
            raise ActivityRejected(
                f"{role} ref must be a non-empty string of at most {MAX_REF_LENGTH} characters",
                code="INVALID_REF",
                evidence={"role": role, "ref": str(ref)[:200]},
            )
        if not isinstance(content, (bytes, bytearray, memoryview)):
            raise ActivityRejected(
                f"{role} {ref!r} content must be bytes", code="INVALID_CONTENT", evidence={"role": role, "ref": ref}
            )
        data = bytes(content)
        digest = self._put(data, f"{role} {ref!r}")
        items = self._inputs if role == ROLE_INPUT else self._outputs
        index = len(items)
        signed_bytes = artifact_signing_input(
            run_id=self.run_id,
            stage_id=self.stage_id,
            kind=self.kind.value,
            role=role,
            index=index,
            ref=ref,
            content_hash=digest,
            plan_hash=self.plan_hash if role == ROLE_OUTPUT else None,
        )
        items.append(SignedArtifact(role, index, ref, digest, encode_signature(self._signer.sign(signed_bytes))))
        self._sizes[digest] = len(data)
        return digest

    def _put(self, data: bytes, what: str) -> str:
        digest = self._store.put(data)
        expected = sha256_digest(data)
        if digest != expected:
            # A store that files bytes under another name would make every receipt unverifiable.
            raise ActivityRejected(
                f"the content store filed {what} under {digest}, but its bytes hash to {expected}",
                code="STORE_DIGEST_MISMATCH",
                evidence={"stored_as": digest, "recomputed": expected},
            )
        return digest

    def _violate(self, error: DataOpsPhaseError) -> DataOpsPhaseError:
        if self._violation is None:
            self._violation = error
        return error

    def _refuse_after_finish(self, action: str) -> None:
        if self._phase is Phase.FINISHED:
            raise ActivityFinished(f"cannot {action}: the activity already produced its receipt or refusal")


class DataActivity(DataOpsActivity):
    """A data activity (transformations over signed input data)."""

    def __init__(self, run_id: str, stage_id: str, *, store: BlobStore, signer: Signer) -> None:
        super().__init__(ActivityKind.DATA, run_id, stage_id, store=store, signer=signer)


class OpsActivity(DataOpsActivity):
    """An ops activity (changes applied to systems or configuration)."""

    def __init__(self, run_id: str, stage_id: str, *, store: BlobStore, signer: Signer) -> None:
        super().__init__(ActivityKind.OPS, run_id, stage_id, store=store, signer=signer)


def _validate_steps(steps: Sequence[str]) -> list[str]:
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence):
        raise ActivityRejected("plan steps must be a sequence of strings (one per step)", code="INVALID_PLAN")
    if len(steps) > MAX_STEPS:
        raise ActivityRejected(
            f"a plan has at most {MAX_STEPS} steps, got {len(steps)}", code="INVALID_PLAN", evidence={"steps": str(len(steps))}
        )
    checked = []
    for index, step in enumerate(steps):
        if not isinstance(step, str) or step.strip() == "" or len(step) > MAX_STEP_LENGTH:
            raise ActivityRejected(
                f"plan step {index} must be a non-empty string of at most {MAX_STEP_LENGTH} characters",
                code="INVALID_PLAN",
                evidence={"index": str(index)},
            )
        checked.append(step)
    return checked


def _hash_of(content: object) -> str:
    return sha256_digest(bytes(content)) if isinstance(content, (bytes, bytearray, memoryview)) else ""
