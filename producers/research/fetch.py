"""Fetching pages: the one place the research modality touches the network.

``fetch_page`` (and ``make_fetch``, which binds its options) is the default
``fetch_fn``. It uses httpx, follows redirects itself so that every hop is
recorded (``Redirect(status, url)``) and re-checked, and refuses any scheme
but http(s) and, unless ``allow_private=True``, hosts that resolve to a
private, loopback, link-local, multicast or otherwise non-global address
(SSRF guard; the rule is ``bernstein.producers.netpolicy``, shared with the browser).
Only 2xx responses are pages.

Connections go to the address that was checked: the host is resolved once,
checked, and the socket is opened to that address (TLS still verifies the
host name), so a DNS answer that changes between check and connect
(rebinding) is not followed.

The deadline covers the whole fetch: every connect, TLS handshake, write and
read (headers and redirect hops included) gets at most the time left, so a
server that drips one header byte at a time cannot hold a fetch past it
(``DEADLINE_EXCEEDED``).

It asks for ``Accept-Encoding: identity``; the bytes kept are the response
body after any content-encoding the server applied anyway is removed, so
they are the bytes a reader of the page sees. The fetcher reads the raw
bytes and decodes them itself, with a bound on every step: at most
``MAX_ENCODING_LAYERS`` layers of ``gzip`` / ``x-gzip`` / ``deflate``
(anything else is ``UNSUPPORTED_ENCODING``), each layer's output produced
``DECODE_STEP`` bytes at a time, and the fetch stops as soon as either the
raw bytes or the decoded bytes exceed the cap (``RESPONSE_TOO_LARGE``). A
stacked-gzip bomb (1.8 KB on the wire, 1 GiB decoded) is cut at the cap
having held about the cap in memory. Environment proxy settings are ignored
(``trust_env=False``).

Every failure is a ``FetchRefused`` with a stable code; httpx exceptions
(and a ``MemoryError`` while decoding) never escape this module.
"""

from __future__ import annotations

import ssl
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from bernstein.producers import netpolicy
from bernstein.producers.netpolicy import Resolver, TargetCode, TargetRefused, is_public_address, system_resolve
from bernstein.producers.research.errors import FetchCode, FetchRefused
from bernstein.schemas.canonical import content_hash
from bernstein.schemas.documents.research import Redirect

if TYPE_CHECKING:
    import httpcore
    import httpx

__all__ = [
    "ALLOWED_SCHEMES",
    "DEADLINE_EXCEEDED",
    "DECODE_STEP",
    "DEFAULT_DEADLINE",
    "DEFAULT_MAX_REDIRECTS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT",
    "MAX_ENCODING_LAYERS",
    "REDIRECT_STATUSES",
    "UNSUPPORTED_ENCODING",
    "USER_AGENT",
    "FetchFn",
    "FetchedPage",
    "Redirect",
    "Resolver",
    "check_target",
    "default_fetch",
    "fetch_page",
    "is_public_address",
    "make_fetch",
    "system_resolve",
]

DEFAULT_TIMEOUT: Final = 10.0
"""Seconds for each connect / read / write / pool wait."""
DEFAULT_DEADLINE: Final = 30.0
"""Seconds for a whole fetch: connects, headers, redirects and body."""
DEFAULT_MAX_RESPONSE_BYTES: Final = 10 * 1024 * 1024
DEFAULT_MAX_REDIRECTS: Final = 5
USER_AGENT: Final = "bernstein-research/0.1 (+https://github.com/bernstein)"
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
ALLOWED_SCHEMES: Final = netpolicy.ALLOWED_SCHEMES
MAX_ENCODING_LAYERS: Final = 2
"""Content-Encoding layers decoded (``gzip, gzip`` is two); more are UNSUPPORTED_ENCODING."""
DECODE_STEP: Final = 64 * 1024
"""Most bytes one decoding step of one layer may produce."""

UNSUPPORTED_ENCODING: Final = "UNSUPPORTED_ENCODING"
"""FetchRefused code: a Content-Encoding the fetcher does not decode, or too many layers, or corrupt data."""
DEADLINE_EXCEEDED: Final = "DEADLINE_EXCEEDED"
"""FetchRefused code: the whole fetch outlived its deadline (before or during the body)."""

_POLICY_CODES: Final = {
    TargetCode.SCHEME_NOT_ALLOWED: FetchCode.SCHEME_NOT_ALLOWED,
    TargetCode.INVALID_URL: FetchCode.INVALID_URL,
    TargetCode.PRIVATE_ADDRESS: FetchCode.PRIVATE_ADDRESS,
    TargetCode.UNRESOLVABLE_HOST: FetchCode.FETCH_FAILED,
}


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
        from bernstein.producers.research.quotes import page_text

        return page_text(self.content, self.content_type)


FetchFn = Callable[..., "bytes | FetchedPage"]
"""``(url) -> bytes | FetchedPage``; if it accepts a ``max_bytes`` keyword the
worker passes the remaining byte allowance of the budget."""


# --------------------------------------------------------------------------
# Target checks (the shared policy, with the research modality's codes)
# --------------------------------------------------------------------------


def check_target(url: str, *, allow_private: bool, resolve: Resolver | None = None) -> list[str]:
    """Refuse a URL we must not fetch: wrong scheme, no host, or a non-public address.

    Returns the vetted addresses to connect to (empty with ``allow_private``,
    where the system resolver is used as usual).
    """
    try:
        origin = netpolicy.parse_origin(url)
        if allow_private:
            return []
        return netpolicy.public_addresses(origin, url=url, resolve=resolve)
    except TargetRefused as exc:
        message = exc.message
        if exc.code == TargetCode.PRIVATE_ADDRESS:
            message += "; pass allow_private=True (--allow-private) to fetch from private networks"
        raise FetchRefused(message, code=_POLICY_CODES.get(exc.code, FetchCode.FETCH_FAILED), url=url) from None


# --------------------------------------------------------------------------
# The connection layer: pinned addresses and one deadline for every socket call
# --------------------------------------------------------------------------


class _DeadlinePassed(Exception):
    """Raised inside the transport when the fetch's deadline has passed (never leaves this module)."""


def _guarded_transport(stop_at: float, pins: dict[tuple[str, int], str]) -> httpx.HTTPTransport:
    """An httpx transport whose sockets connect to the pinned address and never wait past ``stop_at``."""
    import httpcore
    import httpx

    class DeadlineStream(httpcore.NetworkStream):
        def __init__(self, inner: httpcore.NetworkStream) -> None:
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self._inner.read(max_bytes, _left(timeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._inner.write(buffer, _left(timeout))

        def close(self) -> None:
            self._inner.close()

        def start_tls(
            self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
        ) -> httpcore.NetworkStream:
            return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class PinnedBackend(httpcore.NetworkBackend):
        def __init__(self) -> None:
            self._inner = httpcore.SyncBackend()

        def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore.NetworkStream:
            address = pins.get((host.lower(), port), host)
            stream = self._inner.connect_tcp(address, port, _left(timeout), local_address, socket_options)
            return DeadlineStream(stream)

        def connect_unix_socket(
            self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
        ) -> httpcore.NetworkStream:
            raise httpcore.ConnectError("unix sockets are not used by the research fetcher")

        def sleep(self, seconds: float) -> None:
            time.sleep(min(seconds, max(stop_at - time.monotonic(), 0.0)))

    def _left(timeout: float | None) -> float:
        left = stop_at - time.monotonic()
        if left <= 0:
            raise _DeadlinePassed
        return left if timeout is None else min(timeout, left)

    transport = httpx.HTTPTransport(trust_env=False)
    transport._pool = httpcore.ConnectionPool(  # noqa: SLF001 - httpx exposes no network_backend option
        ssl_context=httpx.create_ssl_context(trust_env=False),
        network_backend=PinnedBackend(),
        max_connections=4,
    )
    return transport


# --------------------------------------------------------------------------
# Decoding with a bound on every step
# --------------------------------------------------------------------------

_DECODABLE: Final = frozenset({"gzip", "x-gzip", "deflate"})


class _Layer:
    """One content-encoding layer, decoded at most ``DECODE_STEP`` bytes per step."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._raw_deflate_tried = False
        self._produced = False
        wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._decoder = zlib.decompressobj(wbits)

    def steps(self, data: bytes) -> Iterable[bytes]:
        """The decoded output of ``data``, in pieces of at most ``DECODE_STEP`` bytes."""
        while True:
            if self._decoder.eof:
                return  # bytes after the end of the stream are ignored (as browsers do)
            try:
                out = self._decoder.decompress(data, DECODE_STEP)
            except zlib.error:
                if self.encoding == "deflate" and not self._produced and not self._raw_deflate_tried:
                    self._raw_deflate_tried = True  # some servers send raw deflate, without the zlib header
                    self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise
            data = self._decoder.unconsumed_tail
            if out:
                self._produced = True
                yield out
            if not data and len(out) < DECODE_STEP:
                return


def _encodings(header: str | None, url: str) -> list[str]:
    """The layers to undo, outermost (applied last) first; raises UNSUPPORTED_ENCODING."""
    if header is None:
        return []
    names = [name.strip().lower() for name in header.split(",")]
    layers = [name for name in names if name and name != "identity"]
    unknown = sorted({name for name in layers if name not in _DECODABLE})
    if unknown:
        raise FetchRefused(
            f"GET {url} answered with Content-Encoding {', '.join(unknown)}, which the fetcher does not decode",
            code=UNSUPPORTED_ENCODING,
            url=url,
        )
    if len(layers) > MAX_ENCODING_LAYERS:
        raise FetchRefused(
            f"GET {url} stacks {len(layers)} content encodings; at most {MAX_ENCODING_LAYERS} are decoded",
            code=UNSUPPORTED_ENCODING,
            url=url,
        )
    return list(reversed(layers))


class _CappedBody:
    """The decoded body, refused the moment it (or the raw bytes read) would pass ``limit``."""

    def __init__(self, *, limit: int, url: str, layers: list[str]) -> None:
        self.limit = limit
        self.url = url
        self.body = bytearray()
        self.raw = 0
        self._layers = [_Layer(encoding) for encoding in layers]

    def feed_raw(self, chunk: bytes) -> None:
        self.raw += len(chunk)
        if self.raw > self.limit:
            raise self._too_large(self.raw, "on the wire")
        self._push(0, chunk)

    def _push(self, level: int, data: bytes) -> None:
        if level == len(self._layers):
            self.body += data
            if len(self.body) > self.limit:
                raise self._too_large(len(self.body), "decoded")
            return
        for piece in self._layers[level].steps(data):
            self._push(level + 1, piece)

    def _too_large(self, received: int, where: str) -> FetchRefused:
        return FetchRefused(
            f"GET {self.url} sent more than {self.limit} bytes ({where}); aborted",
            code=FetchCode.RESPONSE_TOO_LARGE,
            url=self.url,
            limit=self.limit,
            received=received,
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

    ``transport`` replaces the connection layer (tests); the default one
    connects to the checked address and enforces ``deadline`` on every socket
    call.

    Raises:
        FetchRefused: SCHEME_NOT_ALLOWED, INVALID_URL, PRIVATE_ADDRESS,
            RESPONSE_TOO_LARGE (raw or decoded body beyond ``max_bytes``,
            default 10 MiB), UNSUPPORTED_ENCODING, TOO_MANY_REDIRECTS,
            HTTP_ERROR (non-2xx), DEADLINE_EXCEEDED or FETCH_FAILED (DNS,
            connection, timeout, protocol errors).
    """
    import httpx  # loaded on first fetch so offline tools (the verifier) need not import it

    limit = DEFAULT_MAX_RESPONSE_BYTES if max_bytes is None else max_bytes
    stop_at = time.monotonic() + deadline
    redirects: list[Redirect] = []
    pins: dict[tuple[str, int], str] = {}
    current = url
    try:
        with httpx.Client(
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
            transport=transport if transport is not None else _guarded_transport(stop_at, pins),
        ) as client:
            for _hop in range(max_redirects + 1):
                addresses = check_target(current, allow_private=allow_private, resolve=resolve)
                if addresses:  # connect to the vetted address, keyed by the host exactly as httpx will name it
                    target = httpx.URL(current)
                    pins[(target.raw_host.decode("ascii").lower(), target.port or netpolicy.DEFAULT_PORTS[target.scheme])] = (
                        addresses[0]
                    )
                _check_deadline(stop_at, current)
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
    except _DeadlinePassed:
        raise _deadline_refusal(current) from None
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
        if time.monotonic() >= stop_at:
            raise _deadline_refusal(current) from None
        raise FetchRefused(
            f"GET {current} failed: {type(exc).__name__}: {exc}", code=FetchCode.FETCH_FAILED, url=current
        ) from None
    except MemoryError:
        raise FetchRefused(
            f"GET {current} could not be held in memory; aborted", code=FetchCode.RESPONSE_TOO_LARGE, url=current, limit=limit
        ) from None
    raise FetchRefused(f"GET {url} redirected more than {max_redirects} times", code=FetchCode.TOO_MANY_REDIRECTS, url=current)


def _deadline_refusal(url: str) -> FetchRefused:
    return FetchRefused(f"GET {url} did not finish within the fetch deadline", code=DEADLINE_EXCEEDED, url=url)


def _check_deadline(stop_at: float, url: str) -> None:
    if time.monotonic() >= stop_at:
        raise _deadline_refusal(url)


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
    if response.is_stream_consumed:  # an in-memory transport (tests) that read and decoded the body eagerly
        loaded = _CappedBody(limit=limit, url=url, layers=[])
        loaded.feed_raw(response.content)
        return bytes(loaded.body)
    body = _CappedBody(limit=limit, url=url, layers=_encodings(response.headers.get("content-encoding"), url))
    try:
        for chunk in response.iter_raw():
            body.feed_raw(chunk)
            _check_deadline(stop_at, url)
    except zlib.error as exc:
        raise FetchRefused(f"GET {url} sent a body that does not decode: {exc}", code=UNSUPPORTED_ENCODING, url=url) from None
    return bytes(body.body)


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
