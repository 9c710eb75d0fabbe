"""The HTTPS admission server: one route per registered webhook, plus health and metrics.

Each webhook route is a bare ASGI endpoint (no Request/Response objects on the hot path): it checks
method, content type and size, decodes the AdmissionReview with orjson, runs the decision, and
answers.  Malformed input gets a 4xx saying what was wrong; an exception inside a decision is logged
and answered as a denial that says it was an internal error, never as a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from certs import tls
from kube import debug
from kube.metrics_auth import MetricsAuthorizer
from webhooks import connections, registry
from webhooks.connections import JSON_HEADERS, TEXT_HEADERS, Answer
from webhooks.decision import ALLOWED, Decision, internal_error, retry_later
from webhooks.lookups import LookupFailed, Lookups
from webhooks.metrics import WebhookMetrics
from webhooks.review import AdmissionRequest, ReviewError, decode, encode

log = logging.getLogger("webhooks.server")

DEFAULT_MAX_BODY = 8 * 1024 * 1024  # an AdmissionReview carries object and oldObject: ~2 × 1.5 MiB
NULL_PATH = "/null"


async def _send_answer(send: Any, answer: Answer) -> None:
    status, headers, body = answer
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _head(headers: Iterable[tuple[bytes, bytes]]) -> tuple[bytes, int | None]:
    """The content type and declared length of a request (-1: none declared; None: not a number)."""
    content_type = b""
    length: int | None = -1
    for name, value in headers:
        if name == b"content-type":
            content_type = value
        elif name == b"content-length":
            length = int(value) if value.isdigit() else None
    return content_type, length


def _json(content_type: bytes) -> bool:
    return content_type == b"application/json" or (
        content_type.split(b";", 1)[0].strip().lower() == b"application/json"
    )


class AdmissionEndpoint:
    """ASGI endpoint serving one webhook (or the null endpoint when ``webhook`` is None)."""

    def __init__(
        self, webhook: registry.Webhook | None, lookups: Lookups, max_body: int, log_denials: bool = False
    ) -> None:
        self.webhook = webhook
        self.lookups = lookups
        self.max_body = max_body
        self.log_denials = log_denials
        self.name = webhook.name if webhook else "null"
        self.metrics = WebhookMetrics(self.name)

    def _refusal(self, status: int, message: str) -> Answer:
        self.metrics.count("bad_request", status)
        log.info("bad admission request", extra={"webhook": self.name, "status": status, "reason": message})
        return status, TEXT_HEADERS, message.encode() + b"\n"

    def _head_refusal(self, method: str, headers: Iterable[tuple[bytes, bytes]]) -> Answer | None:
        """The refusal of a request its method and headers already rule out, before its body."""
        if method != "POST":
            return self._refusal(405, f"method {method} not allowed: POST an AdmissionReview")
        content_type, length = _head(headers)
        if length is None:
            return self._refusal(400, "content-length is not a number")
        if not _json(content_type):
            shown = content_type.decode("latin-1") or "none"
            return self._refusal(415, f"content type must be application/json, got {shown}")
        if length > self.max_body:
            return self._refusal(413, f"body of {length} bytes exceeds the {self.max_body}-byte limit")
        return None

    def takes_whole(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        """Whether a POST with these headers may be answered from its whole body by :meth:`answer`
        (the connection's fast lane, :mod:`webhooks.connections`): a JSON body of a declared length
        within the limit.  Anything else takes the ASGI way, which refuses what it must."""
        content_type, length = _head(headers)
        return length is not None and 0 <= length <= self.max_body and _json(content_type)

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        refused = self._head_refusal(scope["method"], scope["headers"])
        if refused is not None:
            await _send_answer(send, refused)
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _send_answer(send, self._refusal(413, f"body exceeds the {self.max_body}-byte limit"))
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _check_kind(self, request: AdmissionRequest) -> str | None:
        webhook = self.webhook
        if webhook is None:
            return None
        if request.kind != webhook.kind or request.group != webhook.group:
            group = request.group or "core"
            return f"this webhook admits {webhook.kind} objects, not {group}/{request.kind}"
        obj = request.object
        if obj is not None and "kind" in obj and obj["kind"] != webhook.kind:
            return f"request.object is a {obj['kind']!r}, but request.kind says {request.kind!r}"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await self._read_body(scope, receive, send)
        if body is not None:
            await _send_answer(send, await self.answer(body))

    async def answer(self, body: bytes) -> Answer:
        """The answer to a whole request body: the AdmissionReview, or a 4xx saying what is wrong."""
        started = time.perf_counter()
        try:
            request = decode(body)
        except ReviewError as error:
            return self._refusal(error.status, error.message)
        wrong = self._check_kind(request)
        if wrong:
            return self._refusal(400, wrong)
        decision = await self.decide(request)
        payload = encode(request.uid, decision)
        self.metrics.latency.observe(time.perf_counter() - started)
        outcome = "allowed" if decision.allowed else ("error" if decision.code >= 500 else "denied")
        self.metrics.count(outcome, decision.code)
        return 200, JSON_HEADERS, payload

    async def decide(self, request: AdmissionRequest) -> Decision:
        webhook = self.webhook
        if webhook is None:
            return ALLOWED
        try:
            decision = await webhook(request, self.lookups)
        except LookupFailed as error:
            log.warning(
                "lookup failed", extra={"webhook": self.name, "uid": request.uid, "error": str(error)}
            )
            return retry_later(f"{self.name} could not read what it decides on: {error}")
        except Exception as error:  # a bug must not become a 500 the apiserver reads as an outage
            log.exception(
                "decision failed",
                extra={
                    "webhook": self.name,
                    "uid": request.uid,
                    "namespace": request.namespace,
                    "object": request.display_name,
                },
            )
            return internal_error(
                f"{type(error).__name__} in {self.name}; the worker logged uid {request.uid}"
            )
        if not decision.allowed and (self.log_denials or decision.code >= 500):
            # Retryable denials (something not observed yet) are always worth a line; ordinary
            # refusals only on request: a JSON line costs the event loop more than the decision
            # (measured ~55 µs a denial on the live server), and the apiserver already returns the
            # message to the client and counts it in its own metrics, as do ours.
            (log.warning if decision.code >= 500 else log.info)(
                "denied",
                extra={
                    "webhook": self.name,
                    "uid": request.uid,
                    "namespace": request.namespace,
                    "object": request.display_name,
                    "code": decision.code,
                    "denial": decision.message,
                },
            )
        return decision


class AdmissionPaths:
    """The worker's ASGI app: a request for an admission path goes straight to its endpoint by one
    dict lookup, not through the router's scan of every route's pattern (the md validate route is
    the tenth, ``/null`` past twenty) nor Starlette's middleware; any other path, and any request
    under a ``root_path``, goes to ``app``.  An exception escaping an endpoint (each answers its own
    errors) is uvicorn's to log and answer ``500``.  ``whole_body`` offers the endpoints to the
    connection's fast lane (:class:`webhooks.connections.GuardedHttpToolsProtocol`), which answers a
    well-formed review without the ASGI messages."""

    def __init__(self, app: ASGIApp, endpoints: dict[str, AdmissionEndpoint]) -> None:
        self.app = app
        self.whole_body: dict[bytes, AdmissionEndpoint] = {
            path.encode(): endpoint for path, endpoint in endpoints.items()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            endpoint = self.whole_body.get(scope.get("raw_path") or scope["path"].encode())
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(
    lookups: Lookups,
    *,
    include_null: bool = False,
    max_body: int = DEFAULT_MAX_BODY,
    log_denials: bool = False,
    webhooks: tuple[registry.Webhook, ...] = registry.WEBHOOKS,
    readiness: Callable[[], tuple[bool, list[str]]] | None = None,
    metrics_auth: MetricsAuthorizer | None = None,
) -> AdmissionPaths:
    """The ASGI app: ``/<webhook path>`` for each webhook, ``/healthz``, ``/livez``, ``/readyz``,
    ``/metrics`` and the loopback-only ``/debug/*`` endpoints.  ``readiness`` adds checks to
    ``/readyz`` (the worker's start-up steps): ready only when every one passes, and the body lists
    each, ``[+]`` or ``[-]`` with why.  ``metrics_auth`` lets only callers the apiserver
    authenticates and authorizes for ``GET /metrics`` scrape it (``kube.metrics_auth``)."""
    admission: dict[str, AdmissionEndpoint] = {
        webhook.path: AdmissionEndpoint(webhook, lookups, max_body, log_denials) for webhook in webhooks
    }
    if include_null:
        admission[NULL_PATH] = AdmissionEndpoint(None, lookups, max_body)
    routes: list[Route] = [Route(path, endpoint, methods=None) for path, endpoint in admission.items()]

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(_: Request) -> Response:
        synced = lookups.synced()
        lines = ["[+]lookups synced" if synced else "[-]lookups not synced yet"]
        ready = synced
        if readiness is not None:
            ok, extra = readiness()
            ready, lines = ready and ok, lines + extra
        lines.append("readyz check passed" if ready else "readyz check failed")
        return PlainTextResponse("\n".join(lines) + "\n", status_code=200 if ready else 503)

    async def debug_endpoint(request: Request) -> Response:
        peer = request.client.host if request.client else None
        status, text = debug.answer(request.method, request.url.path, peer, await request.body())
        return PlainTextResponse(text, status_code=status)

    async def metrics(request: Request) -> Response:
        if metrics_auth is not None:  # --metrics-auth: TokenReview + SubjectAccessReview, cached
            header = request.headers.get("authorization")
            verdict = metrics_auth.cached(header)
            if verdict is None:
                verdict = await run_in_threadpool(metrics_auth.check, header)
            if not verdict.allowed:
                return PlainTextResponse(verdict.message + "\n", status_code=verdict.status)
        # Off the event loop: the worker's state gauges walk the informer caches.
        return Response(await run_in_threadpool(generate_latest), media_type=CONTENT_TYPE_LATEST)

    routes += [
        Route("/healthz", healthz),
        Route("/livez", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        *(Route(path, debug_endpoint, methods=["GET", "PUT", "POST"]) for path in debug.PATHS),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        tasks = []
        start = getattr(lookups, "start", None)
        if start is not None:
            await start()
        if tls.ACTIVE is not None:
            tasks.append(asyncio.create_task(tls.ACTIVE.watch()))
            if connections.ACTIVE is not None:  # before uvicorn creates the listener
                connections.limit_tls_handshakes(asyncio.get_running_loop(), connections.ACTIVE)
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            stop = getattr(lookups, "stop", None)
            if stop is not None:
                await stop()

    return AdmissionPaths(Starlette(routes=routes, lifespan=lifespan), admission)


class _TLSConfig(uvicorn.Config):
    """uvicorn's Config with a reloading context in place of the one it would build.

    ``load`` runs in every worker process (the context cannot be pickled across), registers the
    context as ``certs.tls.ACTIVE``, and the app's lifespan watches it on that worker's loop."""

    connection_limits: connections.ConnectionLimits = connections.DEFAULT_LIMITS

    def load(self) -> None:
        super().load()
        connections.ACTIVE = self.connection_limits
        if self.ssl_certfile and self.ssl_keyfile:
            tls.ACTIVE = tls.ReloadingContext(str(self.ssl_certfile), str(self.ssl_keyfile))
            self.ssl = tls.ACTIVE.context


def uvicorn_config(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    cert_file: str | None = None,
    key_file: str | None = None,
    workers: int = 1,
    log_level: str = "warning",
    limits: connections.ConnectionLimits = connections.DEFAULT_LIMITS,
) -> uvicorn.Config:
    """The uvicorn configuration the worker serves ``app`` with: our protocol, no access log, no
    proxy-header rewriting (the apiserver calls directly), no server or date header."""
    kwargs: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": log_level,
        "access_log": False,
        "lifespan": "on",
        "timeout_keep_alive": 30,
        "server_header": False,
        "proxy_headers": False,
        "date_header": False,
        "log_config": None,
        "http": connections.GuardedHttpToolsProtocol,
    }
    if cert_file and key_file:
        # Paths make uvicorn treat the server as TLS; load() then swaps in the reloading context.
        kwargs["ssl_certfile"] = cert_file
        kwargs["ssl_keyfile"] = key_file
    if workers > 1:
        kwargs.update(workers=workers, factory=True)
    built = _TLSConfig(app, **kwargs)
    built.connection_limits = limits
    return built


def serve(
    app: Any,
    *,
    host: str,
    port: int,
    cert_file: str | None,
    key_file: str | None,
    workers: int = 1,
    log_level: str = "warning",
    limits: connections.ConnectionLimits = connections.DEFAULT_LIMITS,
) -> None:
    """Run uvicorn in this process until it is stopped.  ``workers > 1`` needs ``app`` as an
    import string of an app factory (``module:function``).  Every connection is bounded by
    ``limits`` (:mod:`webhooks.connections`)."""
    soft, hard = connections.raise_descriptor_limit()
    config = uvicorn_config(
        app,
        host=host,
        port=port,
        cert_file=cert_file,
        key_file=key_file,
        workers=workers,
        log_level=log_level,
        limits=limits,
    )
    log.info(
        "connection limits",
        extra={"descriptors": soft, "hard": hard, "max_connections": limits.connection_cap()},
    )
    if workers > 1:
        sock = config.bind_socket()
        uvicorn.supervisors.Multiprocess(config, sockets=[sock]).run()
    else:
        uvicorn.Server(config).run()
