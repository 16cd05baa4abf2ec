"""The origin policy (producers.netpolicy) and where the browser session enforces it, without a browser or network.

Name resolution is injected everywhere: nothing here opens a socket or asks DNS.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bernstein.producers.computer_use import (
    ComputerUseSession,
    ComputerUseTerminalState,
    Frame,
    NavigationRefused,
    ProposedAction,
    ScriptedAgent,
    parse_session_document,
)
from bernstein.producers.computer_use.playwright_driver import host_resolver_rules, sandbox_args
from bernstein.producers.netpolicy import Origin, OriginPolicy, TargetCode, TargetRefused, parse_origin
from bernstein.schemas.records import TerminalState
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import ProducerKeys, init_producer_keys
from tests.support.browser_fakes import FakeDriver, FakeDriverFactory, InMemoryScheduler, RecordingPublisher

SITE = "https://quill.example"
LOCAL = "http://127.0.0.1:8000"


def resolver(host: str, port: int) -> list[str]:
    answers = {"quill.example": ["93.184.216.34"], "rebound.example": ["93.184.216.35", "10.0.0.8"]}
    if host not in answers:
        raise OSError(f"no such host {host}")
    return answers[host]


def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"resolved {host}:{port}")


@pytest.fixture
def policy() -> OriginPolicy:
    return OriginPolicy.from_urls(f"{SITE}/start", allow=[LOCAL], resolve=resolver)


def test_origins_are_normalised() -> None:
    assert parse_origin("HTTPS://Quill.Example/a?b#c") == Origin("https", "quill.example", 443)
    assert parse_origin("http://[0:0::1]:8080/") == Origin("http", "::1", 8080)
    assert str(parse_origin("http://[::1]:8080/")) == "http://[::1]:8080"
    assert str(parse_origin("http://127.0.0.1/")) == "http://127.0.0.1:80"
    assert parse_origin("https://Bücher.example/") == Origin("https", "xn--bcher-kva.example", 443)  # as Chromium sends it
    with pytest.raises(TargetRefused) as info:
        parse_origin("https://bü..example/")
    assert info.value.code == TargetCode.INVALID_URL


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("file:///etc/hostname", TargetCode.SCHEME_NOT_ALLOWED),
        ("data:text/html,<h1>x</h1>", TargetCode.SCHEME_NOT_ALLOWED),
        ("chrome://settings", TargetCode.SCHEME_NOT_ALLOWED),
        ("javascript:alert(1)", TargetCode.SCHEME_NOT_ALLOWED),
        ("about:blank", TargetCode.SCHEME_NOT_ALLOWED),
        ("view-source:https://quill.example/", TargetCode.SCHEME_NOT_ALLOWED),
        ("http://10.1.2.3/", TargetCode.PRIVATE_ADDRESS),
        ("http://169.254.169.254/latest/meta-data/", TargetCode.PRIVATE_ADDRESS),
        ("http://192.168.0.1:8000/", TargetCode.PRIVATE_ADDRESS),
        ("http://127.0.0.1:8001/", TargetCode.PRIVATE_ADDRESS),  # the allowed port only
        ("http://[::ffff:127.0.0.1]:8000/", TargetCode.PRIVATE_ADDRESS),  # another spelling is another origin
        ("https://other.example/", TargetCode.ORIGIN_NOT_ALLOWED),
        ("http://quill.example/", TargetCode.ORIGIN_NOT_ALLOWED),  # scheme is part of the origin
        ("https://quill.example:8443/", TargetCode.ORIGIN_NOT_ALLOWED),
        ("https://quill.example@10.0.0.1/", TargetCode.INVALID_URL),
        ("https://quill.example\\@10.0.0.1/", TargetCode.INVALID_URL),
        ("https://quill.exa\tmple/", TargetCode.INVALID_URL),
        ("https:///nohost", TargetCode.INVALID_URL),
    ],
)
def test_refused_urls_have_their_code_and_need_no_dns(url: str, code: str) -> None:
    policy = OriginPolicy.from_urls(f"{SITE}/start", allow=[LOCAL], resolve=no_dns)
    with pytest.raises(TargetRefused) as info:
        policy.check(url)
    assert info.value.code == code
    assert info.value.url == url


def test_allowed_origins_pass(policy: OriginPolicy) -> None:
    assert policy.check("https://quill.example/deep/page?x=1") == Origin("https", "quill.example", 443)
    assert policy.check("http://127.0.0.1:8000/signup.html") == Origin("http", "127.0.0.1", 8000)
    assert policy.describe() == "http://127.0.0.1:8000, https://quill.example:443"


def test_an_allowed_name_that_resolves_privately_is_refused() -> None:
    policy = OriginPolicy.from_urls("https://rebound.example/", resolve=resolver)
    with pytest.raises(TargetRefused) as info:
        policy.check("https://rebound.example/x")
    assert (info.value.code, info.value.address) == (TargetCode.PRIVATE_ADDRESS, "10.0.0.8")
    with pytest.raises(TargetRefused) as info:
        policy.vet()
    assert info.value.code == TargetCode.PRIVATE_ADDRESS


def test_a_url_base_on_loopback_is_not_allowed_unless_named_explicitly() -> None:
    implicit = OriginPolicy.from_urls(LOCAL, resolve=no_dns)
    with pytest.raises(TargetRefused) as info:
        implicit.check(f"{LOCAL}/signup.html")
    assert info.value.code == TargetCode.PRIVATE_ADDRESS
    assert OriginPolicy.from_urls(LOCAL, allow=[LOCAL], resolve=no_dns).check(f"{LOCAL}/x").port == 8000
    assert OriginPolicy(resolve=no_dns).describe() == "none"
    with pytest.raises(TargetRefused) as refused:
        OriginPolicy(resolve=no_dns).check("https://quill.example/")
    assert refused.value.code == TargetCode.ORIGIN_NOT_ALLOWED


def test_vetting_pins_every_allowed_origin_and_the_resolver_rules_refuse_the_rest(policy: OriginPolicy) -> None:
    pins = policy.vet()
    assert pins == {Origin("http", "127.0.0.1", 8000): ["127.0.0.1"], Origin("https", "quill.example", 443): ["93.184.216.34"]}
    assert host_resolver_rules(pins) == (
        "MAP 127.0.0.1:8000 127.0.0.1:8000, MAP quill.example:443 93.184.216.34:443, MAP * ~NOTFOUND"
    )
    v6 = OriginPolicy.from_urls("http://[::1]:9/", allow=["http://[::1]:9/"], resolve=no_dns)
    assert host_resolver_rules(v6.vet()) == "MAP [::1]:9 [::1]:9, MAP * ~NOTFOUND"
    assert host_resolver_rules({}) == "MAP * ~NOTFOUND"


def test_the_sandbox_is_turned_off_only_by_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    # as root too: Chromium then runs as an unprivileged user and keeps its sandbox (tests/unit/test_browser_sandbox.py)
    monkeypatch.delenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", raising=False)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert sandbox_args() == []
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert sandbox_args() == []
    monkeypatch.setenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", "1")
    assert sandbox_args() == ["--no-sandbox"]
    monkeypatch.setenv("BERNSTEIN_CHROMIUM_NO_SANDBOX", "0")
    assert sandbox_args() == []


# -- the session's boundary ---------------------------------------------------------


@pytest.fixture
def keys(tmp_path: Path) -> ProducerKeys:
    return init_producer_keys(tmp_path / "producer-keys", "navigator@test")


def frames(n: int) -> list[Frame]:
    return [Frame(b"\x89PNG" + f"frame-{i}".encode() * 30, f'- heading "Step {i}"\n') for i in range(n)]


def session(tmp_path: Path, keys: ProducerKeys, publisher: RecordingPublisher, policy: OriginPolicy | None) -> ComputerUseSession:
    return ComputerUseSession(
        "run-nav",
        "browser-0",
        keys=keys,
        store=DirBlobStore(tmp_path / "cas"),
        publisher=publisher,
        worker_id="navigator@test",
        worktree=tmp_path / "w",
        navigation=policy,
    )


def test_a_refused_navigate_is_not_anchored_and_ends_the_session_refused(
    tmp_path: Path, keys: ProducerKeys, policy: OriginPolicy
) -> None:
    publisher = RecordingPublisher(keys)
    driver = FakeDriver(frames(4))
    actions = [
        ProposedAction("navigate", "https://quill.example/signup"),
        ProposedAction("click", "#go"),
        ProposedAction("navigate", "file:///home/u/.local/state/bernstein/keys/audit.hmac.key"),
        ProposedAction("click", "#never"),
    ]
    outcome = session(tmp_path, keys, publisher, policy).run(ScriptedAgent(actions), FakeDriverFactory(driver))
    assert (outcome.terminal_state, outcome.activity_terminal_state, outcome.reason_code) == (
        ComputerUseTerminalState.REFUSED,
        TerminalState.REFUSED,
        "navigation_refused",
    )
    assert outcome.action_count == 2 and [a.kind for a in driver.performed] == ["navigate", "click"]
    assert isinstance(outcome.error, NavigationRefused)
    assert parse_session_document(outcome.result.artifact).refusal == {
        "code": "NAVIGATION_REFUSED",
        "policy": "SCHEME_NOT_ALLOWED",
        "via": "action",
        "url": "file:///home/u/.local/state/bernstein/keys/audit.hmac.key",
        "at_action": 2,
    }
    scheduler = InMemoryScheduler(keys)
    scheduler.feed_all(publisher)
    assert scheduler.refusals() == []  # the refused session is journalled like any other


def test_a_refusal_from_the_driver_names_the_action_that_led_there(
    tmp_path: Path, keys: ProducerKeys, policy: OriginPolicy
) -> None:
    redirect = NavigationRefused("redirected", policy=TargetCode.PRIVATE_ADDRESS, url="http://10.0.0.1/", via="redirect")
    driver = FakeDriver(frames(3), faults={1: redirect})
    actions = [ProposedAction("navigate", "https://quill.example/"), ProposedAction("submit", "#go")]
    outcome = session(tmp_path, keys, RecordingPublisher(keys), policy).run(ScriptedAgent(actions), FakeDriverFactory(driver))
    assert (outcome.terminal_state, outcome.reason_code, outcome.action_count) == (
        ComputerUseTerminalState.REFUSED,
        "navigation_refused",
        2,
    )
    assert parse_session_document(outcome.result.artifact).refusal == {
        "code": "NAVIGATION_REFUSED",
        "policy": "PRIVATE_ADDRESS",
        "via": "redirect",
        "url": "http://10.0.0.1/",
        "at_action": 1,
    }


def test_the_session_uses_the_drivers_policy_when_given_none(tmp_path: Path, keys: ProducerKeys, policy: OriginPolicy) -> None:
    driver = FakeDriver(frames(2))
    driver.navigation_policy = policy  # type: ignore[attr-defined]
    outcome = session(tmp_path, keys, RecordingPublisher(keys), None).run(
        ScriptedAgent([ProposedAction("navigate", "http://169.254.169.254/")]), FakeDriverFactory(driver)
    )
    assert (outcome.reason_code, outcome.action_count, driver.performed) == ("navigation_refused", 0, [])
