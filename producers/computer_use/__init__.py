"""Browser / computer-use activities: every action an external agent takes, anchored, signed and replayable.

Public API::

    from producers.computer_use import (
        ComputerUseSession, EmitterPublisher, ScriptedAgent, load_flow, PlaywrightDriver,   # record
        replay_run, replay_sessions, ReplayResult, ReplayDivergence, StepVerdict,            # replay
        isolated_profile_dir, classify_terminal_state, ComputerUseTerminalState,
        ComputerUseDriverError, ComputerUseRefusal, CapabilityRefusal, is_computer_use_capable,
        suggested_adapters, DEFAULT_RUN_BYTE_CAP, ActionByteCapExceeded,
    )

    session = ComputerUseSession(run_id, "browser-0", keys=keys, store=emitter.store,
                                 publisher=EmitterPublisher(emitter), worker_id="navigator@host",
                                 worktree=Path("."))
    policy = OriginPolicy.from_urls(url, allow=["http://127.0.0.1:8000"])   # producers.netpolicy
    outcome = session.run(ScriptedAgent(load_flow(path, base_url=url)), PlaywrightDriver.factory(policy=policy))
    result = replay_run(run_id, source=KafkaSource(...), cas=store, trusted=trusted)

Modules, one job each: ``boundary`` (the driver/agent contract and the
canonical action; imports no browser library), ``snapshot`` (normalising and
redacting accessibility snapshots), ``anchors`` (observation hash and anchor),
``lineage`` (the signed lineage entry), ``document`` (action records, action
log, session document), ``terminal`` (terminal states and driver errors),
``capability`` (gating), ``profiles`` (isolated profile directories),
``budget`` (the persisted per-run byte cap), ``session`` (recording),
``replay`` (offline replay), ``agents`` (the scripted agent),
``playwright_driver`` (the concrete driver; the only module importing
Playwright, loaded lazily from here), ``fakes`` (test doubles), ``cli``
(``bernstein browser run|replay``), ``demo`` (the demo's signup stage). The
rules are written down in ``docs/computer_use.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from producers.computer_use.agents import FLOW_FORMAT, ScriptedAgent, load_flow, parse_flow
from producers.computer_use.anchors import ObservationHashes, observation_hashes
from producers.computer_use.boundary import (
    AgentView,
    BrowserDriver,
    DriverFactory,
    ExternalAgent,
    Frame,
    ProposedAction,
    canonical_action,
)
from producers.computer_use.budget import DEFAULT_RUN_BYTE_CAP, ActionByteCapExceeded, ByteLedgerUnreadable, RunByteLedger
from producers.computer_use.capability import (
    CapabilityRefusal,
    ComputerUseRefusal,
    is_computer_use_capable,
    require_computer_use_capable,
    suggested_adapters,
)
from producers.computer_use.document import (
    ACTION_LOG_FORMAT,
    ActionRecord,
    SessionDocument,
    parse_action_log,
    parse_session_document,
)
from producers.computer_use.errors import (
    ActionLimitExceeded,
    ComputerUseError,
    FlowError,
    InvalidAction,
    MalformedSessionDocument,
    NavigationRefused,
    ReplayNotFound,
    SessionRefused,
)
from producers.computer_use.lineage import LINEAGE_FORMAT, LineageEnvelope
from producers.computer_use.profiles import isolated_profile_dir
from producers.computer_use.replay import (
    DivergenceReason,
    ReplayDivergence,
    ReplayResult,
    StepVerdict,
    replay_action_log,
    replay_run,
    replay_sessions,
)
from producers.computer_use.session import (
    ActionPublisher,
    ComputerUseSession,
    EmitterPublisher,
    SessionOutcome,
)
from producers.computer_use.snapshot import normalise_snapshot
from producers.computer_use.terminal import (
    TERMINAL_STATE_MAP,
    ComputerUseDriverError,
    ComputerUseTerminalState,
    DriverFault,
    activity_terminal_state,
    classify_terminal_state,
)
from schemas.documents.browser import Action

if TYPE_CHECKING:
    from producers.computer_use.playwright_driver import PlaywrightDriver


def __getattr__(name: str) -> Any:
    # Playwright is imported only when the concrete driver is asked for.
    if name == "PlaywrightDriver":
        from producers.computer_use.playwright_driver import PlaywrightDriver

        return PlaywrightDriver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACTION_LOG_FORMAT",
    "DEFAULT_RUN_BYTE_CAP",
    "FLOW_FORMAT",
    "LINEAGE_FORMAT",
    "TERMINAL_STATE_MAP",
    "Action",
    "ActionByteCapExceeded",
    "ActionLimitExceeded",
    "ActionPublisher",
    "ActionRecord",
    "AgentView",
    "BrowserDriver",
    "ByteLedgerUnreadable",
    "CapabilityRefusal",
    "ComputerUseDriverError",
    "ComputerUseError",
    "ComputerUseRefusal",
    "ComputerUseSession",
    "ComputerUseTerminalState",
    "DivergenceReason",
    "DriverFactory",
    "DriverFault",
    "EmitterPublisher",
    "ExternalAgent",
    "FlowError",
    "Frame",
    "InvalidAction",
    "NavigationRefused",
    "LineageEnvelope",
    "MalformedSessionDocument",
    "ObservationHashes",
    "PlaywrightDriver",
    "ProposedAction",
    "ReplayDivergence",
    "ReplayNotFound",
    "ReplayResult",
    "RunByteLedger",
    "ScriptedAgent",
    "SessionDocument",
    "SessionOutcome",
    "SessionRefused",
    "StepVerdict",
    "activity_terminal_state",
    "canonical_action",
    "classify_terminal_state",
    "is_computer_use_capable",
    "isolated_profile_dir",
    "load_flow",
    "normalise_snapshot",
    "observation_hashes",
    "parse_action_log",
    "parse_flow",
    "parse_session_document",
    "replay_action_log",
    "replay_run",
    "replay_sessions",
    "require_computer_use_capable",
    "suggested_adapters",
]
