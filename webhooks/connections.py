"""Bounded resources per connection, so that no client can make the webhook server grow or starve
the apiserver's own requests.

- **Headers**: at most ``max_header_bytes`` of request line and headers and at most
  ``max_headers`` header fields per request; beyond either the request is answered ``431`` and the
  connection closed, before the rest is buffered (a 128 MiB header costs one read, not 128 MiB).
- **Deadline**: a request must arrive whole — TLS handshake, headers and body — within
  ``request_deadline`` seconds of the connection opening (or of the request's first byte on a
  kept-alive connection); a connection idle before its first request is closed at the same
  deadline.  Once a request is whole, the handler's own time is bounded by the webhook timeouts.
- **Connections**: at most ``max_connections`` established connections (by default a margin below
  the process's descriptor limit, which :func:`raise_descriptor_limit` first raises to the hard
  limit).  A new connection beyond the cap evicts the oldest one that is not serving a request,
  preferring one that never completed a request; when every connection is busy the new one gets
  ``503`` and is closed.  Connections still in their TLS handshake are not established yet; the
  handshake deadline bounds them.

The limits travel on uvicorn's config (:attr:`uvicorn.Config.connection_limits`, set by
``webhooks.server.serve``) so every worker process applies the same ones.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("webhooks.connections")

DESCRIPTOR_RESERVE = 64  # descriptors kept free for files, the apiserver client and new accepts


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    request_deadline: float = 10.0
    max_connections: int = 0  # 0: derived from the descriptor limit

    def connection_cap(self) -> int:
        if self.max_connections > 0:
            return self.max_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return 16384
        return max(16, min(16384, soft - DESCRIPTOR_RESERVE))


DEFAULT_LIMITS = ConnectionLimits()
# The limits this process serves with, set when the server's config loads (read by the lifespan).
ACTIVE: ConnectionLimits | None = None


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise the soft descriptor limit to the hard one (as Go's runtime does); returns both."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as error:
            log.warning(
                "descriptor limit not raised", extra={"soft": soft, "hard": hard, "error": str(error)}
            )
    return soft, hard


def limit_tls_handshakes(loop: asyncio.AbstractEventLoop, seconds: float) -> None:
    """Make TLS servers the loop creates from now on drop a handshake unfinished after ``seconds``.

    uvicorn creates its listener without ``ssl_handshake_timeout`` (asyncio's default is 60 s);
    the app's lifespan runs before the listener exists, so it calls this on the serving loop.
    """
    if getattr(loop, "_gpustack_handshake_limit", None) is not None:
        return
    create_server = loop.create_server

    async def bounded_create_server(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", seconds)
        return await create_server(*args, **kwargs)

    loop.create_server = bounded_create_server  # type: ignore[method-assign]
    loop._gpustack_handshake_limit = seconds  # type: ignore[attr-defined]


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request that breaks a limit."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of :class:`ConnectionLimits`."""

    def __init__(self, config: Any, server_state: Any, app_state: Any, _loop: Any = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits: ConnectionLimits = getattr(config, "connection_limits", DEFAULT_LIMITS)
        self._header_bytes = 0
        self._header_count = 0
        self._in_headers = True  # bytes now arriving belong to a request line or headers
        self._receiving = True  # a request (or the wait for the first one) is not whole yet
        self._completed = 0  # requests received whole on this connection
        self._opened = self.loop.time()
        self._deadline: asyncio.TimerHandle | None = self.loop.call_later(
            self.limits.request_deadline, self._deadline_passed
        )

    # Connection cap ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) <= self.limits.connection_cap():
            return
        victim = self._eviction_candidate()
        if victim is None:
            log.warning("connection refused: every connection is busy", extra={"open": len(self.connections)})
            self._refuse(503, "too many connections; retry")
        else:
            victim.transport.abort()  # frees the descriptor now; a TLS close would wait for the peer

    def _eviction_candidate(self) -> GuardedHttpToolsProtocol | None:
        idle = [
            c
            for c in self.connections
            if c is not self
            and isinstance(c, GuardedHttpToolsProtocol)
            and not c.transport.is_closing()
            and (c.cycle is None or c.cycle.response_complete)
        ]
        if not idle:
            return None
        return min(idle, key=lambda c: (c._completed > 0, c._opened))

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    # Deadline -------------------------------------------------------------------------------------

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _deadline_passed(self) -> None:
        self._deadline = None
        transport = getattr(self, "transport", None)
        if transport is None or transport.is_closing() or not self._receiving:
            return  # still in the TLS handshake (its own deadline closes it), or already whole
        log.info(
            "connection closed: no whole request within the deadline", extra={"client": str(self.client)}
        )
        answering = self.cycle is not None and self.cycle.response_started
        if (self._header_count or self._header_bytes) and not answering:
            self._refuse(408, "the request did not arrive whole in time")
        else:
            transport.abort()

    # Header limits --------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._in_headers:
            self._header_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            if isinstance(error.__context__, _Refused):
                self._refuse(error.__context__.status, error.__context__.message)
                return
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            self.send_400_response("Protocol upgrades are not served here.")
            return
        if self._in_headers and self._header_bytes > self.limits.max_header_bytes:
            self._refuse(431, f"request headers exceed {self.limits.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True
        self._receiving = True
        self._header_count = 0
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.limits.request_deadline, self._deadline_passed)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            raise _Refused(431, f"more than {self.limits.max_headers} request header fields")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._header_bytes = 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._receiving = False
        self._completed += 1
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._in_headers = True  # what arrives next is the next request's head
        super().on_response_complete()

    def _refuse(self, status: int, message: str) -> None:
        body = message.encode() + b"\n"
        head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Bad Request"))
        self.transport.write(
            head
            + b"content-type: text/plain; charset=utf-8\r\n"
            + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            + body
        )
        transport = self.transport
        transport.close()
        # A TLS close waits for the peer's close_notify while discarding what it still sends; a
        # peer that keeps sending is cut off instead of holding the connection for that wait.
        self.loop.call_later(1.0, transport.abort)
