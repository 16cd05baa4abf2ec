"""The witness over HTTP: ``POST <prefix>/add-checkpoint`` as C2SP tlog-witness specifies it.

A thin edge around ``Witness.add_checkpoint``: it reads at most ``MAX_REQUEST_BYTES`` (a request
without a ``Content-Length`` is ``411``, a larger one ``413``), answers ``200`` with the
cosignature line, or the refusal's status, content type and body. ``GET <prefix>/<sha256(origin)
hex>/checkpoint`` (the spec's monitoring endpoint) serves the latest checkpoint cosigned for that
origin, with the log's signatures and the witness's own, so anyone can see what it vouched for;
``404`` when it cosigned none. Anything else is ``404`` (an unknown path) or ``405`` (another
method). A failure of the witness's own state is ``500`` and is logged: nothing was cosigned.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from bernstein.schemas.errors import BernsteinError
from bernstein.verifier.witness.core import MAX_REQUEST_BYTES, Witness, WitnessRefusal

LOG: Final = logging.getLogger("bernstein.witness")


def make_server(witness: Witness, host: str, port: int, *, prefix: str = "") -> ThreadingHTTPServer:
    """An HTTP server for ``witness`` bound to ``host:port`` (port 0: any free one); call ``serve_forever``."""
    path = prefix.rstrip("/") + "/add-checkpoint"
    monitored = re.compile(re.escape(prefix.rstrip("/")) + r"/([0-9a-f]{64})/checkpoint")

    class Handler(BaseHTTPRequestHandler):
        server_version = "bernstein-witness"
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            if self.path != path:
                self._answer(404, "text/plain; charset=utf-8", b"not found\n")
                return
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self._answer(411, "text/plain; charset=utf-8", b"a Content-Length is required\n")
                return
            if int(length) > MAX_REQUEST_BYTES:
                self._answer(413, "text/plain; charset=utf-8", f"at most {MAX_REQUEST_BYTES} bytes\n".encode())
                return
            body = self.rfile.read(int(length))
            try:
                cosignature = witness.add_checkpoint(body)
            except WitnessRefusal as refusal:
                LOG.info("add-checkpoint refused: %s: %s", refusal.code, refusal.message)
                self._answer(*refusal.response())
                return
            except BernsteinError as exc:
                LOG.error("add-checkpoint failed: %s: %s", exc.code, exc.message)
                self._answer(500, "text/plain; charset=utf-8", b"the witness could not read or write its state\n")
                return
            self._answer(200, "text/plain; charset=utf-8", cosignature)

        def do_GET(self) -> None:  # noqa: N802
            wanted = monitored.fullmatch(self.path)
            if wanted is None:
                self._answer(405 if self.path == path else 404, "text/plain; charset=utf-8", b"POST add-checkpoint\n")
                return
            try:
                latest = witness.latest_by_id(wanted.group(1))
            except BernsteinError as exc:
                LOG.error("checkpoint lookup failed: %s: %s", exc.code, exc.message)
                self._answer(500, "text/plain; charset=utf-8", b"the witness could not read its state\n")
                return
            if latest is None:
                self._answer(404, "text/plain; charset=utf-8", b"no checkpoint cosigned for that origin\n")
                return
            self._answer(200, "text/plain; charset=utf-8", latest.note)

        def _answer(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the http.server signature
            LOG.debug(format, *args)

    return ThreadingHTTPServer((host, port), Handler)


def serve_in_thread(server: ThreadingHTTPServer) -> Callable[[], None]:
    """Serve in a daemon thread; return the function that stops it (for tests and embedding)."""
    thread = threading.Thread(target=server.serve_forever, name="witness-http", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
