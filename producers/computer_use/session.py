"""One recorded browser session: every action anchored, signed and published; one result at the end.

    keys = load_producer_keys(dir)        # this host's producer keys (`bernstein keys init --producer`)
    session = ComputerUseSession("run-42", "browser-0", keys=keys, store=store,
                                 publisher=EmitterPublisher(emitter), worktree=Path("."))
    outcome = session.run(agent, driver_factory)   # ScriptedAgent, PlaywrightDriver.factory()

Per action (``record``), in this order:

1. the driver's pre-action frame is normalised (``snapshot.normalise_snapshot``:
   stable text, typed values redacted) and shown to the agent, which decides;
2. the proposal becomes the canonical action (its value only as a digest keyed with
   the producer's redaction key, which never leaves this host);
   a ``navigate`` whose target the session's origin policy refuses is
   ``NavigationRefused`` here, before anything is stored or anchored;
3. the screenshot is charged to the run's persisted byte cap (overflow raises
   ``ActionByteCapExceeded`` before anything is stored or anchored);
4. screenshot and snapshot bytes go to the CAS (dedupe by hash);
5. observation hash and anchor are computed; the lineage entry (prior anchor
   as parent) is HMAC-enveloped with the producer's lineage key and signed with
   its producer key (that signature is the producer's signature of the action);
6. the ``ComputerUseAction`` is published (blobs first, then the event);
7. only then does the driver perform the action.

``run`` always ends with exactly one browser ``ActivityResult`` (stage id =
session id) whose artifact is the session document (head anchor, action
count, anchors, action log, terminal state, reason code) and whose
observations are the stored screenshots, snapshots and the action log. A
driver fault, a timeout or a refusal is not an exception to the caller: it is
anchored as that result's terminal state (``classify_terminal_state``) with a
stable reason code, and returned in the ``SessionOutcome``. Capability gating
runs before the driver factory is called, so an incapable adapter starts
nothing.

The origin policy (``bernstein.producers.netpolicy.OriginPolicy``) is the
``navigation`` argument, or else the driver's own ``navigation_policy`` (the
Playwright driver always has one and enforces it on every request too). A
driver without one (the in-memory fakes) reaches no network; the boundary
then checks only what ``validate_proposal`` checks.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from bernstein.producers.activity import ActivityResult, require_valid_ids
from bernstein.producers.computer_use.boundary import (
    AgentView,
    BrowserDriver,
    DriverFactory,
    ExternalAgent,
    Frame,
    ProposedAction,
    canonical_action,
)
from bernstein.producers.computer_use.budget import DEFAULT_RUN_BYTE_CAP, RunByteLedger
from bernstein.producers.computer_use.capability import require_computer_use_capable
from bernstein.producers.computer_use.errors import ActionLimitExceeded, ComputerUseError, NavigationRefused, SessionRefused
from bernstein.producers.computer_use.lineage import LineageBinding, lineage_entry, seal_lineage
from bernstein.producers.computer_use.profiles import prepare_profile, remove_profile
from bernstein.producers.computer_use.snapshot import normalise_snapshot
from bernstein.producers.computer_use.terminal import ComputerUseDriverError, DriverFault, classify_terminal_state
from bernstein.producers.identity import ProducerIdMismatch, resolve_producer_id
from bernstein.producers.netpolicy import OriginPolicy, TargetRefused
from bernstein.schemas import codec
from bernstein.schemas.documents.browser import (
    ActionRecord,
    ComputerUseTerminalState,
    ObservationHashes,
    action_log_bytes,
    activity_terminal_state,
    anchor,
    genesis,
    observation_hashes,
    session_document,
)
from bernstein.schemas.records import ActivityKind, Observation, TerminalState
from bernstein.substrate.cas import BlobStore
from bernstein.substrate.keys import ProducerKeys

if TYPE_CHECKING:
    from bernstein.producers.emitter import Emitter

SDK: Final = "bernstein-python/0.1.0 computer-use"
DEFAULT_MAX_ACTIONS: Final = 500
SCRUBBED_KINDS: Final = frozenset({"type", "select"})
"""Kinds whose value is scrubbed from later snapshots (and whose field the driver masks). ``press`` values are
key names or single characters (Playwright refuses anything else), so they cannot carry a multi-character secret."""
MAX_ACTIONS_LIMIT: Final = 2000
"""Two observations per action plus the action log must stay under the scheduler's 4096."""


class ActionPublisher(Protocol):
    """Where a session's events go (the emitter in production, a recorder in tests)."""

    @property
    def producer_id(self) -> str:
        """The producer its results are signed as: the session's worker, whose key signs the lineage."""
        ...

    def publish_action(self, run_id: str, submission_id: str, value: bytes) -> str:
        """Publish an encoded ComputerUseAction; return where it landed."""
        ...

    def publish_result(self, run_id: str, stage_id: str, role: str, result: ActivityResult) -> str:
        """Publish the session's browser result; return where it landed."""
        ...


class EmitterPublisher:
    """``ActionPublisher`` over ``bernstein.producers.emitter.Emitter`` (blobs are already stored)."""

    def __init__(self, emitter: Emitter) -> None:
        self.emitter = emitter

    @property
    def producer_id(self) -> str:
        return self.emitter.producer_id

    def publish_action(self, run_id: str, submission_id: str, value: bytes) -> str:
        return self.emitter.publish_raw(run_id, value, submission_id=submission_id).where

    def publish_result(self, run_id: str, stage_id: str, role: str, result: ActivityResult) -> str:
        return self.emitter.publish(run_id=run_id, stage_id=stage_id, role=role, result=result).where


@dataclass(frozen=True, slots=True)
class PendingObservation:
    """A normalised pre-action observation, not yet anchored."""

    index: int
    screenshot: bytes
    snapshot: bytes
    url: str
    hashes: ObservationHashes

    def view(self) -> AgentView:
        return AgentView(self.index, self.screenshot, self.snapshot.decode("utf-8"), self.url)


@dataclass(frozen=True)
class SessionOutcome:
    """How a session ended and what was recorded."""

    run_id: str
    session_id: str
    terminal_state: ComputerUseTerminalState
    activity_terminal_state: TerminalState
    reason_code: str
    records: tuple[ActionRecord, ...]
    head_anchor: str
    result: ActivityResult
    document: dict[str, Any]
    result_landed: str
    action_landings: tuple[str, ...]
    error: ComputerUseError | None = None
    """The typed failure that ended the session (driver fault, timeout, refusal); None when ok."""

    @property
    def action_count(self) -> int:
        return len(self.records)

    @property
    def ok(self) -> bool:
        return self.terminal_state is ComputerUseTerminalState.OK


class ComputerUseSession:
    """Records one external agent's browser session (see the module docstring)."""

    def __init__(
        self,
        run_id: str,
        session_id: str,
        *,
        keys: ProducerKeys,
        store: BlobStore,
        publisher: ActionPublisher,
        worktree: Path,
        worker_id: str | None = None,
        role: str = "navigator",
        adapter: str = "playwright",
        byte_cap: int = DEFAULT_RUN_BYTE_CAP,
        max_actions: int = DEFAULT_MAX_ACTIONS,
        timeout: float | None = None,
        keep_profile: bool = False,
        navigation: OriginPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        worker_id = resolve_producer_id(keys, worker_id)
        if publisher.producer_id != worker_id:
            raise ProducerIdMismatch(
                f"the session's results would be published as {publisher.producer_id!r}, but its actions are signed by "
                f"producer {worker_id!r}: one session, one producer (give the emitter the same producer keys)"
            )
        require_valid_ids(("run_id", run_id), ("session_id", session_id), ("role", role), ("worker_id", worker_id))
        if isinstance(max_actions, bool) or not isinstance(max_actions, int) or not 0 <= max_actions <= MAX_ACTIONS_LIMIT:
            raise ValueError(f"max_actions must be an integer between 0 and {MAX_ACTIONS_LIMIT}, got {max_actions!r}")
        self.run_id = run_id
        self.session_id = session_id
        self.keys = keys
        self.store = store
        self.publisher = publisher
        self.worker_id = worker_id
        self.worktree = Path(worktree)
        self.role = role
        self.adapter = adapter
        self.max_actions = max_actions
        self.timeout = timeout
        self.keep_profile = keep_profile
        self.navigation = navigation
        """The origin policy navigate actions are checked against (None: the driver's, if it has one)."""
        self.ledger = RunByteLedger(run_id, worktree=self.worktree, cap=byte_cap)
        self.genesis = genesis(run_id, session_id)
        self._clock = clock
        self._records: list[ActionRecord] = []
        self._landings: list[str] = []
        self._typed: set[str] = set()
        self._final: PendingObservation | None = None
        self._outcome: SessionOutcome | None = None
        self._sizes: dict[str, int] = {}
        """digest -> byte length of every blob the session stored (declared on the wire: the run's evidence cap)."""

    # -- the whole session ----------------------------------------------------------

    @property
    def records(self) -> tuple[ActionRecord, ...]:
        return tuple(self._records)

    @property
    def head(self) -> str:
        return self._records[-1].anchor if self._records else self.genesis

    def run(self, agent: ExternalAgent, driver_factory: DriverFactory) -> SessionOutcome:
        """Gate, launch, loop until the agent is done or the session fails, always record the end."""
        require_computer_use_capable(self.adapter)  # before any process starts
        profile = prepare_profile(self.session_id, worktree=self.worktree, run_id=self.run_id)
        driver: BrowserDriver | None = None
        error: ComputerUseError | None = None
        phase = ""
        try:
            try:
                driver = driver_factory(profile)
            except ComputerUseDriverError as exc:
                error, phase = exc, "launch"
            except SessionRefused as exc:  # e.g. an allowed origin that resolves to a private address
                error, phase = exc, "launch"
            except Exception as exc:  # noqa: BLE001 - a driver's foreign error is translated here
                error, phase = _translated(exc, DriverFault.BROWSER_LAUNCH_FAILED), "launch"
            if driver is not None:
                if self.navigation is None:
                    policy = getattr(driver, "navigation_policy", None)
                    self.navigation = policy if isinstance(policy, OriginPolicy) else None
                error, phase = self._loop(agent, driver)
        finally:
            if driver is not None:
                try:
                    driver.close()
                except Exception:  # noqa: BLE001, S110 - closing a broken browser must not mask how the session ended
                    pass
            if not self.keep_profile:
                remove_profile(profile)
        return self.finish(error, phase=phase)

    def _loop(self, agent: ExternalAgent, driver: BrowserDriver) -> tuple[ComputerUseError | None, str]:
        deadline = None if self.timeout is None else self._clock() + self.timeout
        while True:
            index = len(self._records)
            left = self._left(deadline)
            if left is not None and left < 0:
                return self._session_timeout(f"before action {index}"), "observe"
            _limit_driver(driver, left)
            try:
                frame = driver.observe()
            except ComputerUseDriverError as exc:
                return self._timed(exc, deadline, f"while observing before action {index}"), "observe"
            except Exception as exc:  # noqa: BLE001
                return _translated(exc, DriverFault.OBSERVE_FAILED), "observe"
            pending = self.observe(frame)
            try:
                proposed = _ask(agent, pending.view(), self._left(deadline))
            except _AgentOverran:
                return self._session_timeout(f"while the agent decided action {index}"), "agent"
            except ComputerUseDriverError as exc:
                return exc, "agent"
            except Exception as exc:  # noqa: BLE001 - the external agent's failure ends the session, recorded
                return _translated(exc, DriverFault.AGENT_FAILED), "agent"
            if proposed is None:
                try:
                    self.record_final(pending)
                except SessionRefused as exc:
                    return exc, "final"
                return None, ""
            if index >= self.max_actions:
                return ActionLimitExceeded(session_id=self.session_id, limit=self.max_actions), "agent"
            try:
                self.record(pending, proposed)
            except SessionRefused as exc:
                return exc, "record"
            _limit_driver(driver, self._left(deadline))
            try:
                driver.perform(proposed)
            except ComputerUseDriverError as exc:
                return self._timed(exc, deadline, f"while performing action {index}"), "perform"
            except NavigationRefused as exc:  # the action led the page where the policy forbids (a redirect, a script)
                if exc.index is None:
                    exc.index = len(self._records) - 1
                return exc, "perform"
            except Exception as exc:  # noqa: BLE001
                return _translated(exc, DriverFault.ACTION_FAILED), "perform"

    def _left(self, deadline: float | None) -> float | None:
        return None if deadline is None else deadline - self._clock()

    def _session_timeout(self, where: str) -> ComputerUseDriverError:
        return ComputerUseDriverError(
            f"browser session {self.session_id!r} exceeded its {self.timeout}s timeout {where}",
            terminal_state=ComputerUseTerminalState.TIMEOUT,
            fault=DriverFault.SESSION_TIMEOUT,
        )

    def _timed(self, exc: ComputerUseDriverError, deadline: float | None, where: str) -> ComputerUseDriverError:
        """A driver timeout caused by the session's own time running out is the session's timeout."""
        if exc.terminal_state is ComputerUseTerminalState.TIMEOUT and deadline is not None and self._clock() >= deadline:
            return self._session_timeout(where)
        return exc

    # -- one action -------------------------------------------------------------------

    def observe(self, frame: Frame) -> PendingObservation:
        """Normalise and hash a pre-action frame (nothing is stored yet)."""
        text = normalise_snapshot(frame.aria_snapshot, key=self.keys.redaction.secret, typed_values=self._typed)
        snapshot = text.encode("utf-8")
        return PendingObservation(
            len(self._records), frame.screenshot, snapshot, frame.url, observation_hashes(frame.screenshot, snapshot)
        )

    def record(self, pending: PendingObservation, proposed: ProposedAction) -> ActionRecord:
        """Anchor, sign and publish one action (raises ``InvalidAction`` / ``ActionByteCapExceeded``)."""
        if self._outcome is not None:
            raise ComputerUseError(f"browser session {self.session_id!r} has ended; no action may follow")
        index = len(self._records)
        if pending.index != index:
            raise ComputerUseError(f"observation {pending.index} is stale: the session is at action {index}")
        action = canonical_action(proposed, key=self.keys.redaction.secret, index=index)
        if action.kind == "navigate" and self.navigation is not None:
            try:
                self.navigation.check(action.target)
            except TargetRefused as exc:
                raise NavigationRefused(
                    f"navigate action {index}: {exc.message}", policy=exc.code, url=action.target, via="action", index=index
                ) from None
        hashes = pending.hashes
        self.ledger.charge(hashes.screenshot_hash, len(pending.screenshot), at_action=index)
        self.store.put(pending.screenshot)
        self.store.put(pending.snapshot)
        self._sizes.setdefault(hashes.screenshot_hash, len(pending.screenshot))
        self._sizes.setdefault(hashes.dom_digest, len(pending.snapshot))
        prev = self.head
        link = anchor(prev, hashes.observation_hash, action)
        binding = LineageBinding(self.run_id, self.session_id, index, link, prev, self.worker_id)
        envelope = seal_lineage(
            lineage_entry(
                binding,
                key_id=self.keys.signer.key_id,
                hmac_key_id=self.keys.lineage.key_id,
                observation_hash=hashes.observation_hash,
                screenshot_hash=hashes.screenshot_hash,
                dom_digest=hashes.dom_digest,
                action=action,
            ),
            signer=self.keys.signer,
            envelope_key=self.keys.lineage,
        )
        record = ActionRecord(
            index=index,
            prev_anchor=prev,
            anchor=link,
            screenshot_hash=hashes.screenshot_hash,
            dom_digest=hashes.dom_digest,
            observation_hash=hashes.observation_hash,
            action=action,
            lineage=envelope,
        )
        submission_id = hashlib.sha256(f"{self.run_id}\x00{self.session_id}\x00{index}\x00{link}".encode()).hexdigest()[:32]
        value = codec.encode(
            codec.COMPUTER_USE_ACTION_V2,
            {
                "submission_id": submission_id,
                "run_id": self.run_id,
                "session_id": self.session_id,
                "action_index": index,
                "producer": {"id": self.worker_id, "sdk": SDK},
                "prev_anchor": prev,
                "screenshot_hash": hashes.screenshot_hash,
                "screenshot_size": len(pending.screenshot),
                "dom_digest": hashes.dom_digest,
                "dom_size": len(pending.snapshot),
                "observation_hash": hashes.observation_hash,
                "action": action.to_record(),
                "anchor": link,
                "lineage": envelope.to_record(),
                "occurred_at_ms": int(time.time() * 1000),
            },
        )
        landed = self.publisher.publish_action(self.run_id, submission_id, value)
        self._records.append(record)
        self._landings.append(landed)
        if proposed.kind in SCRUBBED_KINDS and proposed.value:
            self._typed.add(proposed.value)  # scrubbed from every later snapshot
        return record

    def record_final(self, pending: PendingObservation) -> None:
        """Store the frame the agent saw when it declared itself done (charged to the byte cap).

        It is not an action, so it has no anchor; the session document names
        its hashes, and the sealed journal entry of the result binds them.
        """
        self.ledger.charge(pending.hashes.screenshot_hash, len(pending.screenshot), at_action=pending.index)
        self.store.put(pending.screenshot)
        self.store.put(pending.snapshot)
        self._sizes.setdefault(pending.hashes.screenshot_hash, len(pending.screenshot))
        self._sizes.setdefault(pending.hashes.dom_digest, len(pending.snapshot))
        self._final = pending

    # -- the end ----------------------------------------------------------------------

    def finish(self, error: ComputerUseError | None = None, *, phase: str = "") -> SessionOutcome:
        """Record how the session ended: store the action log and document, publish the browser result."""
        if self._outcome is not None:
            return self._outcome
        state = classify_terminal_state(error)
        fault: dict[str, Any] | None = None
        refusal: dict[str, Any] | None = None
        if isinstance(error, SessionRefused):
            reason = error.reason_code
            refusal = dict(error.evidence())
        elif isinstance(error, ComputerUseDriverError):
            reason = error.reason_code
            failed_at = len(self._records) - 1 if phase == "perform" else len(self._records)
            fault = {"code": error.fault, "phase": phase or "unknown", "action_index": failed_at}
        elif error is not None:
            reason = state.value
        else:
            reason = "ok"
        log = action_log_bytes(self.run_id, self.session_id, self._records)
        log_hash = self.store.put(log)
        self._sizes[log_hash] = len(log)
        document = session_document(
            run_id=self.run_id,
            session_id=self.session_id,
            genesis=self.genesis,
            records=self._records,
            action_log=log_hash,
            terminal_state=state,
            reason_code=reason,
            adapter=self.adapter,
            worker_id=self.worker_id,
            fault=fault,
            refusal=refusal,
            final=None if self._final is None else self._final.hashes,
        )
        result = ActivityResult.build(
            ActivityKind.BROWSER,
            document,
            self._observations(log_hash),
            terminal_state=activity_terminal_state(state),
            reason_code=reason,
        )
        self.store.put(result.artifact)
        landed = self.publisher.publish_result(self.run_id, self.session_id, self.role, result)
        self._outcome = SessionOutcome(
            run_id=self.run_id,
            session_id=self.session_id,
            terminal_state=state,
            activity_terminal_state=result.terminal_state,
            reason_code=reason,
            records=tuple(self._records),
            head_anchor=self.head,
            result=result,
            document=document,
            result_landed=landed,
            action_landings=tuple(self._landings),
            error=error,
        )
        return self._outcome

    def _observations(self, log_hash: str) -> list[Observation]:
        seen: set[str] = set()
        observations: list[Observation] = []
        for record in self._records:
            ref = f"action-{record.index:06d}"
            for kind, digest in (("screenshot", record.screenshot_hash), ("snapshot", record.dom_digest)):
                if digest not in seen:
                    seen.add(digest)
                    observations.append(Observation(kind=kind, ref=ref, content_hash=digest, size=self._sizes.get(digest)))
        if self._final is not None:
            for kind, digest in (("screenshot", self._final.hashes.screenshot_hash), ("snapshot", self._final.hashes.dom_digest)):
                if digest not in seen:
                    seen.add(digest)
                    observations.append(Observation(kind=kind, ref="final", content_hash=digest, size=self._sizes.get(digest)))
        observations.append(
            Observation(kind="action_log", ref=f"session:{self.session_id}", content_hash=log_hash, size=self._sizes[log_hash])
        )
        return observations


class _AgentOverran(Exception):
    """The external agent did not decide within the session's time left."""


def _ask(agent: ExternalAgent, view: AgentView, left: float | None) -> ProposedAction | None:
    """``agent.next_action(view)``; with a session timeout, waited for at most ``left`` seconds.

    The agent then runs on a daemon thread: one that overruns is abandoned
    (Python cannot stop a thread), its answer ignored, and the session ends
    ``timeout`` / ``session_timeout`` on time.
    """
    if left is None:
        return agent.next_action(view)
    answer: list[ProposedAction | None] = []
    failure: list[BaseException] = []

    def decide() -> None:
        try:
            answer.append(agent.next_action(view))
        except BaseException as exc:  # noqa: BLE001 - handed back to the session's thread
            failure.append(exc)

    thread = threading.Thread(target=decide, name="computer-use-agent", daemon=True)
    thread.start()
    thread.join(max(left, 0.0))
    if thread.is_alive():
        raise _AgentOverran
    if failure:
        raise failure[0]
    return answer[0]


def _limit_driver(driver: BrowserDriver, left: float | None) -> None:
    """Tell a driver that can bound its own calls (``limit_time``) how long the session has left."""
    limit = getattr(driver, "limit_time", None)
    if left is not None and callable(limit):
        limit(max(left, 0.001))


def _translated(exc: Exception, fault: str) -> ComputerUseDriverError:
    """A stray exception from a driver or agent, as a typed driver error (type name only: no message that may hold a value)."""
    if isinstance(exc, TimeoutError):
        return ComputerUseDriverError(
            f"{fault.lower()}: {type(exc).__name__}", terminal_state=ComputerUseTerminalState.TIMEOUT, fault=fault
        )
    return ComputerUseDriverError(f"{fault.lower()}: {type(exc).__name__}", fault=fault)
