"""The scheduler's state between Python and the extension: whole, or one run at a time.

The native core holds its state inside ``bernstein_native``; the Python side sees it as a
``SchedulerState`` in two ways. Whole: ``read_state`` copies it out and ``write_state`` copies one
in (a rebuilt state, or the reference's result on a full copy).
Lazily: for a record the extension hands back, the reference steps on a ``SchedulerState`` whose
``runs`` is a ``_LazyRuns`` view that fetches only the run the record touches, keeps the step's
writes, and writes them back (``_LazyRuns.write_back``); whatever the view does not model marks it
``unsupported`` and the step is redone on a full copy. Used by ``bernstein.consumers.core.native``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, MutableSet
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from bernstein.consumers.core.model import RunState, SchedulerState, SessionState
from bernstein.schemas.merkle import Frontier

if TYPE_CHECKING:
    import bernstein_native


def read_state(native: bernstein_native.NativeCore) -> SchedulerState:
    """The current native state as a ``SchedulerState`` (a copy)."""
    partition, audit_seq, audit_head, runs, (checkpoint_seq, checkpoint_head, checkpoint_audit_seq), tree = native.export_state()
    return SchedulerState(
        partition=partition,
        audit_seq=audit_seq,
        audit_head=audit_head,
        checkpoint_seq=checkpoint_seq,
        checkpoint_head=checkpoint_head,
        checkpoint_audit_seq=checkpoint_audit_seq,
        tree=Frontier.decode(tree),
        runs={
            run_id: RunState(
                head=head,
                entry_count=entry_count,
                stages=stages,
                evidence=evidence,
                closed=closed,
                sealed_count=sealed_count,
                sessions={sid: SessionState(next_index, anchor, done) for sid, next_index, anchor, done in sessions},
                submissions=submissions,
                evidence_bytes=evidence_bytes,
                blobs=set(blobs),
                opened_by=opened_by,
            )
            for (
                run_id,
                head,
                entry_count,
                stages,
                evidence,
                closed,
                sealed_count,
                sessions,
                submissions,
                evidence_bytes,
                blobs,
                opened_by,
            ) in runs
        },
        open_runs=native.open_runs(),
    )


def write_state(native: bernstein_native.NativeCore, state: SchedulerState) -> None:
    """Replace the extension's state with a copy of ``state``."""
    native.load_state(
        state.partition,
        state.audit_seq,
        state.audit_head,
        [
            (
                run_id,
                run.head,
                run.entry_count,
                run.stages,
                run.evidence,
                run.closed,
                run.sealed_count,
                [(sid, s.next_index, s.last_anchor, s.closed) for sid, s in run.sessions.items()],
                run.submissions,
                run.evidence_bytes,
                sorted(run.blobs),
                run.opened_by,
            )
            for run_id, run in state.runs.items()
        ],
        (state.checkpoint_seq, state.checkpoint_head, state.checkpoint_audit_seq),
        state.tree.encode(),
    )


class _Unsupported(Exception):
    """An operation the lazy state views do not model; the step is redone on a full state."""


class _Unmodelled:
    """What the lazy views leave out (iteration, length): asked for, it hands the step to the reference."""

    __slots__ = ()
    _WHAT: ClassVar[str]
    _owner: _LazyRuns

    def __iter__(self) -> Iterator[str]:
        self._unsupported()

    def __len__(self) -> int:
        self._unsupported()

    def _unsupported(self) -> NoReturn:
        self._owner.unsupported = True
        raise _Unsupported(f"a {self._WHAT} operation the lazy view does not model")


class _NativeMap(_Unmodelled, MutableMapping[str, str]):
    """A run's ``stages`` or ``evidence`` map: reads go to the extension, writes stay here."""

    __slots__ = ("_get", "_run_id", "_owner", "writes")
    _WHAT = "run map"

    def __init__(self, get: Any, run_id: str, owner: _LazyRuns) -> None:
        self._get = get
        self._run_id = run_id
        self._owner = owner
        self.writes: dict[str, str] = {}

    def __getitem__(self, key: str) -> str:
        if key in self.writes:
            return self.writes[key]
        value = self._get(self._run_id, key) if isinstance(key, str) else None
        if value is None:
            raise KeyError(key)
        return str(value)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __setitem__(self, key: str, value: str) -> None:
        k: object = key
        v: object = value
        if not isinstance(k, str) or not isinstance(v, str):
            self._unsupported()
        self.writes[k] = v

    def setdefault(self, key: str, default: str = "") -> str:
        existing: str | None = self.get(key)
        if existing is not None:
            return existing
        self[key] = default
        return default

    def __delitem__(self, key: str) -> None:
        self._unsupported()


class _LazyRuns(_Unmodelled, MutableMapping[str, RunState]):
    """``SchedulerState.runs`` for one reference step: fetches a run from the extension when asked for it."""

    _WHAT = "runs"

    def __init__(self, native: Any) -> None:
        self._owner = self
        self._native = native
        self._runs: dict[str, RunState] = {}
        self._fetched: set[str] = set()
        self.unsupported = False

    def _fetch(self, run_id: object) -> RunState | None:
        if not isinstance(run_id, str):
            return None
        run = self._runs.get(run_id)
        if run is not None or run_id in self._fetched:
            return run
        self._fetched.add(run_id)
        header = self._native.run_header(run_id)
        if header is None:
            return None
        head, entry_count, closed, sealed_count, sessions, opened_by = header
        run = RunState(
            head=head,
            entry_count=entry_count,
            stages=_NativeMap(self._native.stage_get, run_id, self),  # type: ignore[arg-type]
            evidence=_NativeMap(self._native.evidence_get, run_id, self),  # type: ignore[arg-type]
            closed=closed,
            sealed_count=sealed_count,
            sessions={sid: SessionState(next_index, anchor, done) for sid, next_index, anchor, done in sessions},
            submissions=_NativeMap(self._native.submission_get, run_id, self),  # type: ignore[arg-type]
            evidence_bytes=self._native.evidence_bytes(run_id),
            blobs=_NativeSet(self._native.blob_has, run_id, self),  # type: ignore[arg-type]
            opened_by=opened_by,
        )
        self._runs[run_id] = run
        return run

    def __getitem__(self, run_id: str) -> RunState:
        run = self._fetch(run_id)
        if run is None:
            raise KeyError(run_id)
        return run

    def get(self, run_id: str, default: Any = None) -> Any:
        run = self._fetch(run_id)
        return default if run is None else run

    def __contains__(self, run_id: object) -> bool:
        return self._fetch(run_id) is not None

    def __setitem__(self, run_id: str, run: RunState) -> None:
        key: object = run_id
        value: object = run
        if not isinstance(key, str) or not isinstance(value, RunState):
            self._unsupported()
        self._fetched.add(key)
        self._runs[key] = value

    def __delitem__(self, run_id: str) -> None:
        self._unsupported()

    def write_back(self) -> None:
        """Apply every run the step saw (fetched runs may have been mutated in place) to the extension."""
        for run_id, run in self._runs.items():
            stages_replace, stages = _map_items(run.stages)
            evidence_replace, evidence = _map_items(run.evidence)
            submissions_replace, submissions = _map_items(run.submissions)
            blobs_replace, blobs = _set_items(run.blobs)
            self._native.apply_run(
                run_id,
                run.head,
                run.entry_count,
                run.closed,
                run.sealed_count,
                [(sid, s.next_index, s.last_anchor, s.closed) for sid, s in run.sessions.items()],
                stages_replace,
                stages,
                evidence_replace,
                evidence,
                submissions_replace,
                submissions,
                run.evidence_bytes,
                blobs_replace,
                blobs,
                run.opened_by,
            )


class _NativeSet(_Unmodelled, MutableSet[str]):
    """A run's ``blobs`` (digests counted toward the evidence cap): membership asks the extension, adds stay here."""

    __slots__ = ("_has", "_run_id", "_owner", "writes")
    _WHAT = "blob set"

    def __init__(self, has: Any, run_id: str, owner: _LazyRuns) -> None:
        self._has = has
        self._run_id = run_id
        self._owner = owner
        self.writes: list[str] = []

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, str) and (digest in self.writes or bool(self._has(self._run_id, digest)))

    def add(self, digest: str) -> None:
        value: object = digest
        if not isinstance(value, str):
            self._unsupported()
        if digest not in self:
            self.writes.append(digest)

    def discard(self, digest: str) -> None:
        self._unsupported()


def _set_items(blobs: AbstractSet[str]) -> tuple[bool, list[str]]:
    """(replace?, digests): the adds of a lazy set, or the whole of a set the step built itself."""
    if isinstance(blobs, _NativeSet):
        return False, list(blobs.writes)
    return True, sorted(blobs)


def _map_items(mapping: Mapping[str, str]) -> tuple[bool, list[tuple[str, str]]]:
    """(replace?, items): the writes of a lazy map, or the whole of a map the step built itself."""
    if isinstance(mapping, _NativeMap):
        return False, list(mapping.writes.items())
    return True, list(mapping.items())
