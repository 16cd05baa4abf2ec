"""The browser session when the agent owns the loop: one anchored action per tool call.

``ComputerUseSession.run`` owns its loop and asks an agent for the next
action. An MCP client owns its own loop, so ``SteppedBrowser`` drives the
same session one step at a time and keeps every guarantee of that loop,
reusing its code (``observe``, ``record``, ``record_final``, ``finish``):

1. the page is observed (screenshot and snapshot) and shown to the agent
   (``look``; every acting call shows the page after it, too); that
   observation, exactly what the agent was last shown, is what its next action
   is anchored to (a fresh one when the agent was shown none since);
2. a ref is resolved to a selector, the proposal validated (an invalid call is
   a tool error that changes nothing: nothing was stored or anchored);
3. ``ComputerUseSession.record`` charges the byte cap, stores screenshot and
   snapshot in the CAS, digests typed values with the producer's redaction
   key, checks the origin policy, anchors, HMAC-envelopes and signs the
   lineage entry and publishes the action, before
4. the driver performs it.

A stop the boundary decides (a refused navigation, the byte cap, the action
budget, the session timeout) or a driver fault ends the session at once, as
the loop would: its result is published with that terminal state and the
call returns a ``ToolError`` (``journalled``) naming the code and evidence.
``finish`` publishes an agent's own end (``completed`` with its final
observation, or ``failed`` with its reason); a client that disconnects
first ends it ``driver_failure`` / ``agent_disconnected``. Chromium starts on
the first browser call, so a research-only client starts none and publishes
no browser session. Every method runs on the server's one worker thread
(Playwright's sync API is bound to the thread that started it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from bernstein.producers.computer_use.boundary import Frame, ProposedAction, validate_proposal
from bernstein.producers.computer_use.capability import require_computer_use_capable
from bernstein.producers.computer_use.errors import (
    ActionLimitExceeded,
    ComputerUseError,
    InvalidAction,
    NavigationRefused,
    SessionRefused,
)
from bernstein.producers.computer_use.profiles import prepare_profile, remove_profile
from bernstein.producers.computer_use.session import ComputerUseSession, PendingObservation, SessionOutcome
from bernstein.producers.computer_use.terminal import ComputerUseDriverError, DriverFault
from bernstein.producers.mcp.errors import ToolCode, ToolError
from bernstein.producers.mcp.tools import ElementTarget, PlannedAction
from bernstein.producers.netpolicy import OriginPolicy
from bernstein.schemas.documents.browser import ActionRecord, ComputerUseTerminalState
from bernstein.schemas.documents.pointer import PointerTarget

AGENT_DISCONNECTED: Final = "AGENT_DISCONNECTED"
"""The fault of a session whose client went away before ``finish`` (reason ``agent_disconnected``)."""
_REF_MARK: Final = "[ref="
_KEPT_REF: Final = "[mcpref="
"""Refs renamed so normalisation keeps them in the agent's copy (it drops ``[ref=..]`` from the recorded one)."""


class RefDriver(Protocol):
    """What the stepped session needs of its driver beyond ``BrowserDriver``: refs and the page title."""

    def observe(self) -> Frame: ...

    def perform(self, action: ProposedAction) -> None: ...

    def close(self) -> None: ...

    def resolve(self, ref: str) -> str: ...

    def element_at(self, x: int, y: int) -> str: ...

    def focused_element(self) -> str: ...

    def title(self) -> str: ...


@dataclass(frozen=True, slots=True)
class PageView:
    """What the agent is shown: the recorded observation, plus its refs and the page title."""

    index: int
    """The index of the action this observation would anchor."""
    url: str
    title: str
    snapshot: str
    """The recorded (normalised, redacted) snapshot with Playwright's ``[ref=..]`` marks kept."""
    screenshot: bytes
    dom_digest: str
    observation_hash: str


@dataclass(frozen=True, slots=True)
class Performed:
    """One action anchored, published and performed."""

    record: ActionRecord


class SteppedBrowser:
    """One browser session driven one tool call at a time (see the module docstring)."""

    def __init__(
        self,
        session: ComputerUseSession,
        driver_factory: Callable[[Path], RefDriver],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.session = session
        self._factory = driver_factory
        self._clock = clock
        self._driver: RefDriver | None = None
        self._profile: Path | None = None
        self._deadline: float | None = None
        self._pending: PendingObservation | None = None
        self._shown = ""
        self._history: list[str] = []
        self.outcome: SessionOutcome | None = None

    @property
    def started(self) -> bool:
        return self._driver is not None or self.outcome is not None

    # -- the agent's calls --------------------------------------------------------------

    def look(self) -> PageView:
        """Observe the page now; the agent's next action is anchored to this observation."""
        self._open()
        return self._view(self._observe())

    def act(self, step: PlannedAction) -> Performed:
        """Anchor, publish and perform one action (raises ``ToolError``; ``journalled`` when the session ended)."""
        driver = self._open()
        pending = self._pending or self._observe()
        proposed = ProposedAction(step.kind, self._target(driver, step), step.value)
        try:
            validate_proposal(proposed, index=pending.index)
        except InvalidAction as exc:
            raise ToolError("INVALID_ACTION", exc.message, evidence=exc.evidence()) from None
        left = self._left()
        if left is not None and left < 0:
            raise self._end(self._session_timeout(f"before action {pending.index}"), "observe")
        if pending.index >= self.session.max_actions:
            raise self._end(ActionLimitExceeded(session_id=self.session.session_id, limit=self.session.max_actions), "agent")
        try:
            record = self.session.record(pending, proposed)
        except SessionRefused as exc:
            raise self._end(exc, "record") from None
        self._pending = None
        self._limit(driver)
        try:
            driver.perform(proposed)
        except ComputerUseDriverError as exc:
            raise self._end(self._timed(exc, f"while performing action {record.index}"), "perform") from None
        except NavigationRefused as exc:  # the action led the page where the policy forbids (a redirect, a script)
            if exc.index is None:
                exc.index = record.index
            raise self._end(exc, "perform") from None
        except Exception as exc:  # noqa: BLE001 - a driver's foreign error is translated, as the session loop does
            raise self._end(_translated(exc, DriverFault.ACTION_FAILED), "perform") from None
        return Performed(record)

    def back(self) -> PlannedAction:
        """The navigate ``browser_navigate_back`` stands for: the previous page of this session's history."""
        self._open()
        if self._pending is None:
            self._observe()
        if len(self._history) < 2:
            raise ToolError(ToolCode.NO_PREVIOUS_PAGE, "there is no previous page in this session's history")
        return PlannedAction("navigate", url=self._history[-2])

    def went_back(self) -> None:
        """``back``'s navigate was performed: the page before is now the current one."""
        if len(self._history) >= 2:
            del self._history[-1]

    def finish(self, state: str, reason: str) -> SessionOutcome | None:
        """The agent's end: ``completed`` records the final observation; ``failed`` its reason. None: never started."""
        if self.outcome is not None or self._driver is None:
            return self.outcome
        if state == "completed":
            try:
                pending = self._pending or self._observe()
            except ToolError:
                return self.outcome  # observing failed: the session ended as a driver failure
            try:
                self.session.record_final(pending)
            except SessionRefused as exc:
                return self._close(exc, "final")
            return self._close(None, "")
        return self._close(ComputerUseDriverError(f"the agent gave up: {reason}", fault=reason.upper()), "agent")

    def disconnect(self) -> SessionOutcome | None:
        """The client went away before ``finish``: the session ends ``driver_failure`` / ``agent_disconnected``."""
        if self.outcome is not None or self._driver is None:
            return self.outcome
        return self._close(ComputerUseDriverError("the agent disconnected before finishing", fault=AGENT_DISCONNECTED), "agent")

    # -- internals ------------------------------------------------------------------------

    def _open(self) -> RefDriver:
        if self.outcome is not None:
            raise ToolError(
                ToolCode.SESSION_ENDED,
                f"the browser session has ended ({self.outcome.activity_terminal_state.value}/{self.outcome.reason_code}); "
                "no action may follow: call finish",
                evidence=_summary(self.outcome),
                journalled=True,
            )
        if self._driver is not None:
            return self._driver
        session = self.session
        require_computer_use_capable(session.adapter)  # before any process starts
        self._profile = prepare_profile(session.session_id, worktree=session.worktree, run_id=session.run_id)
        try:
            driver = self._factory(self._profile)
        except (ComputerUseDriverError, SessionRefused) as exc:
            raise self._end(exc, "launch") from None
        except Exception as exc:  # noqa: BLE001 - a driver's foreign error is translated here
            raise self._end(_translated(exc, DriverFault.BROWSER_LAUNCH_FAILED), "launch") from None
        self._driver = driver
        if session.navigation is None:
            policy = getattr(driver, "navigation_policy", None)
            session.navigation = policy if isinstance(policy, OriginPolicy) else None
        if session.timeout is not None:
            self._deadline = self._clock() + session.timeout
        return driver

    def _observe(self) -> PendingObservation:
        driver = self._open()
        index = len(self.session.records)
        left = self._left()
        if left is not None and left < 0:
            raise self._end(self._session_timeout(f"before action {index}"), "observe")
        self._limit(driver)
        try:
            frame = driver.observe()
        except ComputerUseDriverError as exc:
            raise self._end(self._timed(exc, f"while observing before action {index}"), "observe") from None
        except Exception as exc:  # noqa: BLE001
            raise self._end(_translated(exc, DriverFault.OBSERVE_FAILED), "observe") from None
        pending = self.session.observe(frame)
        shown = self.session.observe(Frame(frame.screenshot, frame.aria_snapshot.replace(_REF_MARK, _KEPT_REF), frame.url))
        self._pending = pending
        self._shown = shown.snapshot.decode("utf-8").replace(_KEPT_REF, _REF_MARK)
        if frame.url.startswith(("http://", "https://")) and (not self._history or self._history[-1] != frame.url):
            self._history.append(frame.url)
        return pending

    def _view(self, pending: PendingObservation) -> PageView:
        driver = self._open()
        return PageView(
            index=pending.index,
            url=pending.url,
            title=driver.title(),
            snapshot=self._shown,
            screenshot=pending.screenshot,
            dom_digest=pending.hashes.dom_digest,
            observation_hash=pending.hashes.observation_hash,
        )

    def _target(self, driver: RefDriver, step: PlannedAction) -> str:
        if step.at is not None or step.focused or step.to_element is not None:
            return self._pointer(driver, step).text()
        if step.element is not None:
            return _selector(driver, step.element)
        return step.url or step.raw_target

    def _pointer(self, driver: RefDriver, step: PlannedAction) -> PointerTarget:
        """Where a pointer or keyboard step lands, resolved now, before it is anchored (an element for every point)."""
        try:
            if step.focused:
                return PointerTarget(driver.focused_element(), focused=True)
            if step.at is not None:
                element = driver.element_at(*step.at)
                if step.to is None:
                    return PointerTarget(element, at=step.at)
                return PointerTarget(element, at=step.at, to=step.to, to_element=driver.element_at(*step.to))
        except ComputerUseDriverError as exc:
            raise self._end(self._timed(exc, "while resolving a point to its element"), "observe") from None
        if step.element is None or step.to_element is None:
            raise ToolError("INVALID_ACTION", f"a {step.kind} step names neither a point nor both of its elements")
        return PointerTarget(_selector(driver, step.element), to_element=_selector(driver, step.to_element))

    def _left(self) -> float | None:
        return None if self._deadline is None else self._deadline - self._clock()

    def _limit(self, driver: RefDriver) -> None:
        """Bound the driver's next calls by the session's time left (``limit_time``), as the session loop does."""
        left = self._left()
        limit = getattr(driver, "limit_time", None)
        if left is not None and callable(limit):
            limit(max(left, 0.001))

    def _session_timeout(self, where: str) -> ComputerUseDriverError:
        return ComputerUseDriverError(
            f"browser session {self.session.session_id!r} exceeded its {self.session.timeout}s timeout {where}",
            terminal_state=ComputerUseTerminalState.TIMEOUT,
            fault=DriverFault.SESSION_TIMEOUT,
        )

    def _timed(self, exc: ComputerUseDriverError, where: str) -> ComputerUseDriverError:
        left = self._left()
        if exc.terminal_state is ComputerUseTerminalState.TIMEOUT and left is not None and left <= 0:
            return self._session_timeout(where)
        return exc

    def _end(self, error: ComputerUseError, phase: str) -> ToolError:
        """End the session on ``error`` (its result published) and say so to the agent."""
        outcome = self._close(error, phase)
        evidence: dict[str, Any] = dict(error.evidence()) if isinstance(error, SessionRefused) else {}
        if isinstance(error, ComputerUseDriverError):
            evidence["fault"] = error.fault
        evidence.update(_summary(outcome))
        return ToolError(
            error.code,
            f"{error.message}; the browser session ended {outcome.activity_terminal_state.value}/{outcome.reason_code} "
            "and its result is published",
            evidence=evidence,
            journalled=True,
        )

    def _close(self, error: ComputerUseError | None, phase: str) -> SessionOutcome:
        try:
            self.outcome = self.session.finish(error, phase=phase)
        finally:
            driver, self._driver, self._pending = self._driver, None, None
            if driver is not None:
                try:
                    driver.close()
                except Exception:  # noqa: BLE001, S110 - closing a broken browser must not mask how the session ended
                    pass
            if self._profile is not None and not self.session.keep_profile:
                remove_profile(self._profile)
        return self.outcome


def _selector(driver: RefDriver, element: ElementTarget) -> str:
    return driver.resolve(element.target) if element.is_ref else element.target


def _summary(outcome: SessionOutcome) -> dict[str, Any]:
    return {
        "session_id": outcome.session_id,
        "terminal_state": outcome.activity_terminal_state.value,
        "reason_code": outcome.reason_code,
        "actions": outcome.action_count,
        "head_anchor": outcome.head_anchor,
        "artifact_hash": outcome.result.artifact_hash,
    }


def _translated(exc: Exception, fault: str) -> ComputerUseDriverError:
    """A stray exception of a driver as a typed driver error (its type name only: no message that may hold a value)."""
    if isinstance(exc, TimeoutError):
        return ComputerUseDriverError(
            f"{fault.lower()}: {type(exc).__name__}", terminal_state=ComputerUseTerminalState.TIMEOUT, fault=fault
        )
    return ComputerUseDriverError(f"{fault.lower()}: {type(exc).__name__}", fault=fault)
