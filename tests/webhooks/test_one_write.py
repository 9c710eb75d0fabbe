"""Each response leaves the server in one write (``webhooks.connections.OneWriteTransport``): the
protocol the worker serves with, driven on a loop with a transport that records every write."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import uvicorn
from uvicorn.server import ServerState

from tests.webhooks.reviews import body, pod
from webhooks.connections import GuardedHttpToolsProtocol, OneWriteTransport
from webhooks.lookups import FileLookups
from webhooks.server import create_app

VALIDATE = b"/validate-gpustack-worker-core-v1-pod"


class Recording(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 9443)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _request(payload: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
        % (VALIDATE, len(payload), extra)
    ) + payload


async def _served(feed: Any) -> Recording:
    config = uvicorn.Config(create_app(FileLookups()), lifespan="off", log_level="warning")
    config.load()
    transport = Recording()
    protocol = GuardedHttpToolsProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    protocol.connection_made(transport)
    await feed(protocol, transport)
    protocol.connection_lost(None)
    return transport


async def _until(done: Any) -> None:
    """Turn the loop until ``done()`` (the app's task and the cycle's callbacks); a guard on the
    turns, not a time."""
    for _ in range(10_000):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the protocol never got there")


def _answered(protocol: GuardedHttpToolsProtocol) -> Any:
    """Every request received has its response complete (none waiting in the pipeline)."""
    return lambda: not protocol.pipeline and (protocol.cycle is None or protocol.cycle.response_complete)


def _answers(writes: list[bytes]) -> list[dict]:
    return [orjson.loads(w.split(b"\r\n\r\n", 1)[1]) for w in writes]


def test_a_response_is_one_write_with_its_head_and_body() -> None:
    async def feed(protocol: GuardedHttpToolsProtocol, _: Recording) -> None:
        protocol.data_received(_request(body(pod(), uid="one")))
        await _until(_answered(protocol))

    transport = asyncio.run(_served(feed))
    assert len(transport.writes) == 1, transport.writes
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert _answers(transport.writes)[0]["response"]["uid"] == "one"


def test_pipelined_requests_get_one_write_each_in_order() -> None:
    async def feed(protocol: GuardedHttpToolsProtocol, _: Recording) -> None:
        protocol.data_received(_request(body(pod(), uid="a")) + _request(body(pod(), uid="b")))
        await _until(_answered(protocol))

    transport = asyncio.run(_served(feed))
    assert len(transport.writes) == 2, transport.writes
    assert [a["response"]["uid"] for a in _answers(transport.writes)] == ["a", "b"]


def test_100_continue_goes_out_before_the_body_arrives() -> None:
    payload = body(pod(), uid="late")
    request = _request(payload, b"Expect: 100-continue\r\n")
    head = request[: -len(payload)]

    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        protocol.data_received(head)
        await _until(lambda: transport.writes)
        assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # not kept back
        protocol.data_received(payload)
        await _until(_answered(protocol))

    transport = asyncio.run(_served(feed))
    assert len(transport.writes) == 2, transport.writes
    assert _answers(transport.writes[1:])[0]["response"]["uid"] == "late"


def test_a_close_sends_what_is_kept_and_an_abort_drops_it() -> None:
    closed, aborted = Recording(), Recording()
    for inner in (closed, aborted):
        kept = OneWriteTransport(inner)
        kept.answering()
        kept.write(b"head ")
        kept.write(memoryview(b"body"))
        assert inner.writes == []
        kept.close() if inner is closed else kept.abort()
    assert closed.writes == [b"head body"] and closed.closed
    assert aborted.writes == [] and aborted.aborted
