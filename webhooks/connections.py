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
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

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

    def write_now(self, data: bytes) -> None:
        """Write a whole response at once, whatever is kept for the responses after it."""
        self._transport.write(data)

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


Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers (no content-length), body


class WholeBodyEndpoint(Protocol):
    """An endpoint the fast lane may answer a request for (``webhooks.server.AdmissionEndpoint``)."""

    def takes_whole(self, headers: Iterable[tuple[bytes, bytes]]) -> bool: ...

    def answer(self, body: bytes) -> Coroutine[Any, Any, Answer]: ...


class _Answering:
    """Stands in for uvicorn's ``RequestResponseCycle`` while a fast-lane answer waits (its
    decision reads through to the apiserver): a pipelined request queues behind it as behind any
    cycle, a shutdown ends the connection after it, and eviction and the deadline see it busy."""

    __slots__ = ("disconnected", "keep_alive", "response_complete", "response_started")

    def __init__(self, keep_alive: bool) -> None:
        self.keep_alive = keep_alive
        self.disconnected = False
        self.response_started = False
        self.response_complete = False

    @property
    def message_event(self) -> _Answering:
        return self  # uvicorn sets the cycle's event when the connection is lost

    def set(self) -> None:
        pass


async def _resume(coro: Coroutine[Any, Any, Answer], waiting: Any) -> Answer:
    """Run the rest of a coroutine whose first step ran outside any task and suspended on
    ``waiting`` (what it yielded: the future it awaits, or ``None`` for a bare yield)."""
    try:
        while True:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                await asyncio.wait((waiting,))  # its outcome is the coroutine's to read
            waiting = coro.send(None)
    except StopIteration as done:
        return done.value
    except asyncio.CancelledError:
        coro.close()
        raise


def _head(status: int, headers: list[tuple[bytes, bytes]], length: int, keep_alive: bool) -> bytes:
    return b"".join(
        [
            STATUS_LINE[status],
            *(name + b": " + value + b"\r\n" for name, value in headers),
            b"content-length: %d\r\n" % length,
            b"" if keep_alive else b"connection: close\r\n",
            b"\r\n",
        ]
    )


JSON_HEADERS = [(b"content-type", b"application/json")]
TEXT_HEADERS = [(b"content-type", b"text/plain; charset=utf-8")]
_JSON_200 = _head(200, JSON_HEADERS, 0, True)[: -len(b"0\r\n\r\n")]  # ends "content-length: "
_FAILED: Answer = (500, TEXT_HEADERS, b"Internal Server Error")


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of :class:`ConnectionLimits`, writing each
    response at once (:class:`OneWriteTransport`).

    **The fast lane.** A POST to one of the app's ``whole_body`` endpoints (the admission paths)
    with a JSON body of declared length is answered without ASGI: its body is collected as it is
    parsed, and once whole the endpoint's :meth:`~WholeBodyEndpoint.answer` is run at once, in the
    parser's callback, and written as one.  That skips what every review otherwise costs in uvicorn
    (a task, a cycle, the scope and the message dictionaries) and changes nothing it answers.  An
    answer whose decision suspends (a read through to the apiserver) finishes in a task, with
    :class:`_Answering` standing in for the cycle until it is written.  Anything else (another
    method or content type, a chunked or oversized body, ``Expect: 100-continue``, a request
    pipelined behind another, a ``root_path``) takes uvicorn's way, which refuses what it must."""

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
        whole_body = getattr(self.app, "whole_body", None)
        self._whole_body: dict[bytes, WholeBodyEndpoint] = (
            whole_body if isinstance(whole_body, dict) and not self.root_path else {}
        )
        self._fast: WholeBodyEndpoint | None = None  # the endpoint of the request being collected
        self._fast_body: list[bytes] = []
        self._fast_keep_alive = True

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
        self._fast = self._fast_endpoint()
        if self._fast is None:
            super().on_headers_complete()
        else:
            self._fast_body = []
            self._fast_keep_alive = (
                self.parser.should_keep_alive() and self.parser.get_http_version() != "1.0"
            )

    def _fast_endpoint(self) -> WholeBodyEndpoint | None:
        if not self._whole_body or self.expect_100_continue or self.pipeline:
            return None
        if self.cycle is not None and not self.cycle.response_complete:
            return None  # pipelined behind a request still being answered: queued the usual way
        if self.parser.get_method() != b"POST" or self.parser.should_upgrade():
            return None
        endpoint = self._whole_body.get(self.url.partition(b"?")[0])
        if endpoint is None or not endpoint.takes_whole(self.headers):
            return None
        return endpoint

    def on_body(self, body: bytes) -> None:
        if self._fast is not None:
            self._fast_body.append(body)  # within the declared length the endpoint accepted
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._receiving = False
        self._completed += 1
        self._disarm()
        endpoint = self._fast
        if endpoint is not None:
            self._fast = None
            chunks, self._fast_body = self._fast_body, []
            self._answer_whole(endpoint, chunks[0] if len(chunks) == 1 else b"".join(chunks))
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._writes.answering()  # the response, when it comes, goes out in one write
        super().on_message_complete()

    # The fast lane ---------------------------------------------------------------------------------

    def _answer_whole(self, endpoint: WholeBodyEndpoint, body: bytes) -> None:
        keep_alive = self._fast_keep_alive
        coro = endpoint.answer(body)
        try:
            waiting = coro.send(None)  # the decision, run here; it almost never waits
        except StopIteration as done:
            self._write_answer(done.value, keep_alive)
            return
        except Exception:
            log.exception("answering a review failed")
            self._write_answer(_FAILED, False)
            return
        answering = _Answering(keep_alive)
        self.cycle = answering  # type: ignore[assignment]
        task = self.loop.create_task(_resume(coro, waiting))
        self.tasks.add(task)  # type: ignore[arg-type]
        task.add_done_callback(lambda done: self._answered_later(answering, done))

    def _answered_later(self, answering: _Answering, task: asyncio.Task[Answer]) -> None:
        self.tasks.discard(task)
        answering.response_complete = True
        if answering.disconnected or task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("answering a review failed", exc_info=error)
            self._write_answer(_FAILED, False)
            return
        self._write_answer(task.result(), answering.keep_alive)

    def _write_answer(self, answer: Answer, keep_alive: bool) -> None:
        status, headers, body = answer
        extra = self.server_state.default_headers  # uvicorn's server and date headers, when on
        if status == 200 and keep_alive and not extra and headers is JSON_HEADERS:
            head = _JSON_200 + b"%d\r\n\r\n" % len(body)
        else:
            head = _head(status, [*extra, *headers], len(body), keep_alive)
        self._writes.write_now(head + body)  # one write already; requests queued behind keep theirs
        if not keep_alive:
            self.transport.close()
        self._next_request()

    def on_response_complete(self) -> None:
        self._writes.flush()
        self._next_request()

    def _next_request(self) -> None:
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
