"""The Playwright driver as an MCP agent needs it: snapshots with element refs, refs resolved to selectors.

``RefPlaywrightDriver`` wraps a ``PlaywrightDriver`` (the same launch, origin
policy, sandbox, masking, timeouts and error translation) and changes two
things:

* ``observe`` takes the accessibility snapshot in Playwright's ``ai`` mode,
  which marks every element with a ref (``[ref=e12]``). The session's
  normalisation drops those tokens before hashing, so the stored snapshot
  and its DOM digest are what any other driver would record; the agent is
  shown the same text with its refs.
* ``resolve(ref)`` turns a ref of the latest snapshot into the resilient
  selector Playwright's own code generator would write
  (``internal:role=textbox[name="Password"i]``). That selector, not the
  ref, is what the action anchors and what the driver performs, so the
  journal names the element in terms that mean something without the
  snapshot's transient numbering.

Playwright is imported only when a driver is launched (this module imports
without the ``browser`` extra; launching without it raises
``BrowserExtraMissing``, as ``browser run`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bernstein.producers.computer_use.boundary import Frame, ProposedAction
from bernstein.producers.computer_use.terminal import ComputerUseDriverError, DriverFault
from bernstein.producers.mcp.errors import ToolCode, ToolError

if TYPE_CHECKING:
    from bernstein.producers.computer_use.playwright_driver import PlaywrightDriver


class RefPlaywrightDriver:
    """A ``BrowserDriver`` whose snapshots carry refs and which resolves them (see the module docstring)."""

    def __init__(self, inner: PlaywrightDriver) -> None:
        self.inner = inner
        self.navigation_policy = inner.navigation_policy
        """The session's origin policy (the session's boundary reads it, as from ``PlaywrightDriver``)."""

    @property
    def page(self) -> Any:
        return self.inner.page

    def observe(self) -> Frame:
        # PlaywrightDriver.observe, with the snapshot in ai mode (refs); its masking and error translation kept
        from bernstein.producers.computer_use.playwright_driver import _translated

        page = self.inner.page
        with _translated(DriverFault.OBSERVE_FAILED):
            page.wait_for_load_state("load")
            mask = [page.locator(target) for target in self.inner._typed_targets]
            screenshot = page.screenshot(type="png", animations="disabled", caret="hide", mask=mask, mask_color="#444444")
            snapshot = page.aria_snapshot(mode="ai")
            return Frame(screenshot=screenshot, aria_snapshot=snapshot, url=page.url)

    def perform(self, action: ProposedAction) -> None:
        self.inner.perform(action)

    def limit_time(self, seconds: float) -> None:
        self.inner.limit_time(seconds)

    def close(self) -> None:
        self.inner.close()

    def resolve(self, ref: str) -> str:
        """The selector of the element ``ref`` names in the latest snapshot (raises ``ToolError`` UNKNOWN_REF)."""
        from bernstein.producers.computer_use.playwright_driver import _translated

        try:
            with _translated(DriverFault.ACTION_FAILED):
                return str(self.inner.page.get_by_ref(ref).normalize()._impl_obj._selector)
        except ComputerUseDriverError as exc:
            raise ToolError(
                ToolCode.UNKNOWN_REF,
                f"ref {ref!r} names no element of the latest snapshot ({exc.message}); take a new browser_snapshot",
                evidence={"ref": ref},
            ) from None

    def element_at(self, x: int, y: int) -> str:
        return self.inner.element_at(x, y)

    def focused_element(self) -> str:
        return self.inner.focused_element()

    def title(self) -> str:
        from bernstein.producers.computer_use.playwright_driver import _translated

        try:
            with _translated(DriverFault.OBSERVE_FAILED):
                return str(self.inner.page.title())
        except ComputerUseDriverError:
            return ""


def ref_driver_factory(**options: Any) -> Callable[[Path], RefPlaywrightDriver]:
    """A driver factory launching ``PlaywrightDriver`` with ``options`` (``policy`` ...) behind ``RefPlaywrightDriver``."""

    def start(profile_dir: Path) -> RefPlaywrightDriver:
        from bernstein.producers.computer_use.playwright_driver import PlaywrightDriver  # BrowserExtraMissing without it

        return RefPlaywrightDriver(PlaywrightDriver.launch(profile_dir, **options))

    return start


def require_playwright() -> None:
    """Raise ``BrowserExtraMissing`` now (not at the first browser call) when Playwright is not installed."""
    from bernstein.producers.computer_use import playwright_driver  # noqa: F401 - imported for its check
