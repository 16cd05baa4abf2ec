"""Browser / computer-use activities: every action an external agent takes, anchored, signed and replayable.

Public API::

    from bernstein.producers.computer_use import (
        ComputerUseSession, EmitterPublisher, ScriptedAgent, load_flow, PlaywrightDriver,   # record
        isolated_profile_dir, classify_terminal_state, ComputerUseTerminalState,
        ComputerUseDriverError, ComputerUseRefusal, CapabilityRefusal, is_computer_use_capable,
        suggested_adapters, DEFAULT_RUN_BYTE_CAP, ActionByteCapExceeded,
    )

    session = ComputerUseSession(run_id, "browser-0", keys=keys, store=emitter.store,
                                 publisher=EmitterPublisher(emitter), worker_id="navigator@host",
                                 worktree=Path("."))
    policy = OriginPolicy.from_urls(url, allow=["http://127.0.0.1:8000"])   # producers.netpolicy
    outcome = session.run(ScriptedAgent(load_flow(path, base_url=url)), PlaywrightDriver.factory(policy=policy))

    from bernstein.verifier.browser_replay import replay_run          # the offline replay is the verifier's
    result = replay_run(run_id, source=KafkaSource(...), cas=store, trusted=trusted)

The recorded formats (action, observation hash and anchor, lineage entry,
action records, action log, session document, terminal states and their
mapping) live in ``bernstein.schemas.documents.browser``, shared with the scheduler and
the verifier, and this package re-exports them for its public API. The offline
replay is the verifier's (``bernstein.verifier.browser_replay``); the SDK does not import
the verifier (the layer contract in ``pyproject.toml``), so import it from there.

Modules, one job each: ``boundary`` (the driver/agent contract; imports no
browser library), ``snapshot`` (normalising and redacting accessibility
snapshots), ``lineage`` (sealing the signed lineage entry), ``terminal``
(classifying how a session ended, driver errors), ``capability`` (gating),
``profiles`` (isolated profile directories), ``budget`` (the persisted per-run
byte cap), ``session`` (recording), ``agents`` (the scripted agent),
``playwright_driver`` (the concrete driver; the only module importing
Playwright, loaded lazily from here), ``demo`` (the demo's signup
stage). ``bernstein browser run|replay`` is ``bernstein/commands/browser.py``; the
test doubles are ``tests/support/browser_fakes.py``. The
rules are written down in ``docs/computer_use.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bernstein.producers.computer_use.agents import FLOW_FORMAT, ScriptedAgent, load_flow, parse_flow
from bernstein.producers.computer_use.boundary import (
    AgentView,
    BrowserDriver,
    DriverFactory,
    ExternalAgent,
    Frame,
    ProposedAction,
    canonical_action,
)
from bernstein.producers.computer_use.budget import (
    DEFAULT_RUN_BYTE_CAP,
    ActionByteCapExceeded,
    ByteLedgerUnreadable,
    RunByteLedger,
)
from bernstein.producers.computer_use.capability import (
    CapabilityRefusal,
    ComputerUseRefusal,
    is_computer_use_capable,
    require_computer_use_capable,
    suggested_adapters,
)
from bernstein.producers.computer_use.errors import (
    ActionLimitExceeded,
    ComputerUseError,
    FlowError,
    InvalidAction,
    NavigationRefused,
    SessionRefused,
)
from bernstein.producers.computer_use.profiles import isolated_profile_dir
from bernstein.producers.computer_use.session import (
    ActionPublisher,
    ComputerUseSession,
    EmitterPublisher,
    SessionOutcome,
)
from bernstein.producers.computer_use.snapshot import normalise_snapshot
from bernstein.producers.computer_use.terminal import ComputerUseDriverError, DriverFault, classify_terminal_state
from bernstein.schemas.documents.browser import (
    ACTION_LOG_FORMAT,
    LINEAGE_FORMAT,
    TERMINAL_STATE_MAP,
    Action,
    ActionRecord,
    ComputerUseTerminalState,
    LineageEnvelope,
    MalformedSessionDocument,
    ObservationHashes,
    SessionDocument,
    activity_terminal_state,
    observation_hashes,
    parse_action_log,
    parse_session_document,
)

if TYPE_CHECKING:
    from bernstein.producers.computer_use.playwright_driver import PlaywrightDriver


def __getattr__(name: str) -> Any:
    # Playwright is imported only when the concrete driver is asked for.
    if name == "PlaywrightDriver":
        from bernstein.producers.computer_use.playwright_driver import PlaywrightDriver

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
    "RunByteLedger",
    "ScriptedAgent",
    "SessionDocument",
    "SessionOutcome",
    "SessionRefused",
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
    "require_computer_use_capable",
    "suggested_adapters",
]
