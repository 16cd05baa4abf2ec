"""The scheduler core in Rust (``native/``), behind the Python core's interface.

``NativeSchedulerCore(config, partition).step(state, record)`` returns exactly
what ``SchedulerCore(config).step`` returns (the same ``OutputRecord`` bytes,
headers and timestamps, the same state evolution) at a fraction of the cost;
``step_many`` runs a whole batch in one call into the extension.

The state lives inside the extension. ``step`` accepts either a
``SchedulerState`` (e.g. from ``rebuild_state``), which it loads, or the
``NativeState`` handle the previous call returned; like the Python core it
takes ownership of the state it is given, and a handle that has been passed on
is stale (using it again raises ``StaleState``). ``to_scheduler_state`` turns
the current state back into a ``SchedulerState``.

Records the extension deliberately does not reproduce are processed by the
Python reference, one record at a time, on a view of the native state that
fetches only the run the record touches (see ``bernstein_native``'s
``native/src/core/mod.rs`` for the list: fastavro's error wording for malformed bodies,
computer-use actions, the session check of browser results, inputs of an
unusual shape). ``fallbacks`` counts them.

``make_core`` picks the implementation: ``prefer`` (``auto``, ``native`` or
``python``) unless ``BERNSTEIN_CORE`` in the ``environ`` the caller passes says
otherwise; ``auto`` uses the
extension when it imports, matches this tree's schemas and constants and
passes a startup self-check against the reference, else the Python core.

This module is the adapter and the choice of core. Beside it: ``native_state`` converts the
state between Python and the extension (whole, or the lazy one-run view the reference steps on),
and ``native_check`` is the startup self-check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from bernstein.consumers.core import step as _reference
from bernstein.consumers.core.model import (
    AuditKeyVersion,
    InputRecord,
    OutputRecord,
    SchedulerConfig,
    SchedulerState,
    SealKey,
    Stream,
)
from bernstein.consumers.core.native_check import _self_check
from bernstein.consumers.core.native_state import _LazyRuns, read_state, write_state
from bernstein.consumers.core.step import SchedulerCore
from bernstein.schemas import codec
from bernstein.schemas.errors import BernsteinError
from bernstein.schemas.merkle import Frontier
from bernstein.schemas.records import (
    KINDS,
    MAX_INLINE_ARTIFACT_BYTES,
    MAX_KEPT_KEY_BYTES,
    MAX_KIND_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_OBSERVATIONS,
    MAX_OCCURRED_AT_MS,
    MAX_REASON_CODE_LENGTH,
    MAX_REF_LENGTH,
    MAX_RUN_EVIDENCE_BYTES,
    TERMINAL_STATES,
    DeadLetterCode,
)

if TYPE_CHECKING:
    import bernstein_native

_native: ModuleType | None
try:
    import bernstein_native as _loaded
except ImportError as _exc:  # not built: `uv sync` builds it (needs cargo)
    _native = None
    _IMPORT_ERROR: str | None = f"the bernstein_native extension is not installed ({_exc})"
else:
    _native = _loaded
    _IMPORT_ERROR = None

ENV_VAR: Final = "BERNSTEIN_CORE"
CHOICES: Final = ("auto", "native", "python")
_STREAMS: Final = (Stream.JOURNAL, Stream.REFUSALS, Stream.AUDIT, Stream.DEADLETTER, Stream.CHECKPOINTS)
_SCHEDULER_ERROR: Final = (
    codec.default_codec().schema(codec.DEAD_LETTER_V2).header + b"\x1e" + DeadLetterCode.SCHEDULER_ERROR.value.encode()
)
"""The first bytes of a SCHEDULER_ERROR dead letter (the code is its first field)."""


class SchedulerCoreLike(Protocol):
    """What the shell needs of a core; ``SchedulerCore`` and ``NativeSchedulerCore`` both are one."""

    config: SchedulerConfig

    def step(self, state: Any, record: InputRecord) -> tuple[Any, list[OutputRecord]]: ...

    def set_submission_partitions(self, partitions: int) -> None: ...

    def mark(self, state: Any) -> tuple[Any, int]: ...

    def forget(self, state: Any, through: int) -> None: ...

    def rewind(self, state: Any, to: int) -> Any | None: ...


class NativeUnavailable(BernsteinError):
    """The native core cannot be used here (not built, or out of step with this tree)."""

    code = "E_NATIVE_UNAVAILABLE"


class StaleState(BernsteinError):
    """A NativeState handle that was already passed to ``step`` (or belongs to another core)."""

    code = "E_STALE_STATE"


def _constant_mismatches() -> list[str]:
    """Where the extension's built-in constants differ from this tree's Python ones."""
    if _native is None:
        return []
    expected: dict[str, Any] = {
        "KINDS": sorted(KINDS),
        "TERMINAL_STATES": sorted(TERMINAL_STATES),
        "MAX_INLINE_ARTIFACT_BYTES": MAX_INLINE_ARTIFACT_BYTES,
        "MAX_OBSERVATIONS": MAX_OBSERVATIONS,
        "MAX_REF_LENGTH": MAX_REF_LENGTH,
        "MAX_REASON_CODE_LENGTH": MAX_REASON_CODE_LENGTH,
        "MAX_KIND_LENGTH": MAX_KIND_LENGTH,
        "MAX_EVIDENCE_CHARS": _reference._MAX_EVIDENCE_CHARS,
        "MAX_DEAD_LETTER_RAW": _reference._MAX_DEAD_LETTER_RAW,
        "MAX_LABEL_LENGTH": MAX_LABEL_LENGTH,
        "MAX_OCCURRED_AT_MS": MAX_OCCURRED_AT_MS,
        "MAX_KEPT_KEY_BYTES": MAX_KEPT_KEY_BYTES,
        "MAX_RUN_EVIDENCE_BYTES": MAX_RUN_EVIDENCE_BYTES,
    }
    built = _native.CONSTANTS
    problems = [
        f"{name}: native {built.get(name)!r}, Python {value!r}" for name, value in expected.items() if built.get(name) != value
    ]
    schemas = {s.name: s.fingerprint for s in codec.default_codec().schemas}
    for name, fingerprint in _native.NATIVE_SCHEMAS:
        if schemas.get(name) != fingerprint:
            problems.append(f"schema {name} changed (the native encoders follow the old one)")
    return problems


def native_status() -> tuple[bool, str]:
    """Whether the extension is importable and built for this tree, and if not why."""
    if _native is None:
        return False, _IMPORT_ERROR or "the bernstein_native extension is not installed"
    problems = _constant_mismatches()
    if problems:
        return False, "bernstein_native is out of step with this tree: " + "; ".join(problems)
    return True, f"bernstein_native {_native.VERSION}"


def _output_slots() -> list[str] | None:
    """OutputRecord's slot names when its ``__init__`` only stores them (then the extension fills them directly)."""
    names = [f.name for f in dataclasses.fields(OutputRecord)]
    plain = (
        names == ["stream", "key", "value", "headers", "timestamp_ms"]
        and getattr(OutputRecord, "__slots__", None) == tuple(names)
        and OutputRecord.__new__ is object.__new__
        and not hasattr(OutputRecord, "__post_init__")
        and OutputRecord.__mro__ == (OutputRecord, object)
    )
    return names if plain else None


def _ed25519_seed(signer: object) -> bytes:
    key = getattr(signer, "_key", None)
    if not isinstance(key, Ed25519PrivateKey):
        raise NativeUnavailable(f"the native core signs with a raw Ed25519 seed; {type(signer).__name__} does not expose one")
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


class NativeState:
    """A handle on the state held inside a ``NativeSchedulerCore`` (valid until passed to ``step``)."""

    __slots__ = ("_core", "_generation")

    def __init__(self, core: NativeSchedulerCore, generation: int) -> None:
        self._core = core
        self._generation = generation

    def to_scheduler_state(self) -> SchedulerState:
        """A copy of the state as the Python core's ``SchedulerState``."""
        self._core._check(self)
        return self._core.to_scheduler_state()


class NativeSchedulerCore:
    """The native step function, bound to its configuration (see the module doc)."""

    def __init__(self, config: SchedulerConfig, partition: int, *, self_check: bool = True) -> None:
        ok, reason = native_status()
        if not ok or _native is None:
            raise NativeUnavailable(reason)
        if config.seal_every < 1:
            raise ValueError("seal_every must be at least 1")
        self.config = config
        self.partition = partition
        self.fallbacks = 0
        """Records processed by the Python reference (see the module doc)."""
        self._reference = SchedulerCore(config)
        seed = _ed25519_seed(config.signer)
        probe = b"bernstein/native-signer-probe"
        seal_ring = config.seal_keys or (SealKey(config.signer),)
        seal_keys = []
        for key in seal_ring:
            key_seed = _ed25519_seed(key.signer)
            if _native.ed25519_sign(key_seed, probe) != key.signer.sign(probe):
                raise NativeUnavailable("the signer's Ed25519 signatures differ from the native ones for the same seed")
            seal_keys.append((key_seed, key.signer.key_id, key.lifetime.valid_from_ms, key.lifetime.valid_until_ms))
        audit_ring = config.audit_keys or (AuditKeyVersion(config.audit_key, config.audit_key_id),)
        audit_keys = [(k.secret, k.key_id, k.lifetime.valid_from_ms, k.lifetime.valid_until_ms) for k in audit_ring]
        producers = [
            (
                p.name,
                sorted(p.roles),
                [(k.key_id, k.public_key, k.lifetime.valid_from_ms, k.lifetime.valid_until_ms) for k in p.keys],
                list(p.run_prefixes),
                sorted(p.collaborators),
                p.max_open_runs,
            )
            for p in config.producers.producers.values()
        ]
        roles = dict(config.roles)
        if not all(isinstance(role, str) for role in roles):
            raise NativeUnavailable("the native core needs a roles mapping with str keys")
        try:
            self._native: bernstein_native.NativeCore = _native.NativeCore(
                roles,
                seed,
                config.audit_key,
                config.audit_key_id,
                config.seal_every,
                partition,
                config.signer.key_id,
                [(s.fingerprint, s.name) for s in codec.default_codec().schemas],
                sorted(_reference._INPUT_SCHEMAS),
                config.max_output_bytes,
                config.checkpoint_every,
                config.accept_undeclared_sizes,
                seal_keys,
                audit_keys,
                producers,
                config.submission_partitions,
                config.log_name,
                config.log_epoch,
            )
        except (ValueError, TypeError, OverflowError) as exc:
            raise NativeUnavailable(f"the native core refused this configuration: {exc}") from exc
        self._native.set_output_factory(OutputRecord, list(_STREAMS), _output_slots())
        self._generation = 0
        self._current: NativeState | None = None
        if self_check:
            _self_check(self)

    # -- the interface of SchedulerCore ---------------------------------------------

    def step(self, state: SchedulerState | NativeState, record: InputRecord) -> tuple[NativeState, list[OutputRecord]]:
        """Process one input record (the Python core's contract; never raises for bad input)."""
        current = self._current
        if current is None or state is not current:
            self._adopt(state)
        try:
            outputs: list[OutputRecord] | None = self._native.step_one(record)
            if outputs is None:
                outputs = self._python_step(record)
        except BaseException:
            self._current = None  # the state may have moved on: only a reload is safe now
            raise
        return self._advance(), outputs

    def step_many(
        self, state: SchedulerState | NativeState, records: Sequence[InputRecord]
    ) -> tuple[NativeState, list[list[OutputRecord]]]:
        """``step`` over a batch in one call: one output list per record, in order."""
        self._adopt(state)
        batch = records if isinstance(records, list) else list(records)
        try:
            results: list[list[OutputRecord]] = self._native.step_batch(batch)
            while len(results) < len(batch):
                results.append(self._python_step(batch[len(results)]))
                if len(results) < len(batch):
                    results.extend(self._native.step_batch(batch, len(results)))
        except BaseException:
            self._current = None
            raise
        return self._advance(), results

    def set_submission_partitions(self, partitions: int) -> None:
        """``SchedulerCore.set_submission_partitions``, in both this core and its reference."""
        self._reference.set_submission_partitions(partitions)
        self._native.set_submission_partitions(partitions)
        self.config = self._reference.config

    @property
    def reference(self) -> SchedulerCore:
        """The Python reference this core falls back to (the shell steps a batch with it when the native path failed)."""
        return self._reference

    def reject(
        self, state: SchedulerState | NativeState, record: InputRecord, code: DeadLetterCode, detail: str
    ) -> tuple[NativeState, list[OutputRecord]]:
        """``SchedulerCore.reject``: dead-letter ``record`` with ``code`` and ``detail`` instead of stepping it."""
        current = self._current
        if current is None or state is not current:
            self._adopt(state)
        try:
            outputs: list[OutputRecord] | None = self._native.reject(record, code.value, detail)
            if outputs is None:
                full = self.to_scheduler_state()
                after, outputs = self._reference.reject(full, record, code, detail)
                self._load(after)
        except BaseException:
            self._current = None
            raise
        return self._advance(), outputs

    # -- the shell's batch path -------------------------------------------------------

    @staticmethod
    def messages_ok(messages: list[Any]) -> bool:
        """True when no message of a consumer batch has an error (``m.error() is None`` for each)."""
        assert _native is not None
        return bool(_native.messages_ok(messages))

    def plan(self, state: SchedulerState | NativeState, messages: list[Any], partition: int) -> NativeState:
        """``step`` over a consumer batch, keeping the outputs inside the core for ``produce_planned``.

        ``messages``: ``confluent_kafka.Message`` objects without an error, read
        from input partition ``partition``; each becomes the shell's
        ``InputRecord.of_message(m, partition)``.
        The records the extension hands back go through the reference, in order.
        Returns the new state; a plan replaces the previous one.
        """
        current = self._current
        if current is None or state is not current:
            self._adopt(state)
        native = self._native
        try:
            native.plan_clear()
            count = len(messages)
            index = native.plan_messages(messages, partition, 0)
            while index < count:
                native.plan_outputs(self._python_step(InputRecord.of_message(messages[index], partition)))
                index = native.plan_messages(messages, partition, index + 1)
        except BaseException:
            self._current = None  # the state may have moved on: only a reload is safe now
            native.plan_clear()
            raise
        return self._advance()

    def produce_planned(self, producer: Any, topics: Sequence[str], partition: int) -> tuple[int, int, int, int]:
        """Produce the planned outputs, in order, as the shell's loop does for ``step``'s outputs.

        Each output becomes ``producer.produce(topic, value, key, partition, None, None,
        timestamp, headers)`` (``topics[i]`` for journal, refusals, audit, deadletter, checkpoints;
        ``headers`` the output's four CloudEvents headers as a list). When the local queue is
        full (BufferError) it polls the producer for 50 ms and retries the same output.
        Returns (journalled, seals, refused, dead_letters) of the plan; other exceptions propagate
        (the outputs produced so far stay produced: abort the transaction).
        """
        produce = producer.produce
        native = self._native
        while True:
            tallies = native.produce_planned(produce, topics, partition)
            if tallies is not None:
                return tallies
            producer.poll(0.05)

    def plan_codes(self) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """The plan's refusals and dead letters by code, ``([(code, count)], [(code, count)])``: each code as
        written in its record (a refusal's ``code``, a dead letter's ``code``), read back by the extension.
        For the shell's metrics; the outputs are not changed."""
        refused, dead_letters = self._native.plan_codes()
        return list(refused), list(dead_letters)

    def state_json(self, state: NativeState) -> bytes:
        """``bernstein.consumers.core.snapshot.state_bytes`` of the current state, written by the extension (no Python objects:
        a snapshot of a large state costs the loop a fraction of ``to_scheduler_state``)."""
        self._check(state)
        return self._native.state_json()

    # -- rewinding (the shell, after an aborted transaction; native/src/undo.rs) ---------

    def mark(self, state: SchedulerState | NativeState) -> tuple[NativeState, int]:
        """Opens an undo epoch at ``state`` (which the core adopts): ``rewind`` can go back to here.

        Returns the state to go on with and the epoch's id."""
        current = self._current
        if current is None or state is not current:
            self._adopt(state)
            current = self._advance()
        return current, self._native.undo_mark()

    def forget(self, state: SchedulerState | NativeState, through: int) -> None:
        """The epochs up to ``through`` were committed: their undo records go."""
        self._native.undo_forget(through)

    def rewind(self, state: SchedulerState | NativeState, to: int) -> NativeState | None:
        """The state as it was at mark ``to``, or None when it cannot be had (the state was replaced since, or lost to
        a failure: rebuild instead). ``state``: any handle of this core (the shell may hold the one from before a plan
        it then abandoned); the log undoes whatever the core's state became after the mark."""
        if not isinstance(state, NativeState) or state._core is not self or self._current is None:
            return None
        if not self._native.undo_rewind(to):
            return None
        return self._advance()

    # -- state ------------------------------------------------------------------------

    def initial_state(self) -> NativeState:
        """``initial_state(config, partition)`` as a handle."""
        self._native.reset(self.partition)
        return self._advance()

    def to_scheduler_state(self) -> SchedulerState:
        """The current native state as a ``SchedulerState`` (a copy)."""
        return read_state(self._native)

    def load(self, state: SchedulerState) -> NativeState:
        """Replace the native state with ``state`` (which the core then owns)."""
        self._load(state)
        return self._advance()

    def _load(self, state: SchedulerState) -> None:
        write_state(self._native, state)

    def _check(self, state: NativeState) -> None:
        if state is not self._current:
            raise StaleState(
                "this NativeState was already passed to step (or belongs to another core): "
                "use the state step returned, or pass a SchedulerState to reload"
            )

    def _adopt(self, state: SchedulerState | NativeState) -> None:
        if isinstance(state, NativeState):
            self._check(state)
        elif isinstance(state, SchedulerState):
            self._load(state)
        else:
            raise TypeError(f"expected a SchedulerState or a NativeState, got {type(state).__name__}")

    def _advance(self) -> NativeState:
        self._generation += 1
        self._current = NativeState(self, self._generation)
        return self._current

    # -- the reference, for the records the extension hands back -------------------------

    def _python_step(self, record: InputRecord | tuple[Any, ...]) -> list[OutputRecord]:
        self.fallbacks += 1
        if isinstance(record, tuple):
            record = InputRecord(*record)
        partition, audit_seq, audit_head = self._native.audit_position()
        checkpoint_seq, checkpoint_head, checkpoint_audit_seq = self._native.checkpoint_position()
        runs = _LazyRuns(self._native)
        state = SchedulerState(
            partition=partition,
            audit_seq=audit_seq,
            audit_head=audit_head,
            runs=runs,  # type: ignore[arg-type]
            checkpoint_seq=checkpoint_seq,
            checkpoint_head=checkpoint_head,
            checkpoint_audit_seq=checkpoint_audit_seq,
            tree=Frontier.decode(self._native.tree_position()),
            open_runs=self._native.open_runs(),
        )
        try:
            after, outputs = self._reference.step(state, record)
        except Exception:
            if not runs.unsupported:
                raise
        else:
            lazy: object = runs
            if after is state and after.runs is lazy and not runs.unsupported and not _scheduler_error(outputs):
                self._native.set_audit(after.audit_seq, after.audit_head)
                self._native.set_checkpoint(after.checkpoint_seq, after.checkpoint_head, after.checkpoint_audit_seq)
                self._native.set_tree(after.tree.encode())
                self._native.set_open_runs(after.open_runs)
                runs.write_back()
                return outputs
        # The reference did something the lazy view does not model (or failed
        # on it): run it again on a full copy of the state. Nothing was written.
        full = self.to_scheduler_state()
        after, outputs = self._reference.step(full, record)
        self._load(after)
        return outputs


def _scheduler_error(outputs: list[OutputRecord]) -> bool:
    return any(o.stream is Stream.DEADLETTER and o.value.startswith(_SCHEDULER_ERROR) for o in outputs)


# ---------------------------------------------------------------------------
# choosing a core
# ---------------------------------------------------------------------------


NATIVE_LABEL: Final = "native (bernstein_native, Rust)"
"""``describe``'s text for the native core (the scheduler's start line: ``core: native (bernstein_native, Rust)``)."""
INSTALL_HINT: Final = "pip install ./native from a checkout, needs Rust >= 1.85; `make venv` builds it"


def choose_core(
    config: SchedulerConfig,
    partition: int,
    prefer: Literal["auto", "native", "python"] | str = "auto",
    *,
    environ: Mapping[str, str] | None = None,
) -> tuple[SchedulerCore | NativeSchedulerCore, str]:
    """``make_core``'s core and a one-line description of it, saying why when ``auto`` ran the Python core.

    ``native (bernstein_native, Rust)``; ``python reference`` when the Python core was asked for;
    ``python reference (bernstein-native not installed: ...)`` or ``python reference (<why the extension
    was not usable>)`` when ``auto`` fell back. The core package reads no environment: callers pass theirs.
    """
    choice = ((environ or {}).get(ENV_VAR) or prefer).strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"{ENV_VAR} / prefer must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "python":
        return SchedulerCore(config), "python reference"
    try:
        return NativeSchedulerCore(config, partition), NATIVE_LABEL
    except NativeUnavailable as exc:
        if choice == "native":
            raise
        if _native is None:
            return SchedulerCore(config), f"python reference (bernstein-native not installed: {INSTALL_HINT})"
        return SchedulerCore(config), f"python reference ({exc.message})"


def make_core(
    config: SchedulerConfig,
    partition: int,
    prefer: Literal["auto", "native", "python"] | str = "auto",
    *,
    environ: Mapping[str, str] | None = None,
) -> SchedulerCore | NativeSchedulerCore:
    """The scheduler core to run: ``prefer``, unless ``environ`` sets ``BERNSTEIN_CORE`` (it wins).

    ``python`` -> the reference; ``native`` -> the extension or NativeUnavailable;
    ``auto`` -> the extension when it is usable here (installed, built for this tree, passing its
    self-check), else the reference: the extension is an optional accelerator (``pip install``
    without a Rust toolchain runs the reference). The core package reads no environment
    (tests/unit/test_scheduler_core.py scans it): callers pass theirs, e.g.
    ``make_core(config, partition, environ=os.environ)``. ``choose_core`` also says which and why.
    """
    return choose_core(config, partition, prefer, environ=environ)[0]
