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
  ``503`` and is closed.
- **Handshakes**: a TLS listener accepts in its own loop (:class:`GuardedListener`) and counts a
  connection from its accept, not from the end of its handshake: a connection still in its
  handshake (a raw connect that never sends a ClientHello, say) holds a descriptor too.  When the
  handshakes in progress and the established connections reach the cap, the oldest handshake is cut
  off; a handshake unfinished after ``request_deadline`` is dropped by the TLS layer.

The limits travel on uvicorn's config (:attr:`uvicorn.Config.connection_limits`, set by
``webhooks.server.serve``) so every worker process applies the same ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
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


def limit_tls_handshakes(loop: asyncio.AbstractEventLoop, limits: ConnectionLimits) -> None:
    """Make TLS servers the loop creates from now on a :class:`GuardedListener`: handshakes are
    counted against the connection cap from their accept and dropped unfinished after
    ``limits.request_deadline``.

    uvicorn creates its listener itself, without ``ssl_handshake_timeout`` (asyncio's default is
    60 s) and counting a connection only once its handshake is done; the app's lifespan runs before
    the listener exists, so it calls this on the serving loop.
    """
    if getattr(loop, "_gpustack_handshake_limit", None) is not None:
        return
    create_server = loop.create_server

    async def guarded_create_server(protocol_factory: Any, *args: Any, **kwargs: Any) -> Any:
        context = kwargs.get("ssl")
        if context is None or args:
            return await create_server(protocol_factory, *args, **kwargs)
        return GuardedListener.open(
            loop,
            protocol_factory,
            context,
            limits,
            sock=kwargs.get("sock"),
            host=kwargs.get("host"),
            port=kwargs.get("port"),
            backlog=kwargs.get("backlog", 2048),
        )

    loop.create_server = guarded_create_server  # type: ignore[method-assign]
    loop._gpustack_handshake_limit = limits.request_deadline  # type: ignore[attr-defined]


# Connections of this process that finished their handshake and are not lost yet (counted by
# GuardedHttpToolsProtocol); with the handshakes a GuardedListener holds, what the cap bounds.
ESTABLISHED = 0
_RETRY_ACCEPT_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}


class GuardedListener:
    """A TLS listener that accepts in its own loop and hands each socket to the event loop's TLS
    (``connect_accepted_socket``), so that it knows every connection from its accept and can cut
    off the oldest unfinished handshake when the cap is reached.  It offers what uvicorn uses of
    an ``asyncio.Server``: ``sockets``, ``close()`` and ``wait_closed()``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol_factory: Any,
        context: Any,
        limits: ConnectionLimits,
        sock: socket.socket,
    ) -> None:
        self._loop = loop
        self._factory = protocol_factory
        self._context = context
        self._limits = limits
        self._sock = sock
        self._handshakes: dict[socket.socket, float] = {}  # accepted, handshake unfinished
        self._tasks: set[asyncio.Task[None]] = set()
        self._accepting = loop.create_task(self._accept())

    @classmethod
    def open(
        cls,
        loop: asyncio.AbstractEventLoop,
        protocol_factory: Any,
        context: Any,
        limits: ConnectionLimits,
        *,
        sock: socket.socket | None,
        host: str | None,
        port: int | None,
        backlog: int,
    ) -> GuardedListener:
        if sock is None:
            address = host or "0.0.0.0"
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.create_server((address, port or 0), family=family, backlog=backlog)
        else:
            # uvicorn's supervisor binds the socket it hands every worker process but leaves the
            # listen to asyncio's create_server, which this listener stands in for.
            sock.listen(backlog)
        sock.setblocking(False)
        return cls(loop, protocol_factory, context, limits, sock)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,)

    @property
    def handshakes(self) -> int:
        return len(self._handshakes)

    def close(self) -> None:
        self._accepting.cancel()
        for conn in list(self._handshakes):
            _cut(conn)
        self._sock.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._accepting
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self) -> None:
        while True:
            try:
                conn, _ = await self._loop.sock_accept(self._sock)
            except OSError as error:
                if error.errno not in _RETRY_ACCEPT_ERRNOS:
                    raise
                # Out of descriptors: free the oldest handshake and let the loop breathe.
                log.warning("accept failed; cutting off the oldest handshake", extra={"error": str(error)})
                self._cut_oldest()
                await asyncio.sleep(0.05)
                continue
            cap = self._limits.connection_cap()
            while self._handshakes and len(self._handshakes) + ESTABLISHED >= cap:
                self._cut_oldest()
            task = self._loop.create_task(self._handshake(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _cut_oldest(self) -> None:
        if self._handshakes:
            oldest = min(self._handshakes, key=self._handshakes.__getitem__)
            del self._handshakes[oldest]
            _cut(oldest)

    async def _handshake(self, conn: socket.socket) -> None:
        self._handshakes[conn] = self._loop.time()
        try:
            await self._loop.connect_accepted_socket(
                self._factory,
                conn,
                ssl=self._context,
                ssl_handshake_timeout=self._limits.request_deadline,
            )
        except (OSError, EOFError, TimeoutError) as error:
            log.debug("TLS handshake did not complete", extra={"error": str(error)})
            conn.close()
        finally:
            self._handshakes.pop(conn, None)


def _cut(conn: socket.socket) -> None:
    """End a connection whose transport owns the descriptor: the transport sees the end and closes
    it (closing the descriptor under a transport would let it act on a reused number)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request that breaks a limit."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class OneWriteTransport:
    """The connection's transport, with a response's writes sent as one.

    uvicorn writes a response in two calls, its head and then its body; over TLS each call is a
    record encrypted and sent on its own (two ``send`` calls of the socket for every review). While
    a request is whole and its response not complete (:meth:`answering` for each such request,
    :meth:`flush` as each response completes; pipelined requests are answered in order), writes
    are kept and then written together; any other write (``100 Continue``, a refusal of the
    connection) goes out at once, and a close sends what is kept first. Everything else is the
    transport's. Every endpoint of the worker answers whole; a streamed response would leave only
    once complete, so this protocol is not for a server that streams (the gateway's is uvicorn's)."""

    __slots__ = ("_kept", "_open", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._kept: list[bytes] = []
        self._open = 0  # requests received whole whose responses are not complete

    def answering(self) -> None:
        self._open += 1

    def flush(self) -> None:
        """A response is complete: what it wrote goes out as one write."""
        self._open = max(0, self._open - 1)
        kept = self._kept
        if kept:
            self._kept = []
            self._transport.write(kept[0] if len(kept) == 1 else b"".join(kept))

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._open:
            self._kept.append(bytes(data))
        else:
            self._transport.write(data)

    def close(self) -> None:
        self._open = 0
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._kept = []
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of :class:`ConnectionLimits`, writing each
    response at once (:class:`OneWriteTransport`)."""

    def __init__(self, config: Any, server_state: Any, app_state: Any, _loop: Any = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits: ConnectionLimits = getattr(config, "connection_limits", DEFAULT_LIMITS)
        self._header_bytes = 0
        self._header_count = 0
        self._in_headers = True  # bytes now arriving belong to a request line or headers
        self._receiving = True  # a request (or the wait for the first one) is not whole yet
        self._completed = 0  # requests received whole on this connection
        self._opened = self.loop.time()
        self._counted = False  # counted in ESTABLISHED (between connection_made and _lost)
        self._deadline: asyncio.TimerHandle | None = self.loop.call_later(
            self.limits.request_deadline, self._deadline_passed
        )

    # Connection cap ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        global ESTABLISHED
        ESTABLISHED += 1
        self._counted = True
        self._writes = OneWriteTransport(transport)
        super().connection_made(self._writes)  # type: ignore[arg-type]
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
        global ESTABLISHED
        if self._counted:
            self._counted = False
            ESTABLISHED -= 1
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
        if self.cycle is not None and not self.cycle.response_complete:
            self._writes.answering()  # the response, when it comes, goes out in one write
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._writes.flush()
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
