"""Actions at screen coordinates on a Playwright page, and the element a point resolves to.

A model's computer-use tool says "double click at (412, 230)". Before that action is
anchored, ``element_at`` names what is under the point (the selector Playwright's code
generator would write for it), so the journal records the element and not only pixels
(``bernstein.schemas.documents.pointer``); ``perform_pointer`` then acts at the point with the
mouse, as the model asked, or types with the keyboard into the focused element.

The caller translates Playwright's errors (``playwright_driver._translated``).
"""

from __future__ import annotations

from typing import Any, Final

from bernstein.schemas.documents.pointer import PointerTarget

DRAG_STEPS: Final = 8
"""Intermediate mouse moves of a drag, so pages that track ``mousemove`` see the pointer travel."""

# The element under a point (or the focused one) as a CSS path of nth-of-type steps: unique in the document,
# it is what ``Locator.normalize`` turns into the resilient selector. No DOM is changed.
_PATH_OF: Final = """
(el) => {
  if (!el || el.nodeType !== 1) return null;
  const parts = [];
  for (let node = el; node && node.nodeType === 1 && node !== document.documentElement; node = node.parentElement) {
    const parent = node.parentElement;
    let part = CSS.escape(node.localName);
    if (parent) {
      const same = Array.from(parent.children).filter((child) => child.localName === node.localName);
      if (same.length > 1) part += `:nth-of-type(${same.indexOf(node) + 1})`;
    }
    parts.unshift(part);
  }
  return ["html", ...parts].join(" > ");
}
"""
_AT_POINT: Final = f"([x, y]) => ({_PATH_OF})(document.elementFromPoint(x, y))"
_FOCUSED: Final = f"() => ({_PATH_OF})(document.activeElement)"


def element_at(page: Any, x: int, y: int) -> str:
    """The selector of the element under viewport point (x, y), or "" when there is none."""
    return _resolved(page, page.evaluate(_AT_POINT, [x, y]))


def focused_element(page: Any) -> str:
    """The selector of the element that has the keyboard focus (the body when nothing else has)."""
    return _resolved(page, page.evaluate(_FOCUSED))


def _resolved(page: Any, css_path: str | None) -> str:
    """Playwright's resilient selector for the element at ``css_path`` (the path itself if it has none)."""
    if not css_path:
        return ""
    try:
        return str(page.locator(css_path).normalize()._impl_obj._selector)
    except Exception:  # noqa: BLE001 - a page changing under us: the exact path still names the element
        return css_path


def perform_pointer(page: Any, kind: str, target: PointerTarget, value: str | None) -> str | None:
    """Carry out ``kind`` at ``target``; return the selector typed into (to be masked in later screenshots), if any."""
    mouse = page.mouse
    if kind == "type":
        page.keyboard.type(value or "")
        return target.element or None
    if kind == "drag":
        if target.at is None or target.to is None:
            page.drag_and_drop(target.element, target.to_element or "")
            return None
        mouse.move(*target.at)
        mouse.down()
        mouse.move(*target.to, steps=DRAG_STEPS)
        mouse.up()
        return None
    if target.at is None:  # parse_pointer_target allows no other shape for the remaining kinds
        raise ValueError(f"a {kind} pointer target needs a point")
    x, y = target.at
    if kind == "click":
        mouse.click(x, y)
    elif kind == "double_click":
        mouse.dblclick(x, y)
    elif kind == "right_click":
        mouse.click(x, y, button="right")
    elif kind == "hover":
        mouse.move(x, y)
    elif kind == "scroll":
        mouse.move(x, y)
        mouse.wheel(*wheel_delta(value))
    else:
        raise ValueError(f"{kind} actions are not performed at a point")
    return None


def wheel_delta(value: str | None) -> tuple[int, int]:
    """A scroll action's value ``"dx,dy"`` in pixels (none: 400 down); ``ValueError`` for one that is not."""
    dx, _, dy = (value or "0,400").partition(",")
    return int(dx or 0), int(dy or 0)
