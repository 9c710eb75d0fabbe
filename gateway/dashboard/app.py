"""The dashboard's HTTP side (Starlette): the page, its assets, its documents and its event stream.

Read-only: every route is GET (HEAD too).  Every response carries a strict Content-Security-Policy
(``default-src 'self'``, no inline script or style, no framing) and ``nosniff``; the assets ship in
this package (``gateway/dashboard/static``) and nothing is fetched from anywhere else.

- ``/``: the page; ``/static/<file>``: its script, style sheet and icon.
- ``/api/fleet``, ``/api/pools/<pool>``, ``/api/workloads``: the documents of
  :mod:`gateway.dashboard.model` at the current revision; ``/api/history/<pool>``: a pool's samples.
- ``/api/events``: server-sent events, ``event: revision`` with ``{"revision": n}`` at every change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from importlib import resources
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.dashboard.service import Dashboard, TooManyStreams

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
STATIC = {  # the only files served: name -> media type
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
INDEX = "index.html"

Scope = MutableMapping[str, Any]
ASGI = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def asset(name: str) -> bytes:
    return resources.files("gateway.dashboard").joinpath("static", name).read_bytes()


def _json(data: bytes, status: int = 200) -> Response:
    return Response(
        data, status_code=status, media_type="application/json", headers={"cache-control": "no-store"}
    )


def _missing(message: str) -> Response:
    body = {"kind": "Status", "status": "Failure", "code": 404, "reason": "NotFound", "message": message}
    return _json(orjson.dumps(body), 404)


class SecurityHeaders:
    """Adds :data:`HEADERS` to every response of the wrapped app."""

    def __init__(self, app: ASGI) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        await self.app(scope, receive, secured)


def create_dashboard_app(dashboard: Dashboard) -> ASGI:
    page = asset(INDEX)
    files = {name: asset(name) for name in STATIC}

    async def index(_: Request) -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers={"cache-control": "no-cache"})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in files:
            return _missing(f"/static/{name} is not one of the dashboard's files")
        return Response(files[name], media_type=STATIC[name], headers={"cache-control": "no-cache"})

    async def fleet(_: Request) -> Response:
        return _json(dashboard.fleet_bytes())

    async def pool(request: Request) -> Response:
        name = request.path_params["name"]
        data = dashboard.pool_bytes(name)
        if data is None:
            return _missing(f"no cluster has an InstanceType of pool {name!r}; /api/fleet lists the pools")
        return _json(data)

    async def workloads(_: Request) -> Response:
        return _json(dashboard.workloads_bytes())

    async def history(request: Request) -> Response:
        return _json(dashboard.history_bytes(request.path_params["name"]))

    async def events(_: Request) -> Response:
        try:
            stream = dashboard.open_stream()
        except TooManyStreams as error:
            return Response(
                f"{error}; close a dashboard page first\n", status_code=503, media_type="text/plain"
            )
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def favicon(_: Request) -> Response:
        return Response(files["icon.svg"], media_type=STATIC["icon.svg"])

    routes = [
        Route("/", index, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/api/fleet", fleet, methods=["GET"]),
        Route("/api/pools/{name}", pool, methods=["GET"]),
        Route("/api/workloads", workloads, methods=["GET"]),
        Route("/api/history/{name}", history, methods=["GET"]),
        Route("/api/events", events, methods=["GET"]),
    ]
    return SecurityHeaders(Starlette(routes=routes))
