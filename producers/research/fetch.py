"""Fetching pages: the one place the research modality touches the network.

``fetch_page`` (and ``make_fetch``, which binds its options) is the default
``fetch_fn``. It uses httpx with timeouts and an overall deadline, follows
redirects itself so that every hop is recorded (``Redirect(status, url)``)
and re-checked, streams the body and aborts as soon as it exceeds the byte
cap, refuses any scheme but http(s), and, unless ``allow_private=True``,
refuses hosts that resolve to a private, loopback, link-local, multicast or
otherwise non-global address (SSRF guard). Only 2xx responses are pages.

It asks for ``Accept-Encoding: identity``; the bytes kept are the response
body after any content-encoding the server applied anyway is removed, so
they are the bytes a reader of the page sees. Environment proxy settings are
ignored (``trust_env=False``). Known limit: the address check resolves the
host before httpx resolves it again to connect, so a DNS answer that changes
in between (rebinding) is not caught.

Every failure is a ``FetchRefused`` with a stable code; httpx exceptions
never escape this module.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from producers.research.errors import FetchCode, FetchRefused
from schemas.canonical import content_hash

if TYPE_CHECKING:
    import httpx

DEFAULT_TIMEOUT: Final = 10.0
"""Seconds for each connect / read / write / pool wait."""
DEFAULT_DEADLINE: Final = 30.0
"""Seconds for a whole fetch, redirects and body included."""
DEFAULT_MAX_RESPONSE_BYTES: Final = 10 * 1024 * 1024
DEFAULT_MAX_REDIRECTS: Final = 5
USER_AGENT: Final = "bernstein-research/0.1 (+https://github.com/bernstein)"
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
ALLOWED_SCHEMES: Final = frozenset({"http", "https"})
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")

Resolver = Callable[[str, int], list[str]]
"""``(host, port) -> [ip address strings]``; injectable for tests."""


@dataclass(frozen=True, slots=True)
class Redirect:
    """One redirect hop: ``url`` answered with ``status`` (3xx) and a Location."""

    status: int
    url: str

    def to_document(self) -> dict[str, Any]:
        return {"status": self.status, "url": self.url}


@dataclass(frozen=True)
class FetchedPage:
    """The exact bytes one source returned, and how they were reached.

    ``source_ref`` is the planned URL (what citations name); ``final_url`` is
    where the bytes came from after redirects. ``status`` and
    ``content_type`` are None when a custom fetch_fn returned bare bytes.
    ``content_hash`` is computed from ``content`` at construction.
    """

    source_ref: str
    content: bytes = field(repr=False)
    final_url: str = ""
    status: int | None = None
    content_type: str | None = None
    redirects: tuple[Redirect, ...] = ()
    content_hash: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", bytes(self.content))
        object.__setattr__(self, "redirects", tuple(self.redirects))
        if not self.final_url:
            object.__setattr__(self, "final_url", self.source_ref)
        object.__setattr__(self, "content_hash", content_hash(self.content))

    @property
    def size(self) -> int:
        return len(self.content)

    def text(self) -> str:
        """The page's normalised text (what quotes are matched against)."""
        from producers.research.quotes import page_text

        return page_text(self.content, self.content_type)


FetchFn = Callable[..., "bytes | FetchedPage"]
"""``(url) -> bytes | FetchedPage``; if it accepts a ``max_bytes`` keyword the
worker passes the remaining byte allowance of the budget."""


# --------------------------------------------------------------------------
# Target checks (pure apart from DNS resolution, which is injectable)
# --------------------------------------------------------------------------


def system_resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (IPv6 zone ids stripped)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]).split("%", 1)[0] for info in infos})


def is_public_address(address: str) -> bool:
    """True for globally routable unicast addresses (embedded IPv4 checked too)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        embedded: ipaddress.IPv4Address | None = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip.teredo is not None:
            embedded = ip.teredo[1]
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None and not is_public_address(str(embedded)):
            return False
    return ip.is_global and not ip.is_multicast


def check_target(url: str, *, allow_private: bool, resolve: Resolver | None = None) -> None:
    """Refuse a URL we must not fetch: wrong scheme, no host, or a non-public address."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise FetchRefused(f"not a valid URL: {url!r} ({exc})", code=FetchCode.INVALID_URL, url=url) from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise FetchRefused(
            f"scheme {scheme or '(none)'!r} is not allowed; only http and https are fetched: {url!r}",
            code=FetchCode.SCHEME_NOT_ALLOWED,
            url=url,
        )
    host = parts.hostname
    if not host:
        raise FetchRefused(f"URL has no host: {url!r}", code=FetchCode.INVALID_URL, url=url)
    if allow_private:
        return
    port = port or (443 if scheme == "https" else 80)
    try:
        addresses = (resolve or system_resolve)(host, port)
    except (OSError, UnicodeError) as exc:
        raise FetchRefused(f"cannot resolve host {host!r}: {exc}", code=FetchCode.FETCH_FAILED, url=url) from None
    if not addresses:
        raise FetchRefused(f"host {host!r} resolves to no address", code=FetchCode.FETCH_FAILED, url=url)
    for address in addresses:
        try:
            public = is_public_address(address)
        except ValueError:
            public = False
        if not public:
            raise FetchRefused(
                f"host {host!r} resolves to non-public address {address}; pass allow_private=True "
                "(--allow-private) to fetch from private networks",
                code=FetchCode.PRIVATE_ADDRESS,
                url=url,
            )


# --------------------------------------------------------------------------
# The default fetch
# --------------------------------------------------------------------------


def fetch_page(
    url: str,
    *,
    max_bytes: int | None = None,
    allow_private: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: float = DEFAULT_DEADLINE,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
    resolve: Resolver | None = None,
    transport: httpx.BaseTransport | None = None,
) -> FetchedPage:
    """GET ``url`` and return its exact body bytes, recording every redirect.

    Raises:
        FetchRefused: SCHEME_NOT_ALLOWED, INVALID_URL, PRIVATE_ADDRESS,
            RESPONSE_TOO_LARGE (body beyond ``max_bytes``, default 10 MiB),
            TOO_MANY_REDIRECTS, HTTP_ERROR (non-2xx) or FETCH_FAILED
            (DNS, connection, timeout, protocol errors).
    """
    import httpx  # loaded on first fetch so offline tools (the verifier) need not import it

    limit = DEFAULT_MAX_RESPONSE_BYTES if max_bytes is None else max_bytes
    stop_at = time.monotonic() + deadline
    redirects: list[Redirect] = []
    current = url
    try:
        with httpx.Client(
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
            transport=transport,
        ) as client:
            for _hop in range(max_redirects + 1):
                check_target(current, allow_private=allow_private, resolve=resolve)
                with client.stream("GET", current) as response:
                    status = response.status_code
                    location = response.headers.get("location")
                    if status in REDIRECT_STATUSES and location:
                        redirects.append(Redirect(status, current))
                        current = str(response.url.join(location))
                        continue
                    if not 200 <= status < 300:
                        raise FetchRefused(
                            f"GET {current} answered HTTP {status}", code=FetchCode.HTTP_ERROR, url=current, status=status
                        )
                    content = _read_capped(response, limit=limit, url=current, stop_at=stop_at)
                    return FetchedPage(
                        source_ref=url,
                        content=content,
                        final_url=current,
                        status=status,
                        content_type=response.headers.get("content-type"),
                        redirects=tuple(redirects),
                    )
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
        raise FetchRefused(
            f"GET {current} failed: {type(exc).__name__}: {exc}", code=FetchCode.FETCH_FAILED, url=current
        ) from None
    raise FetchRefused(f"GET {url} redirected more than {max_redirects} times", code=FetchCode.TOO_MANY_REDIRECTS, url=current)


def _read_capped(response: httpx.Response, *, limit: int, url: str, stop_at: float) -> bytes:
    declared = response.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise FetchRefused(
            f"GET {url} declares {int(declared)} bytes; the cap is {limit}",
            code=FetchCode.RESPONSE_TOO_LARGE,
            url=url,
            limit=limit,
            received=int(declared),
        )
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            raise FetchRefused(
                f"GET {url} sent more than {limit} bytes; aborted",
                code=FetchCode.RESPONSE_TOO_LARGE,
                url=url,
                limit=limit,
                received=len(body),
            )
        if time.monotonic() > stop_at:
            raise FetchRefused(f"GET {url} did not finish within the fetch deadline", code=FetchCode.FETCH_FAILED, url=url)
    return bytes(body)


def make_fetch(
    *,
    allow_private: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: float = DEFAULT_DEADLINE,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
    resolve: Resolver | None = None,
) -> Callable[..., FetchedPage]:
    """A ``fetch_fn`` with these options bound; it takes the worker's ``max_bytes`` allowance."""

    def fetch(url: str, *, max_bytes: int | None = None) -> FetchedPage:
        limit = max_response_bytes if max_bytes is None else min(max_bytes, max_response_bytes)
        return fetch_page(
            url,
            max_bytes=limit,
            allow_private=allow_private,
            timeout=timeout,
            deadline=deadline,
            max_redirects=max_redirects,
            resolve=resolve,
        )

    return fetch


default_fetch: Final = make_fetch()
"""Public addresses only, 10 MiB per response, 10 s timeouts, 30 s per fetch."""
