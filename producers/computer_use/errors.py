"""Typed failures of the computer-use modality.

Tree (all under ``bernstein.schemas.errors.BernsteinError``)::

    ComputerUseError                    base of everything below
    ├── CapabilityRefusal               an adapter that cannot do the task (capability.py)
    │   └── ComputerUseRefusal          ... handed a browser task; raised before any process starts
    ├── ComputerUseDriverError          the browser driver failed; carries its terminal state (terminal.py)
    ├── SessionRefused                  a policy stopped the session; it is recorded as a refused result
    │   ├── ActionByteCapExceeded       the run's screenshot byte cap would be crossed (budget.py)
    │   ├── ActionLimitExceeded         the session's action budget is spent
    │   ├── InvalidAction               the agent proposed an action the boundary cannot anchor
    │   └── NavigationRefused           a navigation (or a redirect / page navigation it led to) outside the session's origins
    ├── FlowError                       a scripted agent's flow file is malformed (agents.py)
    └── BrowserExtraMissing             Playwright is not installed (pip install 'bernstein-journal[browser]')

Elsewhere: ``MalformedSessionDocument`` (a MalformedInput; bytes that are not a
session document or action log) is the format's, in
``bernstein.schemas.documents.browser``; ``ReplayNotFound`` (the run holds no such
browser session) is the replay's, in ``bernstein.verifier.browser_replay``.

Codes are stable: appended to, never renamed. Playwright's exceptions never
leave ``playwright_driver.py``; they become ``ComputerUseDriverError``.
"""

from __future__ import annotations

from typing import ClassVar, Final

from bernstein.schemas.errors import BernsteinError


class ComputerUseError(BernsteinError):
    """Base class of the computer-use modality's deliberate failures."""

    code: ClassVar[str] = "E_COMPUTER_USE"


class SessionRefused(ComputerUseError):
    """A policy stopped the session before an action was anchored.

    The session records it (terminal state ``refused``, ``reason_code``) instead
    of dropping the evidence gathered so far.
    """

    code: ClassVar[str] = "SESSION_REFUSED"
    reason_code: ClassVar[str] = "refused"
    """The activity result's reason code when this refusal ends a session."""

    def evidence(self) -> dict[str, str | int]:
        """Machine-readable facts written into the session document's ``refusal``."""
        return {"code": self.code}


class ActionLimitExceeded(SessionRefused):
    """The agent wanted more actions than the session's budget allows."""

    code: ClassVar[str] = "ACTION_LIMIT_EXCEEDED"
    reason_code: ClassVar[str] = "action_limit_exceeded"

    def __init__(self, *, session_id: str, limit: int) -> None:
        super().__init__(f"browser session {session_id!r} reached its limit of {limit} actions; action {limit} was not taken")
        self.session_id = session_id
        self.limit = limit

    def evidence(self) -> dict[str, str | int]:
        return {"code": self.code, "limit": self.limit, "at_action": self.limit}


class InvalidAction(SessionRefused):
    """An action the boundary cannot anchor (unknown kind, oversized target, ...)."""

    code: ClassVar[str] = "INVALID_ACTION"
    reason_code: ClassVar[str] = "invalid_action"

    def __init__(self, message: str, *, field: str, index: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.index = index

    def evidence(self) -> dict[str, str | int]:
        facts: dict[str, str | int] = {"code": self.code, "field": self.field}
        if self.index is not None:
            facts["at_action"] = self.index
        return facts


class NavigationRefused(SessionRefused):
    """The browser was asked to go where the session's origin policy forbids (``bernstein.producers.netpolicy``).

    Raised at the boundary for a ``navigate`` action (before it is anchored:
    ``at_action`` is the refused action's index, which no record holds), or by
    the driver when an action led the page to a forbidden origin (a redirect,
    a script's ``window.location``): the request was aborted before any
    connection, and ``at_action`` is the anchored action that led there.
    ``policy`` is the ``TargetCode`` (SCHEME_NOT_ALLOWED, PRIVATE_ADDRESS,
    ORIGIN_NOT_ALLOWED, ...); ``via`` says where it was caught: ``action``
    (the agent's own target), ``redirect`` or ``page``.
    """

    code: ClassVar[str] = "NAVIGATION_REFUSED"
    reason_code: ClassVar[str] = "navigation_refused"

    def __init__(self, message: str, *, policy: str, url: str, via: str, index: int | None = None) -> None:
        super().__init__(message)
        self.policy = policy
        self.url = url
        self.via = via
        self.index = index

    def evidence(self) -> dict[str, str | int]:
        facts: dict[str, str | int] = {"code": self.code, "policy": self.policy, "via": self.via, "url": self.url[:2048]}
        if self.index is not None:
            facts["at_action"] = self.index
        return facts


class FlowError(ComputerUseError):
    """A flow file that cannot drive a scripted agent (raised before any browser starts)."""

    code: ClassVar[str] = "E_FLOW"


BROWSER_EXTRA: Final = "bernstein-journal[browser]"
"""The extra that installs Playwright (a producer-only install does without it)."""


class BrowserExtraMissing(ComputerUseError):
    """The browser driver was asked for in an install without Playwright (the ``browser`` extra)."""

    code: ClassVar[str] = "E_BROWSER_EXTRA_MISSING"

    def __init__(self, missing: str = "playwright") -> None:
        super().__init__(
            f"the browser modality needs Playwright ({missing} is not installed): "
            f"pip install '{BROWSER_EXTRA}' (it drives Debian's Chromium, see docs/computer_use.md)"
        )
