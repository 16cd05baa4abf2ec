"""The operations endpoint of a long-running process: ``/metrics``, ``/healthz`` and ``/readyz``.

One small HTTP server on a daemon thread (``http.server``, one thread per request), for
``bernstein scheduler run`` and any other long-running command (``bernstein audit follow``
can reuse it as it is)::

    registry = CollectorRegistry()
    registry.register(MyCollector(...))           # read at scrape time
    probe = Probe(stall_after=60.0)
    server = OpsServer(registry, probe, host="127.0.0.1", port=9464).start()   # port 0: any free port
    ...                                           # the loop calls probe.beat(); probe.set_ready(...)
    server.close()

``/metrics`` answers the registry in Prometheus' text format (or OpenMetrics when the
scraper asks for it). ``/healthz`` answers 200 while the process's loop beats (``beat()``
within ``stall_after`` seconds), else 503: restart it. ``/readyz`` answers 200 while the
process says it is ready (``set_ready(True)``), else 503 with the reason: do not route to it
or page on it yet. Both bodies are one line of text; anything else is 404.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from bernstein.schemas.errors import BernsteinError

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_STALL_S: Final = 60.0
"""``/healthz`` fails when the loop has not beaten for this long (longer than any call it may block in)."""


class OpsServerError(BernsteinError):
    """The operations endpoint could not listen (address in use, not permitted, unknown host)."""

    code = "E_OPS_SERVER"


class Probes(Protocol):
    """What ``/healthz`` and ``/readyz`` ask: (ok, one line saying why)."""

    def health(self) -> tuple[bool, str]: ...

    def readiness(self) -> tuple[bool, str]: ...


class Probe:
    """What ``/healthz`` and ``/readyz`` answer: the loop's heartbeat and its readiness (thread-safe)."""

    def __init__(self, *, stall_after: float = DEFAULT_STALL_S) -> None:
        self.stall_after = stall_after
        self._beat = time.monotonic()
        self._ready = False
        self._reason = "starting"

    def beat(self) -> None:
        """The loop is alive (call it once per iteration, and from long steps such as a rebuild)."""
        self._beat = time.monotonic()

    def set_ready(self, ready: bool, reason: str) -> None:
        """Ready or not, and why (``reason`` is the body of ``/readyz``)."""
        self._ready, self._reason = ready, reason

    def health(self) -> tuple[bool, str]:
        silent = time.monotonic() - self._beat
        if silent > self.stall_after:
            return False, f"stalled: the loop has not moved for {silent:.0f}s (limit {self.stall_after:.0f}s)"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        return self._ready, self._reason


class OpsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on one address, served by a daemon thread."""

    def __init__(self, registry: CollectorRegistry, probe: Probes, *, host: str = DEFAULT_HOST, port: int) -> None:
        self.registry = registry
        self.probe = probe
        self.host = host
        self.port = port
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> OpsServer:
        """Listen (``port`` 0: a free port, then ``self.port`` is the one bound) and serve on a daemon thread."""
        handler = _handler(self.registry, self.probe)
        try:
            server = ThreadingHTTPServer((self.host, self.port), handler)
        except OSError as exc:
            raise OpsServerError(
                f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}; "
                "choose another --metrics-port (0 picks a free one) or --metrics-host"
            ) from exc
        server.daemon_threads = True
        self._server = server
        self.port = int(server.server_address[1])
        threading.Thread(target=server.serve_forever, name="bernstein-ops-http", daemon=True).start()
        return self

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def _handler(registry: CollectorRegistry, probe: Probes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "bernstein-ops"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._answer(200, encoder(registry), content_type)
            elif path in ("/healthz", "/readyz"):
                ok, text = probe.health() if path == "/healthz" else probe.readiness()
                self._answer(200 if ok else 503, f"{text}\n".encode(), "text/plain; charset=utf-8")
            else:
                self._answer(404, b"not found: /metrics, /healthz, /readyz\n", "text/plain; charset=utf-8")

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            """No access log on stderr (the process's own logs stay one event per line)."""

    return Handler
