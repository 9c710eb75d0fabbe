"""One HTTP GET of a byte range of a hub file (model-delivery spec §4.5 step 3).

``{endpoint}/{repository}/resolve/{commit}/{path}``, redirects followed. The credential goes only
to the endpoint's own origin: it is dropped for good on the first redirect to another origin or
from ``https`` to ``http``. Requests go through ``spec.hub``'s proxy unless the host is on the
no-proxy list, and TLS trusts the CA bundle besides the system's. The socket timeout is the stall
limit: a read that receives nothing for that long fails, and the caller retries from its last byte.

Errors never carry a URL, a header or a repository name: the plugin's messages and logs name no
tenant (spec §7 item 15); the caller adds the manifest path of the file.
"""

from __future__ import annotations

import http.client
import re
import ssl
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urljoin, urlsplit

from api import delivery as d

REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class FetchError(Exception):
    """A failed request. ``message`` is tenant-free (it may reach ``NodeModelStore``); ``detail``
    adds what the plugin's log may say. ``retryable``: worth another try from the last byte."""

    def __init__(self, reason: str, message: str, *, retryable: bool = False, detail: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retryable = retryable
        self.detail = detail


class Origin(Protocol):
    """How a source is reached: the hub's connection (``modelhub.connection.HubConnection``) or a
    peer's (``nodeplugins.modelmanager.peers.PeerConnection``)."""

    @property
    def base(self) -> str: ...

    @property
    def ssl_context(self) -> ssl.SSLContext: ...

    def proxy_for(self, url: str) -> str | None: ...


@dataclass(frozen=True)
class Source:
    """Where one file comes from, and the credential of the artifact that asked for it."""

    connection: Origin
    url: str
    token: str | None = None

    def __repr__(self) -> str:  # never the token
        return f"Source({urlsplit(self.url).path})"


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def _connect(url: str, connection: Origin, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection for ``url`` and the request target to send on it."""
    scheme, host, port = _origin(url)
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    proxy = connection.proxy_for(url)
    if proxy is None:
        if scheme == "https":  # the TLS context (the CA bundle loaded) only where TLS is spoken
            context = connection.ssl_context
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=context), target
        return http.client.HTTPConnection(host, port, timeout=timeout), target
    proxy_parts = urlsplit(proxy)
    proxy_port = proxy_parts.port or (443 if proxy_parts.scheme == "https" else 80)
    if scheme == "https":
        if proxy_parts.scheme == "https":
            raise FetchError(
                d.INVALID_REQUEST,
                "an https:// proxy in front of an https:// hub is not supported; use an http:// proxy URL",
            )
        tunnel = http.client.HTTPSConnection(
            proxy_parts.hostname or "", proxy_port, timeout=timeout, context=connection.ssl_context
        )
        tunnel.set_tunnel(host, port)
        return tunnel, target
    if proxy_parts.scheme == "https":
        plain: http.client.HTTPConnection = http.client.HTTPSConnection(
            proxy_parts.hostname or "", proxy_port, timeout=timeout, context=connection.ssl_context
        )
    else:
        plain = http.client.HTTPConnection(proxy_parts.hostname or "", proxy_port, timeout=timeout)
    return plain, f"{scheme}://{parts.netloc}{target}"


@dataclass(frozen=True)
class Landing:
    """Where a source's redirects led (a signed CDN URL, say), and whether the credential still
    goes there: the next range of the same file starts here instead of asking the hub again. Kept
    in memory for one file's download only; never logged."""

    url: str = field(repr=False)
    credential: bool


class Body:
    """An open response body of ``length`` bytes starting at file offset ``start``; ``landing`` is
    where redirects led, when they did."""

    def __init__(
        self,
        conn: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
        start: int,
        length: int,
        landing: Landing | None = None,
    ):
        self._conn = conn
        self.response = response
        self.start = start
        self.length = length
        self.landing = landing

    def readinto(self, view: memoryview) -> int:
        """Bytes read into ``view``; 0 at the end (early when the server cut the body short)."""
        try:
            return self.response.readinto(view)
        except http.client.IncompleteRead as error:
            return len(error.partial)
        except (TimeoutError, OSError, http.client.HTTPException) as error:
            raise FetchError(
                d.SOURCE_UNAVAILABLE,
                "the download stalled or broke off",
                retryable=True,
                detail=type(error).__name__,
            ) from None

    def close(self) -> None:
        self.response.close()
        self._conn.close()

    def __enter__(self) -> Body:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _status_error(status: int) -> FetchError:
    if status in (401, 403, 404):
        return FetchError(d.ACCESS_DENIED, f"the hub refused the file (HTTP {status})")
    if status == 416:
        return FetchError(d.INTEGRITY_MISMATCH, "the hub holds fewer bytes than the manifest lists")
    retry = status == 429 or status >= 500 or status == 408
    return FetchError(d.SOURCE_UNAVAILABLE, f"the hub answered HTTP {status}", retryable=retry)


def open_range(
    source: Source,
    start: int,
    end: int,
    size: int,
    *,
    timeout: float,
    whole: bool = False,
    landing: Landing | None = None,
) -> Body:
    """GET bytes ``[start, end)`` of a file of ``size`` bytes; the returned body is exactly that span.
    ``whole``: GET the whole body, whatever its length (a listing whose size is not known).
    ``landing``: start where an earlier request's redirects led (its credential rule with it)."""
    url = source.url if landing is None else landing.url
    home = _origin(source.connection.base)
    send_credential = source.token is not None and (landing is None or landing.credential)
    redirected = landing is not None
    for _ in range(MAX_REDIRECTS + 1):
        headers = {"User-Agent": "gpustack-model-manager", "Accept-Encoding": "identity"}
        if not whole and not (start == 0 and end == size):
            headers["Range"] = f"bytes={start}-{end - 1}"
        if send_credential and _origin(url) == home:
            headers["Authorization"] = f"Bearer {source.token}"
        conn, target = _connect(url, source.connection, timeout)
        try:
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
        except (TimeoutError, OSError, http.client.HTTPException) as error:
            conn.close()
            raise FetchError(
                d.SOURCE_UNAVAILABLE, "the hub is unreachable", retryable=True, detail=type(error).__name__
            ) from None
        if response.status in REDIRECTS:
            location = response.getheader("Location") or ""
            response.read()
            conn.close()
            following = urljoin(url, location)
            if urlsplit(following).scheme not in ("http", "https"):
                raise FetchError(d.SOURCE_UNAVAILABLE, "the hub redirected to a non-HTTP location")
            if _origin(following) != _origin(url) or (
                urlsplit(url).scheme == "https" and urlsplit(following).scheme == "http"
            ):
                send_credential = False
            url = following
            redirected = True
            continue
        landed = Landing(url, send_credential) if redirected else None
        if whole and response.status == 200:
            return Body(conn, response, 0, -1, landed)
        if response.status in (200, 206):
            return _checked_body(conn, response, start, end, size, landed)
        response.read()
        conn.close()
        raise _status_error(response.status)
    raise FetchError(d.SOURCE_UNAVAILABLE, "the hub redirected too many times")


def _checked_body(
    conn: http.client.HTTPConnection,
    response: http.client.HTTPResponse,
    start: int,
    end: int,
    size: int,
    landing: Landing | None = None,
) -> Body:
    def refuse(reason: str, message: str, retryable: bool = False) -> FetchError:
        response.close()
        conn.close()
        return FetchError(reason, message, retryable=retryable)

    length = response.getheader("Content-Length")
    if response.status == 206:
        match = _CONTENT_RANGE.match(response.getheader("Content-Range") or "")
        if not match or int(match[1]) != start or int(match[2]) != end - 1:
            raise refuse(d.SOURCE_UNAVAILABLE, "the hub answered another byte range than asked", True)
        if match[3] != "*" and int(match[3]) != size:
            raise refuse(d.INTEGRITY_MISMATCH, "the hub's file size differs from the manifest's")
    elif start != 0:
        raise refuse(d.SOURCE_UNAVAILABLE, "the hub ignored a byte range request")
    elif length is not None and int(length) != size:
        raise refuse(d.INTEGRITY_MISMATCH, "the hub's file size differs from the manifest's")
    return Body(conn, response, start, end - start, landing)
