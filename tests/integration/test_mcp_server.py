"""``bernstein mcp serve`` driven by the official MCP SDK's client, over stdio and over streamable HTTP.

Real parts only: the server is the ``bernstein`` command in a subprocess, Chromium headless, the demo
site on loopback, Kafka and S3; the scheduler journals, the run is exported and verified offline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import re
import secrets
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from bernstein.consumers.core.step import SchedulerCore
from bernstein.consumers.shell import SchedulerShell
from bernstein.producers.emitter import Emitter
from bernstein.schemas import codec
from bernstein.schemas.canonical import typed_value_digest
from bernstein.substrate.cas import S3BlobStore
from bernstein.substrate.config import Topics
from bernstein.substrate.keys import InstallKeys, ProducerKeys
from bernstein.verifier.kafka_source import KafkaSource
from demo.site_server import serve
from tests.conftest import Services, as_component
from tests.support.browser_site import SITE, all_topic_records, chromium_processes, refusals, scheduler_config
from tests.support.producer_setup import identity

pytestmark = pytest.mark.browser


def bernstein(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bernstein", *args], env=as_component(args, env), capture_output=True, text=True, timeout=180
    )


def journal(bootstrap: str, topics: Topics, keys: InstallKeys, producers: list[ProducerKeys], *, expect: int) -> None:
    """The real transactional scheduler, in-process, with the browser and research roles, until ``expect`` records."""
    config = dataclasses.replace(scheduler_config(keys, producers), roles={"navigator": "browser", "scout": "research"})
    log = io.StringIO()
    shell = SchedulerShell(bootstrap=bootstrap, topics=topics, partition=0, core=SchedulerCore(config), progress=log)
    counters = shell.run(until=lambda c: c.consumed >= expect, idle_exit=60.0)
    assert counters.consumed == expect, f"scheduler consumed {counters.consumed} of {expect}:\n{log.getvalue()}"


def ref(text: str, role: str, name: str) -> str:
    """The ref of the element ``role "name"`` in a reply's snapshot."""
    found = re.search(rf'- {role} "{re.escape(name)}"[^\n]*?\[ref=(e\d+)\]', text)
    assert found, f"no {role} {name!r} in:\n{text}"
    return found.group(1)


async def call(client: ClientSession, tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """Call a tool that must succeed; its text and structured content."""
    result = await client.call_tool(tool, arguments)
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, f"{tool} failed: {text}"
    return text, result.structured_content or {}


async def refused(client: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must return a tool error; its structured content (code, evidence)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have been refused: {result.content}"
    return dict(result.structured_content or {})


async def sign_up(client: ClientSession, url: str, password: str) -> list[dict[str, Any]]:
    """navigate, snapshot, type name / email / password, tick the box, click: the demo's signup through MCP tools."""
    names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"browser_navigate", "browser_snapshot", "browser_click", "browser_type", "finish", "fetch", "submit_report"} <= names
    actions: list[dict[str, Any]] = []
    _, done = await call(client, "browser_navigate", url=f"{url}/signup.html")
    actions += done["actions"]
    page, _ = await call(client, "browser_snapshot")
    assert "Page URL: " + f"{url}/signup.html" in page
    for name, text in (("Full name", "Ada Lovelace"), ("Email", "ada@example.org"), ("Password", password)):
        _, done = await call(client, "browser_type", element=name, target=ref(page, "textbox", name), text=text)
        actions += done["actions"]
    _, done = await call(client, "browser_click", target=ref(page, "checkbox", "I accept the community guidelines"))
    actions += done["actions"]
    after, done = await call(client, "browser_click", element="Create account", ref=ref(page, "button", "Create account"))
    actions += done["actions"]
    assert "welcome.html" in after and password not in after
    return actions


def test_an_mcp_client_over_stdio_signs_up_and_writes_a_cited_report(
    services: Services,
    prefix: str,
    install_keys: InstallKeys,
    producer_keys: ProducerKeys,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    password = "pw-" + secrets.token_hex(16)
    run_id = f"mcp-{uuid.uuid4().hex[:8]}"
    env = as_component(("browser", "run"), cli_env)  # the producer's principal; the prefix's topics exist
    report: dict[str, Any] = {}

    async def agent(url: str) -> list[dict[str, Any]]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "bernstein", "mcp", "serve", "--run", run_id, "--allow-origin", url, "--allow-private"]
            + ["--worktree", str(tmp_path / "w"), "--max-fetches", "2"],
            env=env,
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            actions = await sign_up(client, url, password)
            # research: an uncited claim is refused with its code, repaired, then accepted
            text, page = await call(client, "fetch", url=f"{url}/notes.html")
            quote = page["text"][:60].rsplit(" ", 1)[0]
            assert page["page_content_hash"] in text and quote
            claims: list[dict[str, Any]] = [
                {"statement": "The notes open this way.", "citations": [{"source": f"{url}/notes.html", "quote": quote}]},
                {"statement": "An unsupported claim."},
            ]
            refusal = await refused(client, "submit_report", query="what do the notes say", claims=claims)
            assert refusal["error"] == "UNCITED_CLAIM" and refusal["journalled"] is False
            assert refusal["evidence"]["claim_id"] == "c2"
            claims[1]["citations"] = [{"source": f"{url}/notes.html", "quote": quote}]
            _, accepted = await call(client, "submit_report", query="what do the notes say", claims=claims)
            assert accepted["terminal_state"] == "completed" and accepted["claims"] == 2
            _, finished = await call(client, "finish", state="completed")
            report.update(finished)
            return actions

    with serve(SITE) as (url, _stop):
        actions = asyncio.run(agent(url))
    assert [a["action"]["kind"] for a in actions] == ["navigate", "type", "type", "type", "click", "click"]
    assert report["browser"]["terminal_state"] == "completed" and report["browser"]["actions"] == 6
    assert report["research"]["terminal_state"] == "completed"
    assert chromium_processes(str(tmp_path)) == []

    topics = Topics(prefix)
    with Emitter(
        bootstrap=services.bootstrap, store=S3BlobStore(services.s3), topics=topics, producer=identity("closer")
    ) as emitter:
        emitter.close_run(run_id)
    journal(services.bootstrap, topics, install_keys, [producer_keys], expect=6 + 2 + 1)
    assert refusals(services.bootstrap, topics) == []

    trust, dump = tmp_path / "trusted-keys.json", tmp_path / "dump"
    assert bernstein("keys", "trust", "--out", str(trust), env=cli_env).returncode == 0
    exported = bernstein("topic", "export", "--run", run_id, "--out", str(dump), env=cli_env)
    assert exported.returncode == 0, exported.stderr
    verified = bernstein("activity", "verify", run_id, "--from", str(dump), "--trusted-keys", str(trust), env=cli_env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "OK browser-0 [browser]" in verified.stdout and "6 steps replayed" in verified.stdout
    assert "OK research-0 [research]" in verified.stdout and "2 citations resolved" in verified.stdout

    # the password: nowhere in the topics, the dump or the CAS; its keyed digest is what the type action holds
    digest = typed_value_digest(producer_keys.redaction.secret, password)
    assert actions[3]["action"]["value_digest"] == digest
    needle = password.encode()
    assert all(needle not in (record.value or b"") for record in all_topic_records(services.bootstrap, topics))
    dumped = [path.read_bytes() for path in dump.rglob("*") if path.is_file()]
    assert all(needle not in data for data in dumped) and any(digest.encode() in data for data in dumped)
    assert all(needle not in path.read_bytes() for path in (tmp_path / "w").rglob("*") if path.is_file())

    # one screenshot's byte flipped in the dump's CAS: replay names the first action anchored to it
    shot = actions[3]["screenshot_hash"]
    first = next(a["index"] for a in actions if a["screenshot_hash"] == shot)
    blob = dump / "cas" / "sha256" / shot[7:9] / shot[7:]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    replayed = bernstein("browser", "replay", run_id, "--from", str(dump), "--trusted-keys", str(trust), env=cli_env)
    assert replayed.returncode == 2, replayed.stdout + replayed.stderr
    assert f"DIVERGED at action {first} (screenshot_changed)" in replayed.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_over_http_the_computer_tool_journals_a_point_and_a_refused_origin_is_a_journalled_tool_error(
    services: Services,
    prefix: str,
    install_keys: InstallKeys,
    producer_keys: ProducerKeys,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    run_id = f"mcp-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = as_component(("browser", "run"), cli_env)
    with serve(SITE) as (url, _stop):
        command = [sys.executable, "-m", "bernstein", "mcp", "serve", "--transport", "http", "--port", str(port)]
        command += ["--run", run_id, "--allow-origin", url, "--worktree", str(tmp_path / "w"), "--no-research"]
        server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        try:
            assert server.stderr is not None
            deadline = time.monotonic() + 30
            while "/mcp" not in (line := server.stderr.readline()):
                assert line and time.monotonic() < deadline, "the server did not start"

            async def agent() -> dict[str, Any]:
                async with (
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write),
                    ClientSession(read, write) as client,
                ):
                    await client.initialize()
                    _, done = await call(client, "browser_navigate", url=f"{url}/index.html")
                    assert done["actions"][0]["index"] == 0
                    # the computer tool (a model's computer-use format): a screenshot, then a point journalled
                    shot = await client.call_tool("computer", {"action": "screenshot"})
                    assert not shot.is_error and [block.type for block in shot.content] == ["text", "image"]
                    _, moved = await call(client, "computer", action="mouse_move", coordinate=[20, 20])
                    (hover,) = moved["actions"]
                    assert hover["index"] == 1 and hover["action"]["kind"] == "hover"
                    assert json.loads(hover["action"]["target"])["at"] == [20, 20] and moved["cursor"] == [20, 20]
                    elsewhere = f"http://127.0.0.1:{free_port()}/"  # loopback, but not the allowed origin: a private address
                    error = await refused(client, "browser_navigate", url=elsewhere)
                    ended = await refused(client, "browser_snapshot")
                    assert ended["error"] == "SESSION_ENDED"
                    return error

            error = asyncio.run(agent())
            assert server.wait(timeout=30) == 0, server.stderr.read()
        finally:
            if server.poll() is None:
                server.kill()
    assert error["error"] == "NAVIGATION_REFUSED" and error["journalled"] is True
    assert error["evidence"]["policy"] == "PRIVATE_ADDRESS" and error["evidence"]["at_action"] == 2
    assert error["evidence"]["reason_code"] == "navigation_refused" and error["evidence"]["actions"] == 2

    topics = Topics(prefix)
    journal(services.bootstrap, topics, install_keys, [producer_keys], expect=2 + 1)
    assert refusals(services.bootstrap, topics) == []
    source = KafkaSource(services.bootstrap, topics)
    entries = [codec.decode(codec.decode(r.value or b"").record["payload"]).record for r in source.records("journal", 0)]
    results = [e for e in entries if e.get("stage_id") == "browser-0"]
    assert [(e["terminal_state"], e["reason_code"]) for e in results] == [("refused", "navigation_refused")]
    document = json.loads(S3BlobStore(services.s3).get(results[0]["artifact_hash"]))
    assert document["refusal"]["code"] == "NAVIGATION_REFUSED" and document["refusal"]["via"] == "action"
