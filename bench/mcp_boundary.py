"""What the journalled boundary costs per MCP tool call, against the same Playwright action without it.

    python -m bench.mcp_boundary [--calls 40] [--rounds 3]

Needs Debian's Chromium and the ``browser`` and ``mcp`` extras (the dev environment has both); no
Kafka or S3: the content store is a directory and the encoded actions are kept in memory, so the
figure is the boundary's own work. One headless Chromium on the demo site's signup page (served
on loopback) and one tool, ``browser_click`` on the terms checkbox (each click toggles it), two
ways, interleaved round by round on the same page:

- playwright: the click and then the AI snapshot Playwright MCP returns after an action
  (``driver.perform`` + ``page.aria_snapshot(mode="ai")``);
- boundary: ``McpRun.call("browser_click", {"target": <ref>})``, the whole tool call: the ref
  resolved to a selector, the pre-action observation charged to the byte cap, stored and hashed,
  the action anchored, its lineage entry HMAC-enveloped and Ed25519-signed, the
  ``ComputerUseAction`` encoded and handed to the publisher, then the click, then the page observed
  again (screenshot and snapshot, normalised and redacted) for the reply and the next anchor.

The same click as a model's computer-use call, two more ways, in the same rounds:

- playwright: ``page.mouse.click(x, y)`` at the checkbox's centre and the screenshot a computer-use
  loop returns after an action;
- boundary: ``ComputerTool.anthropic({"action": "left_click", "coordinate": [x, y]})``: the same
  tool call plus the point resolved to the element under it before anchoring.

Prints milliseconds per call of each, per round, the computer-use line
``computer_boundary_ms=<median> computer_playwright_ms=<median> computer_ratio=<ratio>``, and the last line
``boundary_ms=<median> playwright_ms=<median> ratio=<boundary / playwright>``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

from bernstein.producers.activity import ActivityResult
from bernstein.producers.computer_use.boundary import ProposedAction
from bernstein.producers.computer_use.session import MAX_ACTIONS_LIMIT, ComputerUseSession
from bernstein.producers.mcp.browser import SteppedBrowser
from bernstein.producers.mcp.computer import ComputerTool
from bernstein.producers.mcp.driver import ref_driver_factory
from bernstein.producers.mcp.run import McpRun
from bernstein.producers.netpolicy import OriginPolicy
from bernstein.substrate.cas import DirBlobStore
from bernstein.substrate.keys import init_producer_keys
from demo.site_server import serve

SITE = Path(__file__).resolve().parents[1] / "demo" / "site"


class MemoryPublisher:
    """Keeps the encoded actions (the emitter's produce is Kafka's cost, not the boundary's)."""

    def __init__(self, producer_id: str) -> None:
        self.producer_id = producer_id
        self.values: list[bytes] = []

    def publish_action(self, run_id: str, submission_id: str, value: bytes) -> str:
        self.values.append(value)
        return f"memory@{len(self.values) - 1}"

    def publish_result(self, run_id: str, stage_id: str, role: str, result: ActivityResult) -> str:
        return "memory@result"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40, help="tool calls per round and way")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if 2 * args.calls * args.rounds + 2 > MAX_ACTIONS_LIMIT:
        raise SystemExit(f"bench.mcp_boundary: at most {MAX_ACTIONS_LIMIT} actions per session")
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp, serve(SITE) as (url, _stop):
        work = Path(tmp)
        keys = init_producer_keys(work / "keys", "bench@local")
        policy = OriginPolicy.from_urls("", [url])
        driver = ref_driver_factory(policy=policy)(work / "profile")
        try:
            session = ComputerUseSession(
                "bench-run",
                "browser-0",
                keys=keys,
                store=DirBlobStore(work / "cas"),
                publisher=MemoryPublisher(keys.name),
                worktree=work / "w",
                max_actions=MAX_ACTIONS_LIMIT,
                navigation=policy,
            )
            run = McpRun(browser=SteppedBrowser(session, lambda _profile: driver), research=None)
            reply = run.call("browser_navigate", {"url": f"{url}/signup.html"})
            found = re.search(r'checkbox "I accept the community guidelines" \[ref=(e\d+)\]', reply.text)
            if reply.is_error or found is None:
                raise SystemExit(f"bench.mcp_boundary: the signup page did not load: {reply.text[:400]}")
            target = found.group(1)
            click = ProposedAction("click", driver.resolve(target))
            box = driver.page.locator(driver.resolve(target)).bounding_box()
            if box is None:
                raise SystemExit("bench.mcp_boundary: the checkbox has no box on the page")
            x, y = round(box["x"] + box["width"] / 2), round(box["y"] + box["height"] / 2)
            computer = ComputerTool(run.browser)  # type: ignore[arg-type]
            plain_ms: list[float] = []
            boundary_ms: list[float] = []
            pointer_plain_ms: list[float] = []
            pointer_boundary_ms: list[float] = []
            for round_ in range(args.rounds):
                start = time.perf_counter()
                for _ in range(args.calls):
                    driver.perform(click)
                    driver.page.aria_snapshot(mode="ai")
                plain = (time.perf_counter() - start) * 1000 / args.calls
                start = time.perf_counter()
                for _ in range(args.calls):
                    answered = run.call("browser_click", {"target": target})
                    if answered.is_error:
                        raise SystemExit(f"bench.mcp_boundary: {answered.text}")
                boundary = (time.perf_counter() - start) * 1000 / args.calls
                start = time.perf_counter()
                for _ in range(args.calls):
                    driver.page.mouse.click(x, y)
                    driver.page.screenshot(type="png", animations="disabled", caret="hide")
                pointer_plain = (time.perf_counter() - start) * 1000 / args.calls
                start = time.perf_counter()
                for _ in range(args.calls):
                    done = computer.anthropic({"action": "left_click", "coordinate": [x, y]})
                    if done.error is not None or "checkbox" not in done.records[0].action.target:
                        raise SystemExit(f"bench.mcp_boundary: {done.text}")
                pointer_boundary = (time.perf_counter() - start) * 1000 / args.calls
                plain_ms.append(plain)
                boundary_ms.append(boundary)
                pointer_plain_ms.append(pointer_plain)
                pointer_boundary_ms.append(pointer_boundary)
                print(
                    f"round {round_ + 1}: playwright {plain:.1f} ms/action, boundary {boundary:.1f} ms/call; computer use: "
                    f"playwright {pointer_plain:.1f} ms/action, boundary {pointer_boundary:.1f} ms/call"
                )
            run.call("finish", {"state": "completed"})
        finally:
            driver.close()
    pointer_boundary_median, pointer_plain_median = statistics.median(pointer_boundary_ms), statistics.median(pointer_plain_ms)
    print(
        f"computer_boundary_ms={pointer_boundary_median:.1f} computer_playwright_ms={pointer_plain_median:.1f} "
        f"computer_ratio={pointer_boundary_median / pointer_plain_median:.2f}"
    )
    boundary_median, plain_median = statistics.median(boundary_ms), statistics.median(plain_ms)
    print(f"boundary_ms={boundary_median:.1f} playwright_ms={plain_median:.1f} ratio={boundary_median / plain_median:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
