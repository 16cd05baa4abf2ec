"""Capability gating: only a computer-use adapter may be handed a browser task.

The check runs before any process is started: a session asks
``require_computer_use_capable(adapter_name)`` before it calls its driver
factory, so an incapable adapter costs nothing and leaves nothing running.
The refusal is structured (adapter name, suggested adapters), the same shape
as any other ``CapabilityRefusal``.
"""

from __future__ import annotations

from typing import ClassVar, Final

from bernstein.producers.computer_use.errors import ComputerUseError

COMPUTER_USE_ADAPTERS: Final = frozenset({"playwright"})
"""Adapter names that can drive a browser for an external agent (lower case)."""


class CapabilityRefusal(ComputerUseError):
    """An adapter was handed a task it cannot perform; nothing was started."""

    code: ClassVar[str] = "CAPABILITY_REFUSED"

    def __init__(self, message: str, *, adapter_name: str, suggested_adapters: tuple[str, ...]) -> None:
        super().__init__(message)
        self.adapter_name = adapter_name
        self.suggested_adapters = suggested_adapters

    @property
    def evidence(self) -> dict[str, str]:
        return {"adapter_name": self.adapter_name, "suggested_adapters": ",".join(self.suggested_adapters)}


class ComputerUseRefusal(CapabilityRefusal):
    """An adapter that cannot drive a browser was handed a browser / computer-use task."""

    code: ClassVar[str] = "COMPUTER_USE_NOT_SUPPORTED"


def is_computer_use_capable(name: str) -> bool:
    """True when ``name`` (case-insensitive, surrounding spaces ignored) is a computer-use adapter."""
    return isinstance(name, str) and name.strip().lower() in COMPUTER_USE_ADAPTERS


def suggested_adapters() -> tuple[str, ...]:
    """The adapters to use instead, sorted (never empty)."""
    return tuple(sorted(COMPUTER_USE_ADAPTERS))


def require_computer_use_capable(adapter_name: str) -> None:
    """Raise ``ComputerUseRefusal`` unless ``adapter_name`` can drive a browser."""
    if is_computer_use_capable(adapter_name):
        return
    suggestions = suggested_adapters()
    raise ComputerUseRefusal(
        f"adapter {adapter_name!r} cannot drive a browser; a browser task needs a computer-use adapter "
        f"({', '.join(suggestions)}). Nothing was started.",
        adapter_name=adapter_name,
        suggested_adapters=suggestions,
    )
