"""A tiny static web server for the demo site and the research tests.

Serves a directory on 127.0.0.1 from a background thread, without request
logs, with ``.html`` as ``text/html; charset=utf-8`` and one redirect route,
``/old-notes`` -> 301 -> ``/notes.html``, so that redirect recording can be
exercised::

    with serve(Path("demo/site")) as (url, stop):
        page = fetch_page(url + "/notes.html", allow_private=True)

Run it by hand: ``python demo/site_server.py [--port 8000] [--directory demo/site]``.
"""

from __future__ import annotations

import argparse
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

SITE_DIR: Final = Path(__file__).resolve().parent / "site"
REDIRECTS: Final = {"/old-notes": "/notes.html"}


class _Handler(SimpleHTTPRequestHandler):
    extensions_map = {
        **SimpleHTTPRequestHandler.extensions_map,
        ".html": "text/html; charset=utf-8",
        ".txt": "text/plain; charset=utf-8",
    }

    def do_GET(self) -> None:
        target = REDIRECTS.get(self.path.split("?", 1)[0])
        if target is not None:
            self.send_response(301)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: tests and the demo print their own output."""


@contextmanager
def serve(directory: Path | str = SITE_DIR, port: int = 0) -> Iterator[tuple[str, Callable[[], None]]]:
    """Serve ``directory`` on 127.0.0.1:``port`` (0: any free port); yield ``(base_url, stop)``.

    ``stop`` may be called early (e.g. to test an unreachable server); it is
    idempotent and also runs when the block exits.
    """
    handler = functools.partial(_Handler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="demo-site-server", daemon=True)
    thread.start()
    stopped = threading.Event()

    def stop() -> None:
        if stopped.is_set():
            return
        stopped.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    host, bound_port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{bound_port}", stop
    finally:
        stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the demo site on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--directory", type=Path, default=SITE_DIR)
    args = parser.parse_args()
    with serve(args.directory, args.port) as (url, _stop):
        print(f"serving {args.directory} at {url}/ (Ctrl-C to stop)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
