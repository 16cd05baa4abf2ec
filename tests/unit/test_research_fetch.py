"""The default fetch: exact bytes, recorded redirects, caps, and the scheme / address guards."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest

from bernstein.producers.research import FetchCode, FetchedPage, FetchRefused, Redirect, fetch_page, make_fetch
from bernstein.producers.research.fetch import (
    DEADLINE_EXCEEDED,
    DECODE_STEP,
    UNSUPPORTED_ENCODING,
    _guarded_transport,
    check_target,
    is_public_address,
)
from bernstein.schemas.canonical import sha256_digest
from demo.site_server import SITE_DIR, serve


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serve(SITE_DIR) as (url, _stop):
        yield url


def public_resolver(host: str, port: int) -> list[str]:
    return ["93.184.216.34"]


def test_bytes_are_exactly_the_served_file(site: str) -> None:
    page = fetch_page(f"{site}/notes.html", allow_private=True)
    expected = (SITE_DIR / "notes.html").read_bytes()
    assert page.content == expected
    assert page.content_hash == sha256_digest(expected)
    assert page.size == len(expected)
    assert page.status == 200
    assert page.content_type == "text/html; charset=utf-8"
    assert page.source_ref == page.final_url == f"{site}/notes.html"
    assert page.redirects == ()


def test_redirect_chain_is_recorded(site: str) -> None:
    page = fetch_page(f"{site}/old-notes", allow_private=True)
    assert page.source_ref == f"{site}/old-notes"
    assert page.final_url == f"{site}/notes.html"
    assert page.redirects == (Redirect(301, f"{site}/old-notes"),)
    assert page.content == (SITE_DIR / "notes.html").read_bytes()


def test_declared_size_over_cap_is_refused(site: str) -> None:
    with pytest.raises(FetchRefused) as info:
        fetch_page(f"{site}/notes.html", allow_private=True, max_bytes=100)
    assert info.value.code == FetchCode.RESPONSE_TOO_LARGE
    assert info.value.limit == 100
    assert info.value.received is not None and info.value.received > 100


def test_streamed_body_is_aborted_beyond_cap() -> None:
    sent: list[int] = []

    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            sent.append(1)
            yield b"x" * 1000

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=chunks()))
    with pytest.raises(FetchRefused) as info:
        fetch_page("https://example.test/big", max_bytes=2500, resolve=public_resolver, transport=transport)
    assert info.value.code == FetchCode.RESPONSE_TOO_LARGE
    assert info.value.received == 3000
    assert len(sent) < 100  # the transfer stopped early


def test_body_exactly_at_cap_is_kept() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"y" * 50))
    page = fetch_page("https://example.test/", max_bytes=50, resolve=public_resolver, transport=transport)
    assert page.content == b"y" * 50


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/file.txt", "gopher://example.com/", "notaurl"])
def test_non_http_schemes_are_refused(url: str) -> None:
    with pytest.raises(FetchRefused) as info:
        fetch_page(url, allow_private=True)
    assert info.value.code == FetchCode.SCHEME_NOT_ALLOWED


def test_private_address_refused_without_flag(site: str) -> None:
    with pytest.raises(FetchRefused) as info:
        fetch_page(f"{site}/notes.html")
    assert info.value.code == FetchCode.PRIVATE_ADDRESS
    port = site.rsplit(":", 1)[1]
    with pytest.raises(FetchRefused) as info:
        fetch_page(f"http://localhost:{port}/notes.html")
    assert info.value.code == FetchCode.PRIVATE_ADDRESS


def test_private_address_allowed_with_flag(site: str) -> None:
    fetch = make_fetch(allow_private=True)
    assert isinstance(fetch(f"{site}/index.html"), FetchedPage)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("::ffff:127.0.0.1", False),
        ("64:ff9b::a00:1", False),
        ("2002:7f00:1::", False),
        ("93.184.216.34", True),
        ("2606:4700::1111", True),
    ],
)
def test_address_classification(address: str, public: bool) -> None:
    assert is_public_address(address) is public


def test_redirect_hops_are_rechecked() -> None:
    """A public page that redirects to an internal address is refused at the hop."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "http://internal.test/admin"})

    def resolver(host: str, port: int) -> list[str]:
        return ["10.0.0.5"] if host == "internal.test" else ["93.184.216.34"]

    with pytest.raises(FetchRefused) as info:
        fetch_page("https://public.test/", resolve=resolver, transport=httpx.MockTransport(handler))
    assert info.value.code == FetchCode.PRIVATE_ADDRESS
    assert info.value.url == "http://internal.test/admin"


def test_redirect_loop_is_refused() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(301, headers={"Location": "/again"}))
    with pytest.raises(FetchRefused) as info:
        fetch_page("https://loop.test/", resolve=public_resolver, transport=transport, max_redirects=3)
    assert info.value.code == FetchCode.TOO_MANY_REDIRECTS


def test_http_error_status_is_typed(site: str) -> None:
    with pytest.raises(FetchRefused) as info:
        fetch_page(f"{site}/missing.html", allow_private=True)
    assert info.value.code == FetchCode.HTTP_ERROR
    assert info.value.status == 404


def test_connection_failure_is_translated() -> None:
    with serve(SITE_DIR) as (url, stop):
        stop()
        with pytest.raises(FetchRefused) as info:
            fetch_page(f"{url}/index.html", allow_private=True, timeout=2.0)
    assert info.value.code == FetchCode.FETCH_FAILED
    assert not isinstance(info.value, httpx.HTTPError)


def test_unresolvable_host_is_fetch_failed() -> None:
    def resolver(host: str, port: int) -> list[str]:
        raise OSError("name or service not known")

    with pytest.raises(FetchRefused) as info:
        check_target("https://nowhere.invalid/", allow_private=False, resolve=resolver)
    assert info.value.code == FetchCode.FETCH_FAILED


# --------------------------------------------------------------------------
# Stacked content encodings, the overall deadline, the pinned address.
# Every server here listens on 127.0.0.1 (loopback only, bounded loops).
# --------------------------------------------------------------------------


def _gzip(chunks: Iterator[bytes]) -> bytes:
    encoder = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [encoder.compress(chunk) for chunk in chunks]
    return b"".join([*out, encoder.flush()])


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """gzip(gzip(1 GiB of zeros)): about 1.8 KB on the wire (built 1 MiB at a time)."""
    once = _gzip(bytes(1 << 20) for _ in range(1024))
    twice = _gzip(iter([once]))
    assert len(twice) < 4096
    return twice


@contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A one-thread loopback server: each connection's request is read, then ``answer`` writes."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5.0)
                try:
                    data = b""
                    while b"\r\n\r\n" not in data and len(data) < 65536:
                        piece = conn.recv(4096)
                        if not piece:
                            break
                        data += piece
                    answer(conn)
                except OSError:
                    pass

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join(timeout=10)
        listener.close()


def _answer_with(body: bytes, encoding: str) -> Callable[[socket.socket], None]:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: {encoding}\r\nContent-Length: {len(body)}\r\n"
    payload = (head + "Connection: close\r\n\r\n").encode() + body

    def answer(conn: socket.socket) -> None:
        conn.sendall(payload)

    return answer


def test_a_stacked_gzip_bomb_is_cut_at_the_cap_with_memory_bounded(gzip_bomb: bytes) -> None:
    cap = 4 * 1024 * 1024
    with raw_server(_answer_with(gzip_bomb, "gzip, gzip")) as url:
        tracemalloc.start()
        try:
            started = time.monotonic()
            with pytest.raises(FetchRefused) as info:
                fetch_page(f"{url}/bomb", allow_private=True, max_bytes=cap)
            elapsed = time.monotonic() - started
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert info.value.code == FetchCode.RESPONSE_TOO_LARGE
    assert info.value.limit == cap
    assert info.value.received is not None and cap < info.value.received <= cap + DECODE_STEP
    # about the cap was ever held (the body buffer and its last reallocation), not the 1 GiB it decodes to
    assert peak < cap * 7 // 4, f"peak {peak} bytes"
    assert elapsed < 10.0


def test_stacked_gzip_within_the_cap_decodes_to_the_exact_bytes() -> None:
    text = b"<p>page text</p>" * 1000
    with raw_server(_answer_with(_gzip(iter([_gzip(iter([text]))])), "gzip, gzip")) as url:
        page = fetch_page(f"{url}/twice", allow_private=True)
    assert page.content == text
    assert page.content_hash == sha256_digest(text)


def test_raw_deflate_and_zlib_deflate_both_decode() -> None:
    text = b"deflated text " * 100
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    for body in (zlib.compress(text), raw.compress(text) + raw.flush()):
        with raw_server(_answer_with(body, "deflate")) as url:
            assert fetch_page(f"{url}/", allow_private=True).content == text


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip, gzip, gzip", b"\x1f\x8b"),  # three layers: refused before a byte is decoded
        ("br", b"\x0b\x02\x80hello\x03"),
        ("gzip", b"this is not gzip at all"),
    ],
)
def test_unsupported_or_corrupt_encodings_are_typed(encoding: str, body: bytes) -> None:
    with raw_server(_answer_with(body, encoding)) as url, pytest.raises(FetchRefused) as info:
        fetch_page(f"{url}/", allow_private=True)
    assert info.value.code == UNSUPPORTED_ENCODING


def test_a_server_dripping_its_headers_is_stopped_at_the_deadline() -> None:
    """One header byte every 0.2 s keeps each read under the 1 s timeout; the 1.5 s deadline still holds."""

    def drip(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(100):  # bounded: 20 s at most, far beyond the deadline
            conn.sendall(b"X")
            time.sleep(0.2)

    with raw_server(drip) as url:
        started = time.monotonic()
        with pytest.raises(FetchRefused) as info:
            fetch_page(f"{url}/slow", allow_private=True, timeout=1.0, deadline=1.5)
        elapsed = time.monotonic() - started
    assert info.value.code == DEADLINE_EXCEEDED
    assert 1.4 < elapsed < 2.5


def test_a_server_that_never_answers_is_stopped_at_the_deadline() -> None:
    with raw_server(lambda conn: time.sleep(3)) as url:
        started = time.monotonic()
        with pytest.raises(FetchRefused) as info:
            fetch_page(f"{url}/silent", allow_private=True, timeout=10.0, deadline=1.0)
        elapsed = time.monotonic() - started
    assert info.value.code == DEADLINE_EXCEEDED
    assert elapsed < 2.0


def test_the_connection_goes_to_the_checked_address(site: str) -> None:
    """A pinned host connects to the vetted address, whatever DNS would say now (no rebinding)."""
    port = int(site.rsplit(":", 1)[1])
    pins = {("rebind.invalid", port): "127.0.0.1"}  # .invalid never resolves
    transport = _guarded_transport(time.monotonic() + 10, pins)
    with httpx.Client(transport=transport, trust_env=False) as client:
        response = client.get(f"http://rebind.invalid:{port}/notes.html")
    assert response.status_code == 200
    assert response.content == (SITE_DIR / "notes.html").read_bytes()


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://10.0.0.5/", FetchCode.PRIVATE_ADDRESS),
        ("http://169.254.169.254/latest/meta-data/", FetchCode.PRIVATE_ADDRESS),
        ("http://192.168.1.1:8080/", FetchCode.PRIVATE_ADDRESS),
        ("http://[::ffff:10.0.0.1]/", FetchCode.PRIVATE_ADDRESS),
        ("http://user:pw@public.test/", FetchCode.INVALID_URL),
        ("http://127.0.0.1\\@public.test/", FetchCode.INVALID_URL),
    ],
)
def test_literal_private_addresses_and_ambiguous_urls_are_refused_without_dns(url: str, code: str) -> None:
    def no_dns(host: str, port: int) -> list[str]:
        raise AssertionError(f"resolved {host}")

    with pytest.raises(FetchRefused) as info:
        fetch_page(url, resolve=no_dns, transport=httpx.MockTransport(lambda request: pytest.fail("connected")))
    assert info.value.code == code


def test_each_hop_is_pinned_to_its_vetted_address_under_the_name_httpx_connects_to(monkeypatch: pytest.MonkeyPatch) -> None:
    """No socket: the connection layer is replaced by a mock that records which pins were set for each hop."""
    seen: list[dict[tuple[str, int], str]] = []
    pins_of_fetch: list[dict[tuple[str, int], str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(pins_of_fetch[0]))
        if request.url.raw_host == b"xn--bcher-kva.example":
            return httpx.Response(302, headers={"Location": "http://Second.Example:8080/page"})
        return httpx.Response(200, content=b"ok")

    def mock_transport(stop_at: float, pins: dict[tuple[str, int], str]) -> httpx.BaseTransport:
        pins_of_fetch.append(pins)
        return httpx.MockTransport(handler)

    def resolver(host: str, port: int) -> list[str]:
        return {"xn--bcher-kva.example": ["93.184.216.34"], "second.example": ["93.184.216.35"]}[host]

    monkeypatch.setattr("bernstein.producers.research.fetch._guarded_transport", mock_transport)
    page = fetch_page("https://Bücher.example/start", resolve=resolver)
    assert page.content == b"ok"
    assert seen == [
        {("xn--bcher-kva.example", 443): "93.184.216.34"},
        {("xn--bcher-kva.example", 443): "93.184.216.34", ("second.example", 8080): "93.184.216.35"},
    ]


def test_oversized_response_headers_are_refused() -> None:
    """httpcore reads at most 100 KiB of status line and headers; a server sending more gets no further."""

    def huge_headers(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for i in range(400):  # 400 * ~1 KiB: bounded
            conn.sendall(f"X-Filler-{i}: {'a' * 1000}\r\n".encode())

    with raw_server(huge_headers) as url, pytest.raises(FetchRefused) as info:
        fetch_page(f"{url}/", allow_private=True, deadline=10.0)
    assert info.value.code == FetchCode.FETCH_FAILED
    assert "RemoteProtocolError" in info.value.message
