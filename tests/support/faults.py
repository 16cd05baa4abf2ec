"""Fault injection for the integration suite: stores and brokers that fail the way real ones do.

- ``FaultProxy``: a TCP proxy on 127.0.0.1 in front of a real endpoint (MinIO's HTTP port), switched
  between ``passing()`` (bytes through untouched), ``delaying(s)`` (every response held back ``s``
  seconds), ``cutting(after, body=...)`` (every response cut after ``after`` bytes, of its body or of
  the whole answer: the connection is closed mid-response) and ``refusing()`` (nothing listens on the
  port any more, as when the server is stopped; any other mode listens again on the same port).
- ``FailingS3``: a tiny HTTP server that answers every request with one status (500 or 403) and an
  S3-style XML error body (none for HEAD), counting the requests it got.
- ``closed_port()``: a local port nothing listens on (a stopped broker or store).

Standard library only; threads, not asyncio, so a test drives it from plain synchronous code. Each
mode applies to connections and responses from the moment it is set.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

_CHUNK: Final = 64 * 1024
_HEADERS_END: Final = b"\r\n\r\n"


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound once by the OS, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class _Mode:
    kind: str
    """pass | delay | cut | refuse"""
    seconds: float = 0.0
    after: int = 0
    body: bool = True


class FaultProxy:
    """A TCP proxy in front of ``target`` (host, port); see the module doc for its modes."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._mode = _Mode("pass")
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0
        self.connections = 0
        """Connections accepted so far."""
        self._listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- modes -------------------------------------------------------------------

    def passing(self) -> FaultProxy:
        return self._set(_Mode("pass"))

    def delaying(self, seconds: float) -> FaultProxy:
        """Hold every response back ``seconds`` (counted from the server's first byte after each request)."""
        return self._set(_Mode("delay", seconds=seconds))

    def cutting(self, after: int, *, body: bool = True) -> FaultProxy:
        """Close the connection once ``after`` bytes of a response went through: of its body (``body``, so the
        headers arrive whole and the body is cut short), else of the whole answer (cut inside the headers)."""
        return self._set(_Mode("cut", after=after, body=body))

    def refusing(self) -> FaultProxy:
        """Stop listening and drop every open connection: a connection attempt is refused."""
        self._mode = _Mode("refuse")
        with self._lock:
            listener, self._listener = self._listener, None
            open_sockets = list(self._sockets)
        if listener is not None:
            listener.close()
        for sock in open_sockets:
            _close(sock)
        return self

    def _set(self, mode: _Mode) -> FaultProxy:
        self._mode = mode
        if self._listener is None:
            self._listen()
        return self

    def close(self) -> None:
        self._stop.set()
        self.refusing()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = int(listener.getsockname()[1])
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="fault-proxy", daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: refusing
            if self._mode.kind == "refuse":
                _close(client)
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _track(self, *socks: socket.socket) -> None:
        with self._lock:
            self._sockets.update(socks)

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        self._track(client, upstream)
        asked = threading.Event()
        """Set when the client sent a request whose response has not started yet."""
        threading.Thread(target=self._requests, args=(client, upstream, asked), daemon=True).start()
        self._responses(client, upstream, asked)

    def _requests(self, client: socket.socket, upstream: socket.socket, asked: threading.Event) -> None:
        try:
            while data := client.recv(_CHUNK):
                asked.set()
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            with suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)

    def _responses(self, client: socket.socket, upstream: socket.socket, asked: threading.Event) -> None:
        passed = 0
        """Bytes of the current response that went through (of its body, for a body cut)."""
        in_body = False
        head = b""
        try:
            while data := upstream.recv(_CHUNK):
                mode = self._mode
                if asked.is_set():  # the first bytes of a new response
                    asked.clear()
                    passed, in_body, head = 0, False, b""
                    if mode.kind == "delay" and self._stop.wait(mode.seconds):
                        return
                if mode.kind == "cut":
                    if mode.body and not in_body:
                        head += data
                        end = head.find(_HEADERS_END)
                        if end < 0:
                            client.sendall(data)
                            continue
                        in_body = True
                        body = head[end + len(_HEADERS_END) :]
                        client.sendall(data[: len(data) - len(body)])
                        data = body
                    allowed = mode.after - passed
                    if len(data) >= allowed:
                        client.sendall(data[:allowed])
                        return  # cut: both ends are closed below
                    passed += len(data)
                elif mode.kind == "refuse":
                    return
                client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)
            with self._lock:
                self._sockets.discard(client)
                self._sockets.discard(upstream)


def _close(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with suppress(OSError):
        sock.close()


_S3_ERRORS: Final = {
    500: ("InternalError", "We encountered an internal error, please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
    403: ("AccessDenied", "Access Denied."),
}


class FailingS3:
    """An HTTP server on 127.0.0.1 that answers every S3 request with ``status`` and an S3 XML error body."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.requests = 0
        """Requests answered so far."""
        code, message = _S3_ERRORS[status]
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                owner.requests += 1
                resource = self.path.split("?", 1)[0]
                body = (
                    '<?xml version="1.0" encoding="UTF-8"?>\n'
                    f"<Error><Code>{code}</Code><Message>{message}</Message><Resource>{resource}</Resource>"
                    f"<RequestId>fault-kit-{owner.requests}</RequestId></Error>"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("x-amz-request-id", f"fault-kit-{owner.requests}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _answer

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"failing-s3-{status}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
