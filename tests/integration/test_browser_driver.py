"""The Playwright driver on Debian's Chromium: typed fields never reach a screenshot as pixels."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from bernstein.producers.computer_use import ProposedAction
from bernstein.producers.computer_use.playwright_driver import PlaywrightDriver
from bernstein.producers.netpolicy import OriginPolicy
from bernstein.schemas.canonical import sha256_digest
from demo.site_server import serve
from tests.support.browser_site import SITE, chromium_processes

pytestmark = pytest.mark.browser


def test_typed_fields_are_masked_in_later_screenshots(tmp_path: Path) -> None:
    hashes = []
    snapshots = []
    with serve(SITE) as (url, _stop), sync_playwright() as playwright:
        for attempt, (name, password) in enumerate(
            (("Alice Example", "pw-first-0001"), ("Bob Q. Different-Name", "pw-second-002"))
        ):
            policy = OriginPolicy.from_urls(url, allow=[url])
            driver = PlaywrightDriver.launch(tmp_path / f"profile-{attempt}", policy=policy, playwright=playwright)
            try:
                driver.perform(ProposedAction("navigate", f"{url}/signup.html"))
                driver.perform(ProposedAction("type", "#name", name))
                driver.perform(ProposedAction("type", "#password", password))
                frame = driver.observe()
            finally:
                driver.close()
            hashes.append(sha256_digest(frame.screenshot))
            snapshots.append(frame.aria_snapshot)
    # different values typed, the same pixels: the fields are painted over
    assert hashes[0] == hashes[1]
    # the raw snapshot does carry the values (the boundary redacts them before hashing or storing)
    assert 'textbox "Full name": Alice Example' in snapshots[0]
    assert chromium_processes(str(tmp_path)) == []
