"""The Python core's undo log: each run as it was before an epoch first changed it.

The shell plans the next batch while the previous one commits, so when a transaction
aborts the state has moved past the last commit by one or two batches. Instead of
re-reading the committed outputs from Kafka, the shell rewinds to the mark it made
before the oldest uncommitted batch (``SchedulerCore.mark`` / ``rewind``; the native
core keeps the same log in Rust, ``native/src/undo.rs``).

Every change the step makes to a run goes through ``SchedulerState.run_for``, which
hands the run to ``save`` first: the first change in an epoch copies the run (or notes
that it did not exist). The partition's audit and checkpoint chains and the producers' open-run counts are
copied at the mark. A rewind puts the copies back, newest epoch first; dict positions are kept (a run
that existed is put back under its key, a new run is deleted), so a rewound state's
bytes equal a full fold's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bernstein.consumers.core.model import RunState, SchedulerState, SessionState
from bernstein.schemas.merkle import Frontier


def copy_run(run: RunState) -> RunState:
    """A copy of ``run`` that no later change to ``run`` reaches (its maps, sets and sessions copied)."""
    return RunState(
        head=run.head,
        entry_count=run.entry_count,
        stages=dict(run.stages),
        evidence=dict(run.evidence),
        closed=run.closed,
        sealed_count=run.sealed_count,
        sessions={sid: SessionState(s.next_index, s.last_anchor, s.closed) for sid, s in run.sessions.items()},
        submissions=dict(run.submissions),
        evidence_bytes=run.evidence_bytes,
        blobs=set(run.blobs),
        opened_by=run.opened_by,
    )


@dataclass(slots=True)
class _Epoch:
    id: int
    audit: tuple[int, str]
    checkpoint: tuple[int, str, int]
    tree: Frontier
    open_runs: dict[str, int]
    """Each producer's open runs at the mark (one count per producer: copied whole)."""
    runs: dict[str, RunState | None] = field(default_factory=dict)
    """run id -> the run before this epoch first changed it (None: the epoch created it)."""


@dataclass(slots=True)
class UndoLog:
    """The open epochs of one ``SchedulerState``, oldest first."""

    epochs: list[_Epoch] = field(default_factory=list)
    next_id: int = 0

    def mark(self, state: SchedulerState) -> int:
        """Opens an epoch at ``state`` as it is now; returns its id (ids only grow)."""
        self.next_id += 1
        self.epochs.append(
            _Epoch(
                self.next_id,
                (state.audit_seq, state.audit_head),
                (state.checkpoint_seq, state.checkpoint_head, state.checkpoint_audit_seq),
                state.tree,
                dict(state.open_runs),
            )
        )
        return self.next_id

    def save(self, state: SchedulerState, run_id: str) -> None:
        """Called before a change to run ``run_id``: the newest epoch keeps the run as it was, once."""
        if not self.epochs:
            return
        saved = self.epochs[-1].runs
        if run_id not in saved:
            run = state.runs.get(run_id)
            saved[run_id] = copy_run(run) if run is not None else None

    def forget(self, through: int) -> None:
        """Forgets the epochs up to and including ``through`` (their changes were committed)."""
        self.epochs = [epoch for epoch in self.epochs if epoch.id > through]

    def rewind(self, state: SchedulerState, to: int) -> bool:
        """Puts ``state`` back as it was when epoch ``to`` was marked and closes it and every later epoch.

        False (and nothing changed) when ``to`` is not open."""
        index = next((i for i, epoch in enumerate(self.epochs) if epoch.id == to), None)
        if index is None:
            return False
        for epoch in reversed(self.epochs[index:]):
            for run_id, run in epoch.runs.items():
                if run is None:
                    state.runs.pop(run_id, None)
                else:
                    state.runs[run_id] = run
            state.audit_seq, state.audit_head = epoch.audit
            state.checkpoint_seq, state.checkpoint_head, state.checkpoint_audit_seq = epoch.checkpoint
            state.tree = epoch.tree
            state.open_runs = dict(epoch.open_runs)
        del self.epochs[index:]
        return True
