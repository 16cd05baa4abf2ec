"""The demo's browser stage: a scripted agent signs up on the local demo site.

``browser_demo_stage`` runs ``demo/flows/signup.json`` in headless Chromium
against the demo site, with a fresh random password handed to the flow
through an environment mapping (never the process environment, never the
flow file), and publishes every action and the session's browser result.
The caller (``bernstein.demo``) prints the outcome.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Final

from bernstein.producers.computer_use.agents import ScriptedAgent, load_flow
from bernstein.producers.computer_use.session import ComputerUseSession, EmitterPublisher, SessionOutcome
from bernstein.producers.emitter import Emitter
from bernstein.substrate.keys import ProducerKeys

REPO: Final = Path(__file__).resolve().parent.parent.parent
SIGNUP_FLOW: Final = REPO / "demo" / "flows" / "signup.json"
PASSWORD_ENV: Final = "BERNSTEIN_SIGNUP_PASSWORD"  # noqa: S105 - the name of the variable, not a password


def browser_demo_stage(
    emitter: Emitter,
    run_id: str,
    keys: ProducerKeys,
    site_url: str,
    workdir: Path,
    *,
    session_id: str = "browser-0",
    role: str = "navigator",
    flow: Path = SIGNUP_FLOW,
    password: str | None = None,
) -> SessionOutcome:
    """Run the signup flow against ``site_url`` and publish it as browser session ``session_id``.

    ``workdir`` is the worktree for the session's isolated profile (removed at
    the end) and the run's byte ledger. Returns the outcome (``outcome.ok``,
    ``outcome.action_count``, ``outcome.head_anchor``, ``outcome.result_landed``).
    """
    from bernstein.producers.computer_use.playwright_driver import PlaywrightDriver
    from bernstein.producers.netpolicy import OriginPolicy

    # the demo site runs on loopback: its exact origin is allowed explicitly, nothing else is
    policy = OriginPolicy.from_urls(site_url, allow=[site_url])
    secret = password if password is not None else secrets.token_urlsafe(18)
    actions = load_flow(flow, base_url=site_url, env={PASSWORD_ENV: secret})
    session = ComputerUseSession(
        run_id,
        session_id,
        keys=keys,
        store=emitter.store,
        publisher=EmitterPublisher(emitter),
        worktree=workdir,
        role=role,
    )
    return session.run(ScriptedAgent(actions), PlaywrightDriver.factory(policy=policy))
