"""Where an agent may reach: the one host / address policy of every producer that touches the network.

Two modalities let an agent name a URL: the research fetcher (``producers/
research/fetch.py``) and the browser (``producers/computer_use``). Both use
this module, so "private" means the same thing in both:

* only ``http`` and ``https`` URLs, with a host, without user info, and
  without characters that parsers disagree about (backslashes, whitespace,
  control characters): a URL that Python and a browser (or httpx) could read
  as two different hosts is refused, never guessed;
* an address is *public* when it is globally routable unicast
  (``is_public_address``): loopback, private (10/8, 172.16/12, 192.168/16),
  link-local (169.254/16, so cloud metadata), carrier-grade NAT, multicast,
  unspecified, reserved and documentation ranges are not, nor are IPv6
  addresses that embed one of them (v4-mapped, 6to4, Teredo, NAT64);
* a literal non-public IP is refused without any DNS query; a host name is
  resolved and refused if *any* of its addresses is not public.

``check_target`` is the research fetcher's rule (any public origin, or
everything with ``allow_private``). ``OriginPolicy`` is the browser's: an
allow-list of exact origins, where an origin the operator listed explicitly
may be private (a local test server), and any other origin is refused. Every
refusal is a ``TargetRefused`` with a stable ``TargetCode``; nothing here
opens a connection (resolution is injectable for tests).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, Final
from urllib.parse import urlsplit

import idna  # httpx's own dependency: the IDNA 2008 / UTS 46 encoding browsers use

from bernstein.schemas.errors import BernsteinError

ALLOWED_SCHEMES: Final = frozenset({"http", "https"})
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_AMBIGUOUS: Final = frozenset("\\") | frozenset(chr(c) for c in range(0x21))  # backslash, controls and space
_AMBIGUOUS_ALSO: Final = frozenset({"\x7f"})

Resolver = Callable[[str, int], list[str]]
"""``(host, port) -> [ip address strings]``; injectable for tests."""


class TargetCode:
    """Stable codes of ``TargetRefused`` (appended to, never renamed)."""

    SCHEME_NOT_ALLOWED: Final = "SCHEME_NOT_ALLOWED"
    INVALID_URL: Final = "INVALID_URL"
    PRIVATE_ADDRESS: Final = "PRIVATE_ADDRESS"
    UNRESOLVABLE_HOST: Final = "UNRESOLVABLE_HOST"
    ORIGIN_NOT_ALLOWED: Final = "ORIGIN_NOT_ALLOWED"


class TargetRefused(BernsteinError):
    """A URL the policy refuses; ``code`` is a ``TargetCode``, ``url`` the URL as given."""

    code: ClassVar[str] = "TARGET_REFUSED"

    def __init__(self, message: str, *, code: str, url: str, address: str | None = None) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]  # per-instance stable code
        self.url = url
        self.address = address
        """For PRIVATE_ADDRESS: the first non-public address found."""


@dataclass(frozen=True, slots=True, order=True)
class Origin:
    """A normalised web origin: lower-case scheme and host, explicit port (IPv6 without brackets)."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def literal_ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """The host as an IP address, or None for a host name."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None


def parse_origin(url: str) -> Origin:
    """The origin of an http(s) URL (raises ``TargetRefused``: SCHEME_NOT_ALLOWED or INVALID_URL)."""
    if not isinstance(url, str):
        raise TargetRefused(f"not a URL: {type(url).__name__}", code=TargetCode.INVALID_URL, url=repr(url))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"not a valid URL: {url!r} ({exc})", code=TargetCode.INVALID_URL, url=url) from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise TargetRefused(
            f"scheme {scheme or '(none)'!r} is not allowed; only http and https: {url!r}",
            code=TargetCode.SCHEME_NOT_ALLOWED,
            url=url,
        )
    if any(ch in _AMBIGUOUS or ch in _AMBIGUOUS_ALSO for ch in url):
        raise TargetRefused(
            f"URL holds a backslash, space or control character (parsers disagree about its host): {url!r}",
            code=TargetCode.INVALID_URL,
            url=url,
        )
    if "@" in parts.netloc:
        raise TargetRefused(f"URL carries user info (user@host); refused: {url!r}", code=TargetCode.INVALID_URL, url=url)
    host = (parts.hostname or "").lower()
    if not host:
        raise TargetRefused(f"URL has no host: {url!r}", code=TargetCode.INVALID_URL, url=url)
    if not host.isascii():  # an internationalised name, as browsers and httpx send it (punycode)
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise TargetRefused(f"not a valid host name: {url!r} ({exc})", code=TargetCode.INVALID_URL, url=url) from None
    try:
        host = str(ipaddress.ip_address(host))  # one spelling per IPv6 address
    except ValueError:
        pass
    return Origin(scheme, host, port or DEFAULT_PORTS[scheme])


def system_resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (IPv6 zone ids stripped)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]).split("%", 1)[0] for info in infos})


def is_public_address(address: str) -> bool:
    """True for globally routable unicast addresses (embedded IPv4 checked too); raises ValueError for a non-address."""
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


def public_addresses(origin: Origin, *, url: str, resolve: Resolver | None = None) -> list[str]:
    """The addresses of ``origin``'s host, all public (raises PRIVATE_ADDRESS / UNRESOLVABLE_HOST).

    A literal IP is judged as it is, without any DNS query.
    """
    literal = origin.literal_ip
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = (resolve or system_resolve)(origin.host, origin.port)
        except (OSError, UnicodeError) as exc:
            raise TargetRefused(
                f"cannot resolve host {origin.host!r}: {exc}", code=TargetCode.UNRESOLVABLE_HOST, url=url
            ) from None
        if not addresses:
            raise TargetRefused(f"host {origin.host!r} resolves to no address", code=TargetCode.UNRESOLVABLE_HOST, url=url)
    for address in addresses:
        try:
            public = is_public_address(address)
        except ValueError:
            public = False
        if not public:
            what = "is" if literal is not None else f"host {origin.host!r} resolves to"
            raise TargetRefused(
                f"{url!r}: {what} non-public address {address}",
                code=TargetCode.PRIVATE_ADDRESS,
                url=url,
                address=address,
            )
    return addresses


def check_target(url: str, *, allow_private: bool, resolve: Resolver | None = None) -> Origin:
    """The research fetcher's rule: an http(s) URL whose host is public (any host with ``allow_private``)."""
    origin = parse_origin(url)
    if not allow_private:
        public_addresses(origin, url=url, resolve=resolve)
    return origin


class OriginPolicy:
    """The browser's rule: an allow-list of exact origins.

    ``allowed`` origins may be reached if their host is public; ``explicit``
    origins (named by the operator, e.g. ``--allow-origin``) may be reached
    whatever their address, so a local test server can be allowed by its
    exact origin without opening the rest of the private network.

    ``check(url)`` order: scheme and URL shape; an explicit origin passes; a
    literal non-public IP is PRIVATE_ADDRESS (no DNS); an origin outside the
    list is ORIGIN_NOT_ALLOWED; an allowed host name whose addresses are not
    all public is PRIVATE_ADDRESS. ``vet()`` resolves every allowed origin once
    and returns the addresses to pin it to (see the Playwright driver).
    """

    def __init__(
        self, allowed: Iterable[Origin] = (), *, explicit: Iterable[Origin] = (), resolve: Resolver | None = None
    ) -> None:
        self.explicit = frozenset(explicit)
        self.allowed = frozenset(allowed) | self.explicit
        self._resolve = resolve

    @classmethod
    def from_urls(cls, base_url: str = "", allow: Iterable[str] = (), *, resolve: Resolver | None = None) -> OriginPolicy:
        """The session default: ``base_url``'s origin (public only) plus each ``allow`` origin (explicit).

        Raises ``TargetRefused`` for a base URL or allowed origin that is not http(s).
        """
        explicit = {parse_origin(item) for item in allow}
        allowed = {parse_origin(base_url)} if base_url else set()
        return cls(allowed, explicit=explicit, resolve=resolve)

    def permits_origin(self, origin: Origin) -> bool:
        """Is ``origin`` on the list at all (the driver's per-request test; addresses are pinned at launch)."""
        return origin in self.allowed

    def check(self, url: str, *, resolve_names: bool = True) -> Origin:
        """Return the URL's origin, or raise ``TargetRefused`` (see the class docstring for the order).

        ``resolve_names=False`` skips the last step, for a browser whose
        allowed host names are already pinned to vetted addresses (``vet``).
        """
        origin = parse_origin(url)
        if origin in self.explicit:
            return origin
        literal = origin.literal_ip
        if literal is not None and not is_public_address(str(literal)):
            raise TargetRefused(
                f"{url!r} is the non-public address {literal}; only an origin allowed explicitly may be private "
                f"(--allow-origin {origin})",
                code=TargetCode.PRIVATE_ADDRESS,
                url=url,
                address=str(literal),
            )
        if origin not in self.allowed:
            raise TargetRefused(
                f"origin {origin} is not allowed in this session (allowed: {self.describe()}; --allow-origin {origin} adds it)",
                code=TargetCode.ORIGIN_NOT_ALLOWED,
                url=url,
            )
        if resolve_names:
            public_addresses(origin, url=url, resolve=self._resolve)
        return origin

    def vet(self) -> dict[Origin, list[str]]:
        """Every allowed origin with the addresses it may be reached at (resolved once, to pin them).

        An explicit origin's host is resolved as it is; any other must resolve
        to public addresses only. Raises ``TargetRefused`` (PRIVATE_ADDRESS,
        UNRESOLVABLE_HOST) before any browser starts.
        """
        vetted: dict[Origin, list[str]] = {}
        for origin in sorted(self.allowed):
            if origin not in self.explicit:
                vetted[origin] = public_addresses(origin, url=str(origin), resolve=self._resolve)
                continue
            literal = origin.literal_ip
            if literal is not None:
                vetted[origin] = [str(literal)]
                continue
            try:
                addresses = (self._resolve or system_resolve)(origin.host, origin.port)
            except (OSError, UnicodeError) as exc:
                raise TargetRefused(
                    f"cannot resolve host {origin.host!r}: {exc}", code=TargetCode.UNRESOLVABLE_HOST, url=str(origin)
                ) from None
            if not addresses:
                raise TargetRefused(
                    f"host {origin.host!r} resolves to no address", code=TargetCode.UNRESOLVABLE_HOST, url=str(origin)
                )
            vetted[origin] = addresses
        return vetted

    def describe(self) -> str:
        return ", ".join(str(o) for o in sorted(self.allowed)) or "none"
