"""Where a real headless Chromium may go: only the session's origins, refused at the step that tries anything else.

Network rule of these tests: every server listens on loopback on this
machine. The allowed site is on 127.0.0.1 (allowed by its exact origin);
the "elsewhere" server is on 127.0.0.2 and counts every request it gets,
so "blocked" is proven by a count of zero. Private addresses (10.x,
169.254.169.254) are only ever named, never contacted: the boundary refuses
them before the driver acts, and Chromium's resolver rules and the route
abort them before any connection.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bernstein.producers.computer_use import (
    ComputerUseSession,
    ComputerUseTerminalState,
    ProposedAction,
    ScriptedAgent,
    SessionOutcome,
    parse_session_document,
)
from bernstein.producers.computer_use.playwright_driver import BlockedRequest, PlaywrightDriver
from bernstein.producers.netpolicy import OriginPolicy
from bernstein.schemas.records import TerminalState
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import ProducerKeys, init_producer_keys
from bernstein.verifier.browser_replay import replay_run
from tests.support.browser_fakes import InMemoryScheduler, RecordingPublisher
from tests.support.browser_site import chromium_processes

pytestmark = pytest.mark.browser

ELSEWHERE_HOST = "127.0.0.2"


@dataclass
class Server:
    url: str
    hits: list[str] = field(default_factory=list)


def _pages(elsewhere: str) -> dict[str, tuple[int, dict[str, str], bytes]]:
    html = {"Content-Type": "text/html; charset=utf-8"}
    return {
        "/index.html": (200, html, b"<!doctype html><title>Home</title><h1>Home</h1>"),
        "/to-elsewhere": (302, {"Location": f"{elsewhere}/secret"}, b""),
        "/to-metadata": (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b""),
        "/hop": (302, {"Location": "/to-elsewhere"}, b""),
        "/with-subresources": (
            200,
            html,
            (
                f'<!doctype html><title>Sub</title><h1>Sub</h1><img id="pixel" src="{elsewhere}/pixel.png">'
                f'<script src="{elsewhere}/tracker.js"></script>'
                '<img id="inline" src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">'
                f'<script>fetch("{elsewhere}/api").catch(() => 0);'
                f'new WebSocket("{elsewhere.replace("http:", "ws:")}/socket");</script>'
            ).encode(),
        ),
        "/script-navigates": (
            200,
            html,
            f'<!doctype html><title>Go</title><h1>Go</h1><script>window.location.href = "{elsewhere}/js";</script>'.encode(),
        ),
    }


@contextmanager
def serve_pages(host: str, pages: dict[str, tuple[int, dict[str, str], bytes]]) -> Iterator[Server]:
    """A loopback server answering ``pages`` (404 otherwise) and recording every path it was asked for."""
    server_state = Server("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server_state.hits.append(self.path)
            status, headers, body = pages.get(self.path.split("?", 1)[0], (404, {}, b"not here"))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server_state.url = f"http://{host}:{server.server_address[1]}"
    try:
        yield server_state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@dataclass
class Sites:
    site: Server
    elsewhere: Server


@pytest.fixture
def sites() -> Iterator[Sites]:
    secret = {"/secret": (200, {"Content-Type": "text/plain"}, b"internal secret")}
    with serve_pages(ELSEWHERE_HOST, secret) as elsewhere, serve_pages("127.0.0.1", _pages(elsewhere.url)) as site:
        yield Sites(site, elsewhere)


@pytest.fixture
def keys(tmp_path: Path) -> ProducerKeys:
    return init_producer_keys(tmp_path / "producer-keys", "navigator@test")


@pytest.fixture(autouse=True)
def no_chromium_left(tmp_path: Path) -> Iterator[None]:
    yield
    assert chromium_processes(str(tmp_path)) == []


@dataclass
class Ran:
    outcome: SessionOutcome
    publisher: RecordingPublisher
    store: DirBlobStore
    driver: PlaywrightDriver

    @property
    def refusal(self) -> Mapping[str, Any] | None:
        return parse_session_document(self.outcome.result.artifact).refusal

    def blocked(self) -> list[BlockedRequest]:
        return list(self.driver.blocked)


def run_session(sites: Sites, tmp_path: Path, keys: ProducerKeys, actions: list[ProposedAction], name: str) -> Ran:
    """One recorded session on real Chromium that may reach only the local site's exact origin."""
    policy = OriginPolicy.from_urls(sites.site.url, allow=[sites.site.url])
    store = DirBlobStore(tmp_path / "cas")
    publisher = RecordingPublisher(keys)
    launched: list[PlaywrightDriver] = []

    def factory(profile: Path) -> PlaywrightDriver:
        driver = PlaywrightDriver.launch(profile, policy=policy)
        launched.append(driver)
        return driver

    session = ComputerUseSession(
        "run-reach", name, keys=keys, store=store, publisher=publisher, worker_id="navigator@test", worktree=tmp_path / "w"
    )
    outcome = session.run(ScriptedAgent(actions), factory)
    # whatever happened, every anchored action still replays
    scheduler = InMemoryScheduler(keys)
    scheduler.feed_all(publisher)
    assert scheduler.refusals() == []
    replayed = replay_run("run-reach", source=scheduler.source, cas=store, trusted=scheduler.trusted(), session_id=name)
    assert replayed.ok, replayed.divergence
    return Ran(outcome, publisher, store, launched[0])


def assert_refused(ran: Ran, *, actions: int) -> None:
    outcome = ran.outcome
    assert outcome.terminal_state is ComputerUseTerminalState.REFUSED, outcome.error
    assert (outcome.activity_terminal_state, outcome.reason_code, outcome.action_count) == (
        TerminalState.REFUSED,
        "navigation_refused",
        actions,
    )


def test_file_url_is_refused_at_its_step_and_never_read(sites: Sites, tmp_path: Path, keys: ProducerKeys) -> None:
    home = f"{sites.site.url}/index.html"
    # A file whose bytes can be found nowhere else: a short one (this machine's /etc/hostname is "vm") turns
    # up by chance in a screenshot's compressed pixels.
    secret = f"file-secret-{os.urandom(16).hex()}".encode()
    target = tmp_path / "secret.txt"
    target.write_bytes(secret)
    url = target.as_uri()
    ran = run_session(sites, tmp_path, keys, [ProposedAction("navigate", home), ProposedAction("navigate", url)], "b-file")
    assert_refused(ran, actions=1)  # action 0 anchored; action 1 refused before it was anchored
    assert ran.refusal == {
        "code": "NAVIGATION_REFUSED",
        "policy": "SCHEME_NOT_ALLOWED",
        "via": "action",
        "url": url,
        "at_action": 1,
    }
    stored = [path.read_bytes() for path in (tmp_path / "cas").rglob("*") if path.is_file()]
    assert stored and not any(secret in blob for blob in stored)
    assert ran.driver.page.url == home


@pytest.mark.parametrize(
    "target",
    ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1:8080/admin", "http://[::1]:9/"],
)
def test_a_literal_private_address_is_refused_at_its_step(sites: Sites, tmp_path: Path, keys: ProducerKeys, target: str) -> None:
    ran = run_session(
        sites,
        tmp_path,
        keys,
        [ProposedAction("navigate", f"{sites.site.url}/index.html"), ProposedAction("navigate", target)],
        "b-private",
    )
    assert_refused(ran, actions=1)
    assert ran.refusal == {
        "code": "NAVIGATION_REFUSED",
        "policy": "PRIVATE_ADDRESS",
        "via": "action",
        "url": target,
        "at_action": 1,
    }


def test_another_origin_on_the_same_host_is_not_allowed(sites: Sites, tmp_path: Path, keys: ProducerKeys) -> None:
    other_port = sites.site.url.rsplit(":", 1)[0] + ":9"
    ran = run_session(sites, tmp_path, keys, [ProposedAction("navigate", f"{other_port}/")], "b-port")
    assert_refused(ran, actions=0)
    assert ran.refusal is not None and (ran.refusal["policy"], ran.refusal["at_action"]) == ("PRIVATE_ADDRESS", 0)


@pytest.mark.parametrize(("path", "hops"), [("/to-elsewhere", 1), ("/hop", 2)])
def test_a_redirect_to_a_disallowed_address_is_refused_before_any_connection(
    sites: Sites, tmp_path: Path, keys: ProducerKeys, path: str, hops: int
) -> None:
    ran = run_session(sites, tmp_path, keys, [ProposedAction("navigate", f"{sites.site.url}{path}")], "b-redirect")
    assert_refused(ran, actions=1)  # the navigate was anchored; what it led to was refused
    assert ran.refusal == {
        "code": "NAVIGATION_REFUSED",
        "policy": "PRIVATE_ADDRESS",
        "via": "redirect",
        "url": f"{sites.elsewhere.url}/secret",
        "at_action": 0,
    }
    assert sites.elsewhere.hits == []  # never connected
    assert len(sites.site.hits) == hops
    assert [b.url for b in ran.blocked()] == [f"{sites.elsewhere.url}/secret"]


def test_a_redirect_to_the_metadata_address_is_refused(sites: Sites, tmp_path: Path, keys: ProducerKeys) -> None:
    ran = run_session(sites, tmp_path, keys, [ProposedAction("navigate", f"{sites.site.url}/to-metadata")], "b-meta")
    assert_refused(ran, actions=1)
    assert ran.refusal is not None
    assert (ran.refusal["policy"], ran.refusal["via"], ran.refusal["url"]) == (
        "PRIVATE_ADDRESS",
        "redirect",
        "http://169.254.169.254/latest/meta-data/",
    )


def test_subresources_from_a_disallowed_origin_are_blocked(sites: Sites, tmp_path: Path, keys: ProducerKeys) -> None:
    page = f"{sites.site.url}/with-subresources"
    ran = run_session(sites, tmp_path, keys, [ProposedAction("navigate", page)], "b-sub")
    assert ran.outcome.ok, ran.outcome.error  # a blocked image does not end the session
    assert sites.elsewhere.hits == []
    socket = sites.elsewhere.url.replace("http:", "ws:") + "/socket"
    assert sorted((b.url, b.policy, b.navigation) for b in ran.blocked()) == [
        (f"{sites.elsewhere.url}/api", "PRIVATE_ADDRESS", False),
        (f"{sites.elsewhere.url}/pixel.png", "PRIVATE_ADDRESS", False),
        (f"{sites.elsewhere.url}/tracker.js", "PRIVATE_ADDRESS", False),
        (socket, "PRIVATE_ADDRESS", False),
    ]


def test_a_page_script_navigating_elsewhere_is_refused(sites: Sites, tmp_path: Path, keys: ProducerKeys) -> None:
    ran = run_session(
        sites,
        tmp_path,
        keys,
        [ProposedAction("navigate", f"{sites.site.url}/script-navigates"), ProposedAction("wait", value="300")],
        "b-script",
    )
    assert ran.outcome.terminal_state is ComputerUseTerminalState.REFUSED, ran.outcome.error
    assert ran.refusal is not None
    # the inline script navigates while the page loads, so the navigate action is (almost always) the one that
    # led there; on a loaded machine the blocked request may only be seen after the next action (the wait)
    at_action = ran.refusal["at_action"]
    assert at_action in (0, 1)
    assert ran.refusal == {
        "code": "NAVIGATION_REFUSED",
        "policy": "PRIVATE_ADDRESS",
        "via": "page",
        "url": f"{sites.elsewhere.url}/js",
        "at_action": at_action,
    }
    assert ran.outcome.action_count == at_action + 1
    assert [(b.navigation, b.redirect) for b in ran.blocked()] == [(True, False)]
    assert sites.elsewhere.hits == []
