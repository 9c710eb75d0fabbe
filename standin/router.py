"""A stand-in ``vllm-router``: started by the very command line the controller renders for
``spec.router.name: vllm-router`` (``router_cli``), it finds the replicas as its flags say and
forwards the OpenAI surface to them.

Discovery (``--service-discovery``): the Pods of ``--service-discovery-namespace`` matching
``--selector`` (or, with ``--vllm-pd-disaggregation``, ``--prefill-selector`` and
``--decode-selector``) listed through the Kubernetes API with the Pod's service-account token, as the
real router does (it watches; this one lists every ``DISCOVERY_INTERVAL`` seconds). A Pod is a worker
while it runs, is Ready and has an address: ``http://<podIP>:<--service-discovery-port>``. Static
``--worker-urls`` / ``--prefill`` / ``--decode`` are workers too.

Routing: ``/v1/chat/completions`` and ``/v1/completions`` go, for a prefill/decode pair, first to a
prefill replica with ``max_tokens`` 1, not streamed, and ``kv_transfer_params`` asking for a remote
decode (as vLLM's P/D proxies send it), then to a decode replica with the original request and the
prefill's ``kv_transfer_params`` (or where the prefill ran, when it returned none); the answer is the
decode's. Without the pair, one worker answers. Every policy picks round-robin (the real policies —
``cache_aware`` by default — score prefixes and load; the stand-in does not). ``/health`` is liveness,
``/readiness`` is 503 until a worker of each needed kind is known, ``/v1/models`` is a worker's answer,
``/list_workers`` what discovery found; ``/metrics`` on the Prometheus bind counts the requests each
worker was sent. No KV cache moves anywhere: the engines are stand-ins too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from standin import router_cli
from standin.kube import KubeAPI
from standin.router_cli import RouterLaunch

DISCOVERY_INTERVAL = 2.0
PREFILL, DECODE, REGULAR = "prefill", "decode", "regular"
log = logging.getLogger("vllm-router-standin")

# (method, url, body, headers, timeout) -> (status, body, content type)
Send = Callable[[str, str, bytes | None, dict[str, str], float], Awaitable[tuple[int, bytes, str]]]


def _send_blocking(method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float):
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read(), answer.headers.get("Content-Type", "application/json")
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers.get("Content-Type", "application/json")


async def send_http(method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float):
    return await asyncio.to_thread(_send_blocking, method, url, body, headers, timeout)


def ready_workers(pods: list[dict[str, Any]], port: int) -> list[str]:
    """The worker URLs of the Pods that run, are Ready and have an address (sorted: stable order)."""
    urls = []
    for pod in pods:
        status = pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running" or not ready:
            continue
        if status.get("podIP"):
            host = status["podIP"]
            urls.append(f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}")
    return sorted(urls)


class Workers:
    """What discovery and the static URLs give, by kind, and a round-robin pick among them."""

    def __init__(self, launch: RouterLaunch, api: KubeAPI | None) -> None:
        self.launch, self.api = launch, api
        self.static = {PREFILL: list(launch.prefill_urls), DECODE: list(launch.decode_urls),
                       REGULAR: list(launch.worker_urls)}  # fmt: skip
        self.found: dict[str, list[str]] = {PREFILL: [], DECODE: [], REGULAR: []}
        self.turn: dict[str, itertools.count[int]] = {kind: itertools.count() for kind in self.found}
        self.error = ""

    @property
    def kinds(self) -> tuple[str, ...]:
        return (PREFILL, DECODE) if self.launch.pd else (REGULAR,)

    def selectors(self) -> dict[str, dict[str, str]]:
        if self.launch.pd:
            return {PREFILL: self.launch.prefill_selector, DECODE: self.launch.decode_selector}
        return {REGULAR: self.launch.selector}

    def urls(self, kind: str) -> list[str]:
        return sorted(set(self.static[kind]) | set(self.found[kind]))

    def pick(self, kind: str) -> str | None:
        urls = self.urls(kind)
        return urls[next(self.turn[kind]) % len(urls)] if urls else None

    def ready(self) -> bool:
        return all(self.urls(kind) for kind in self.kinds)

    def discover_once(self) -> None:
        assert self.api is not None
        namespace = self.launch.namespace or self.api.namespace() or "default"
        for kind, selector in self.selectors().items():
            if not selector:
                continue
            urls = ready_workers(self.api.list_pods(namespace, selector), self.launch.target_port)
            if urls != self.found[kind]:
                log.info("discovered %s workers through the Kubernetes API (%s): %s", kind,
                         ",".join(f"{k}={v}" for k, v in selector.items()), urls or "none")  # fmt: skip
            self.found[kind] = urls

    async def discover(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.discover_once)
                if self.error:
                    log.info("the Kubernetes API answers again")
                self.error = ""
            except Exception as error:  # any failure: say it, keep the last list, retry
                message = f"{type(error).__name__}: {error}"
                if message != self.error:
                    log.warning("service discovery failed: %s", message)
                self.error = message
            await asyncio.sleep(DISCOVERY_INTERVAL)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "RouterError", "code": status}}, status)


class Router:
    def __init__(self, launch: RouterLaunch, workers: Workers, send: Send = send_http) -> None:
        self.launch, self.workers, self.send = launch, workers, send
        self.sent: Counter[tuple[str, str]] = Counter()  # (kind, worker) -> requests
        self.requests: Counter[str] = Counter()  # route -> requests

    async def _forward(self, kind: str, url: str, path: str, body: dict[str, Any] | None, request_id: str):
        self.sent[(kind, url)] += 1
        headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
        data = json.dumps(body).encode() if body is not None else None
        status, answer, content_type = await self.send(
            "POST" if body is not None else "GET",
            url + path,
            data,
            headers,
            float(self.launch.request_timeout),
        )
        log.info("%s %s -> %s worker %s: %d", request_id, path, kind, url, status)
        return status, answer, content_type

    async def health(self, request: Request) -> Response:
        return PlainTextResponse("OK")

    async def readiness(self, request: Request) -> Response:
        state = {kind: self.workers.urls(kind) for kind in self.workers.kinds}
        if not self.workers.ready():
            return JSONResponse(
                {"status": "not ready", "workers": state, "discoveryError": self.workers.error}, 503
            )
        return JSONResponse({"status": "ready", "workers": state})

    async def list_workers(self, request: Request) -> Response:
        return JSONResponse({
            "mode": "vllm-pd" if self.launch.pd else "regular", "policy": self.launch.policy,
            "kvConnector": self.launch.kv_connector,
            "workers": {kind: self.workers.urls(kind) for kind in self.workers.kinds},
            "discoveryError": self.workers.error,
        })  # fmt: skip

    async def models(self, request: Request) -> Response:
        kind = DECODE if self.launch.pd else REGULAR
        url = self.workers.pick(kind)
        if url is None:
            return _error(503, f"no {kind} worker available")
        status, answer, content_type = await self._forward(kind, url, "/v1/models", None, uuid.uuid4().hex)
        return Response(answer, status, media_type=content_type)

    async def generate(self, request: Request) -> Response:
        path = request.url.path
        self.requests[path] += 1
        try:
            body = json.loads(await request.body())
        except ValueError as error:
            return _error(400, f"the request body is not JSON: {error}")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object")
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        if not self.launch.pd:
            url = self.workers.pick(REGULAR)
            if url is None:
                return _error(503, "no worker available")
            status, answer, content_type = await self._forward(REGULAR, url, path, body, request_id)
            return Response(answer, status, media_type=content_type)
        prefill, decode = self.workers.pick(PREFILL), self.workers.pick(DECODE)
        if prefill is None or decode is None:
            return _error(503, f"no {'prefill' if prefill is None else 'decode'} worker available")
        first = {**body, "max_tokens": 1, "stream": False,
                 "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}  # fmt: skip
        first.pop("stream_options", None)
        if "max_completion_tokens" in body:
            first["max_completion_tokens"] = 1
        status, answer, content_type = await self._forward(PREFILL, prefill, path, first, request_id)
        if status != 200:
            return Response(answer, status, media_type=content_type)
        params = None
        with contextlib.suppress(ValueError):
            parsed = json.loads(answer)
            if isinstance(parsed, dict) and isinstance(parsed.get("kv_transfer_params"), dict):
                params = parsed["kv_transfer_params"]
        host = urllib.parse.urlsplit(prefill).hostname
        second = {**body, "kv_transfer_params": params or {"do_remote_prefill": True, "remote_host": host}}
        status, answer, content_type = await self._forward(DECODE, decode, path, second, request_id)
        return Response(answer, status, media_type=content_type)

    async def metrics(self, request: Request) -> Response:
        lines = ["# TYPE vllm_router_requests_total counter"]
        lines += [
            f'vllm_router_requests_total{{route="{route}"}} {n}' for route, n in sorted(self.requests.items())
        ]
        lines.append("# TYPE vllm_router_processed_requests_total counter")
        lines += [
            f'vllm_router_processed_requests_total{{worker="{url}",worker_type="{kind}"}} {n}'
            for (kind, url), n in sorted(self.sent.items())
        ]
        return PlainTextResponse("\n".join(lines) + "\n")

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/health", self.health),
            Route("/readiness", self.readiness),
            Route("/list_workers", self.list_workers),
            Route("/v1/models", self.models),
            Route("/v1/chat/completions", self.generate, methods=["POST"]),
            Route("/v1/completions", self.generate, methods=["POST"]),
        ])  # fmt: skip

    def metrics_app(self) -> Starlette:
        return Starlette(routes=[Route("/metrics", self.metrics)])


async def serve(launch: RouterLaunch) -> None:
    import uvicorn

    workers = Workers(launch, KubeAPI() if launch.discovery else None)
    router = Router(launch, workers)
    servers = [
        uvicorn.Server(uvicorn.Config(router.app(), host=launch.host, port=launch.port, log_level="warning")),
        uvicorn.Server(uvicorn.Config(router.metrics_app(), host=launch.prometheus_host,
                                      port=launch.prometheus_port, log_level="warning")),
    ]  # fmt: skip
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    if launch.discovery:
        tasks.append(asyncio.create_task(workers.discover()))
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for server in servers:
        server.should_exit = True
    for task in done:
        task.result()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        launch = router_cli.parse(args)
    except router_cli.Refused as refusal:
        print(refusal, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="vllm-router-standin %(levelname)s %(message)s")
    mode = "vLLM PD disaggregated" if launch.pd else "regular"
    log.info("serving on %s:%d (metrics %s:%d), mode %s, policy %s (picked round-robin), kv connector %s",
             launch.host, launch.port, launch.prometheus_host, launch.prometheus_port, mode, launch.policy,
             launch.kv_connector)  # fmt: skip
    asyncio.run(serve(launch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
