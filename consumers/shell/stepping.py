"""Which core steps a batch: the native core's plan (no Python object per output), or the Python reference.

The reference steps a batch the native path failed on, the redo that finds the input a refused output belongs to,
and the dead letter of a rejected input, on a plain ``SchedulerState`` (``_plain``). The undo mark taken before each
batch is what lets ``recovery`` rewind the state after an aborted transaction.
"""

from __future__ import annotations

from typing import Any

from bernstein.consumers.core.model import InputRecord, OutputRecord, SchedulerState
from bernstein.consumers.core.native import NativeSchedulerCore, NativeState, SchedulerCoreLike
from bernstein.consumers.shell.base import ShellBase


class Stepping(ShellBase):
    """Chooses the core a batch is stepped by, and marks the state a rewind may return to."""

    def _messages_ok(self, native: NativeSchedulerCore, messages: list[Any]) -> bool:
        try:
            return native.messages_ok(messages)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # noqa: BLE001 - then the Python check decides (L7)
            return False

    def _reference_core(self) -> Any:
        """The Python reference core (it steps the batches the native path does not, and dead-letters rejected inputs)."""
        return self._native.reference if self._native is not None else self.core

    def _mark_if_python(self, state: SchedulerState) -> tuple[SchedulerState, int | None]:
        """An undo mark on a state the Python core steps in place (the shell's core is the Python one); None when the
        shell's core is the native one and this is a copy of its state (nothing to rewind to)."""
        if self._native is not None:
            return state, None
        marked: tuple[SchedulerState, int] = self.core.mark(state)
        return marked

    @staticmethod
    def _plain(state: Any) -> SchedulerState:
        """The state as a ``SchedulerState`` (what the reference steps)."""
        return state.to_scheduler_state() if isinstance(state, NativeState) else state

    def _step_all(
        self, state: Any, records: list[Any], core: SchedulerCoreLike | None = None
    ) -> tuple[Any, list[list[OutputRecord]]]:
        """Any core (default: the shell's): the outputs of every record, in order."""
        partition = self.partition
        step = (core or self.core).step
        planned = []
        for message in records:
            state, outputs = step(state, InputRecord.of_message(message, partition))
            planned.append(outputs)
        return state, planned
