"""The gateway's HTTP API (Starlette): subscriptions, the collections, their watches, health.

All under ``/apis`` and JSON; no authentication (the trust boundary is the socket's permissions):

- ``POST /apis/workers?cluster=&token=&force=&gvk=…`` subscribes a cluster (a JSON body may carry
  ``clusters`` (one name), ``token``, ``force``, ``gvks``); 200 with an empty body, the cluster
  registering once its operator API answers.  ``DELETE /apis/workers?cluster=`` unsubscribes.
  ``GET /apis/workers`` (our addition) lists the subscribed clusters and their state.
- ``GET /apis/<collection>?cluster=…&namespace=&watch=&aggregated=`` for the seven collections of
  :data:`gateway.kinds.COLLECTIONS`: ``{"items": […]}``, or with ``watch=true`` newline-delimited
  ``{type, cluster, object}`` lines from now on (no snapshot: list first).  Clusters left out of an
  answer (not subscribed, not ready, not listed yet) are named in ``Warning`` headers.
- ``/metrics``, ``/readyz``, ``/livez``.

Every refusal is a 4xx whose message says what to send instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from gateway import metrics, views
from gateway.events import Bus, Subscription, overflow_status
from gateway.kinds import AGGREGATED, COLLECTIONS, GVKError, Kind, parse_gvk
from gateway.manager import Manager
from gateway.sources import SourceError, check_cluster_name

log = logging.getLogger("gateway.server")

MAX_BODY = 1 << 20
WATCH_BUFFER = 1024  # events a watcher may fall behind before it is closed
FINAL_SEND_TIMEOUT = 10.0
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _status(code: int, message: str) -> Response:
    reason = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 413: "RequestEntityTooLarge"}
    body = {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason.get(code, "InternalError" if code >= 500 else "BadRequest"),
        "message": message,
    }
    return Response(orjson.dumps(body), status_code=code, media_type="application/json")


def _flag(request: Request, name: str, body: dict[str, Any] | None = None) -> bool:
    raw = request.query_params.get(name)
    if raw is None and body is not None and name in body:
        if not isinstance(body[name], bool):
            raise BadRequest(f"body.{name} must be true or false, not {body[name]!r}")
        return bool(body[name])
    value = (raw or "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadRequest(f"{name}={raw!r} is not a boolean: send {name}=true or {name}=false")


def _clusters(request: Request) -> list[str]:
    names = [n for n in request.query_params.getlist("cluster") if n != ""]
    for name in names:
        try:
            check_cluster_name(name)
        except SourceError as error:
            raise BadRequest(error.message) from None
    return names


def _warn(response: Response, warnings: list[str]) -> Response:
    for text in warnings:
        safe = text.replace('"', "'").encode("latin-1", "replace").decode("latin-1")
        response.headers.append("Warning", f'299 - "{safe}"')
    return response


async def _body(request: Request) -> dict[str, Any] | None:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise BadRequest(
                f"the body exceeds {MAX_BODY} bytes; send the subscription as query parameters", 413
            )
    if not raw.strip():
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise BadRequest(f"the body is not JSON ({error}); send a JSON object or no body") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with clusters, token, force and gvks")
    return body


def _text(body: dict[str, Any] | None, key: str) -> str | None:
    if body is None or key not in body or body[key] is None:
        return None
    if not isinstance(body[key], str):
        raise BadRequest(f"body.{key} must be a string, not {body[key]!r}")
    return str(body[key])


class Gateway:
    """The endpoints, over one :class:`~gateway.manager.Manager` and its bus."""

    def __init__(self, manager: Manager, bus: Bus, *, watch_buffer: int = WATCH_BUFFER) -> None:
        self.manager = manager
        self.bus = bus
        self.watch_buffer = watch_buffer
        self.started = False

    # /apis/workers ------------------------------------------------------------------------------

    async def workers(self, request: Request) -> Response:
        try:
            response = await self._workers(request)
        except BadRequest as error:
            response = _status(error.status, error.message)
        except SourceError as error:
            response = _status(error.status, error.message)
        metrics.REQUESTS.labels("workers", str(response.status_code)).inc()
        return response

    async def _workers(self, request: Request) -> Response:
        if request.method == "GET":
            items = []
            for name in self.manager.clusters():
                claim = self.manager.claim(name)
                if claim is not None:
                    items.append(
                        {
                            "cluster": name,
                            "state": claim.state,
                            "kinds": sorted(claim.informers)
                            if claim.registered
                            else [k.kind for k in claim.kinds],
                            "reason": claim.reason,
                        }
                    )
            return Response(orjson.dumps({"items": items}), media_type="application/json")
        body = await _body(request) if request.method == "POST" else None
        cluster = request.query_params.get("cluster") or _text(body, "clusters") or _text(body, "cluster")
        if not cluster:
            raise BadRequest("cluster is required: send ?cluster=<name> (or, on POST, a body with clusters)")
        if request.method == "DELETE":
            await self.manager.unsubscribe(cluster)
            return Response(b"", status_code=200)
        token = request.query_params.get("token") or _text(body, "token") or ""
        force = _flag(request, "force", body)
        gvks = list(request.query_params.getlist("gvk"))
        listed = (body or {}).get("gvks")
        if listed is not None:
            if not isinstance(listed, list) or not all(isinstance(g, str) for g in listed):
                raise BadRequest("body.gvks must be a list of group/version/Kind strings")
            gvks += listed
        try:
            kinds = [parse_gvk(g) for g in gvks]
        except GVKError as error:
            raise BadRequest(str(error)) from None
        await self.manager.subscribe(cluster, token, kinds, force=force)
        return Response(b"", status_code=200)

    # /apis/<collection> -------------------------------------------------------------------------

    async def collection(self, request: Request) -> Response:
        name = request.path_params["collection"]
        try:
            response = await self._collection(request, name)
        except BadRequest as error:
            response = _status(error.status, error.message)
        metrics.REQUESTS.labels(name if name in COLLECTIONS else "unknown", str(response.status_code)).inc()
        return response

    async def _collection(self, request: Request, name: str) -> Response:
        kind = COLLECTIONS.get(name)
        if kind is None:
            known = ", ".join(f"/apis/{c}" for c in COLLECTIONS)
            raise BadRequest(
                f"/apis/{name} is not served; the collections are {known} (and /apis/workers)", 404
            )
        clusters = _clusters(request)
        namespace = request.query_params.get("namespace", "")
        if namespace and not kind.namespaced:
            raise BadRequest(f"{kind.plural} are cluster-scoped: drop namespace={namespace}")
        watch, aggregated = _flag(request, "watch"), _flag(request, "aggregated")
        if aggregated and kind.kind not in AGGREGATED:
            raise BadRequest(
                f"aggregated=true is offered for instancetypes and instancetypeflavors, not {name}"
            )
        if watch:
            return await self._watch(kind, clusters, namespace, aggregated)
        snapshot = await self.manager.snapshot(kind, clusters)
        body = (
            views.aggregated_list(snapshot.pairs, kind)
            if aggregated
            else views.raw_list(snapshot.pairs, kind, namespace)
        )
        return _warn(Response(orjson.dumps(body), media_type="application/json"), snapshot.warnings)

    async def _watch(self, kind: Kind, clusters: list[str], namespace: str, aggregated: bool) -> Response:
        # Caches ready first, then subscribe, then read the base (no await in between): the fold
        # starts from exactly the state the first event it gets follows, and a kind watched only
        # now does not replay its first listing as a flood of ADDED lines.
        reading = await self.manager.prepare(kind, clusters)
        subscription = self.bus.subscribe(kind.kind, self.watch_buffer)
        wanted = set(clusters)
        render: Callable[[Any], list[bytes]]
        if aggregated:
            render = views.AggregatedWatch(kind, reading.pairs()).lines
        else:

            def render(event: Any) -> list[bytes]:
                text = views.raw_line(event, kind, namespace)
                return [text] if text is not None else []

        async def lines() -> AsyncIterator[bytes]:
            while (event := await subscription.next()) is not None:
                if wanted and event.cluster not in wanted:
                    continue
                for text in render(event):
                    yield text

        stream = WatchStream(self.bus, subscription, lines(), kind.plural, aggregated)
        return _warn(stream, reading.warnings)

    # Health -------------------------------------------------------------------------------------

    async def readyz(self, _: Request) -> Response:
        if not self.started:
            return PlainTextResponse("starting\n", status_code=503)
        return PlainTextResponse("ok\n")

    async def livez(self, _: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def metrics(self, _: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


class WatchStream(Response):
    """A watch's chunked response: lines as events come, ending when the client leaves, when it
    falls too far behind (its last line then says so), or when the gateway stops."""

    def __init__(
        self,
        bus: Bus,
        subscription: Subscription,
        lines: AsyncIterator[bytes],
        collection: str,
        aggregated: bool,
    ) -> None:
        super().__init__(media_type="application/json")
        self.headers["cache-control"] = "no-cache"
        del self.headers["content-length"]
        self.bus = bus
        self.subscription = subscription
        self.lines = lines
        self.labels = (collection, "true" if aggregated else "false")

    async def _disconnected(self, receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.subscription.close()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        watchers = metrics.WATCHERS.labels(*self.labels)
        watchers.inc()
        listener = asyncio.create_task(self._disconnected(receive))
        reason = "client"
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for text in self.lines:
                await send({"type": "http.response.body", "body": text, "more_body": True})
            final = b""
            if self.subscription.overflowed:
                reason = "slow"
                final = views.line("ERROR", "", overflow_status(self.subscription.limit))
                log.warning("watch closed: the client fell behind", extra={"collection": self.labels[0]})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    send({"type": "http.response.body", "body": final, "more_body": False}),
                    FINAL_SEND_TIMEOUT,
                )
        except OSError:  # the client went away mid-send
            reason = "client"
        except asyncio.CancelledError:
            reason = "shutdown"
            raise
        finally:
            listener.cancel()
            self.bus.unsubscribe(self.subscription)
            watchers.dec()
            metrics.WATCHES_CLOSED.labels(reason).inc()


def create_app(
    gateway: Gateway,
    *,
    on_startup: Sequence[Callable[[], Coroutine[Any, Any, Any]]] = (),
    on_shutdown: Sequence[Callable[[], None]] = (),
) -> Starlette:
    """The app; ``on_startup`` coroutines run beside it, ``on_shutdown`` callables after it.

    (Shutdown work belongs here: uvicorn re-raises the SIGTERM it caught once the app is down, so
    nothing after its ``run`` returns is sure to run.)"""
    routes = [
        Route("/apis/workers", gateway.workers, methods=["GET", "POST", "DELETE"]),
        Route("/apis/{collection}", gateway.collection, methods=["GET"]),
        Route("/metrics", gateway.metrics),
        Route("/readyz", gateway.readyz),
        Route("/livez", gateway.livez),
        Route("/healthz", gateway.livez),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(start()) for start in on_startup]
        gateway.started = True
        try:
            yield
        finally:
            gateway.started = False
            for task in tasks:
                task.cancel()
            await gateway.manager.close()
            for undo in on_shutdown:
                try:
                    undo()
                except Exception:
                    log.exception("cleanup at shutdown failed")

    return Starlette(routes=routes, lifespan=lifespan)
