"""The default fetch: exact bytes, recorded redirects, caps, and the scheme / address guards."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from demo.site_server import SITE_DIR, serve
from producers.research import FetchCode, FetchedPage, FetchRefused, Redirect, fetch_page, make_fetch
from producers.research.fetch import check_target, is_public_address
from schemas.canonical import sha256_digest


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
