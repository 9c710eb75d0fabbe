"""The connection's fast lane (``GuardedHttpToolsProtocol``): a well-formed review is answered in
the parser's callback, without ASGI, with the same bytes uvicorn's way would write; what the lane
does not take, and a decision that waits, keep HTTP's order and framing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.webhooks.protocol_harness import (
    Recording,
    answered,
    answers,
    chunked,
    request,
    served,
    split,
    until,
)
from tests.webhooks.reviews import body, pod
from webhooks import registry
from webhooks.connections import GuardedHttpToolsProtocol
from webhooks.decision import allow
from webhooks.lookups import FileLookups
from webhooks.server import create_app

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


CASES = {
    "allowed": body(pod(), uid="a"),
    "refused by a rule": body(
        pod(
            labels={"kueue.x-k8s.io/queue-name": "q"},
            limits={"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"},  # whole and shared: rule 1
        ),
        uid="r",
    ),
    "not JSON": b"{not json",
    "not a review": b'{"kind": "Pod"}',
    "another kind": body(pod(), uid="k", kind="Node", resource="nodes"),
}


@pytest.mark.parametrize("payload", CASES.values(), ids=CASES.keys())
def test_a_review_is_answered_in_the_callback_with_the_bytes_of_uvicorns_way(payload: bytes) -> None:
    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        protocol.data_received(request(payload))
        assert len(transport.writes) == 1  # written before the loop turned: the fast lane
        protocol.data_received(chunked(payload))  # no declared length: uvicorn's way
        assert len(transport.writes) == 1
        await until(lambda: len(transport.writes) == 2)

    fast, asgi = asyncio.run(served(feed)).writes
    assert split(fast) == split(asgi)
    assert fast.startswith(b"HTTP/1.1 200 OK\r\n" if b'"allowed"' in fast else b"HTTP/1.1 400 ")


def test_the_fast_lane_writes_the_metrics_the_asgi_way_does() -> None:
    from webhooks.metrics import REQUESTS

    def allowed() -> float:
        value = REQUESTS.labels("validate.gpustack-worker.core.v1.pod", "allowed", "200")._value.get()
        return float(value)

    before = allowed()

    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        protocol.data_received(request(body(pod())))

    asyncio.run(served(feed))
    assert allowed() == before + 1


@pytest.mark.parametrize(
    ("extra", "version", "closes"),
    [
        (b"", b"HTTP/1.1", False),
        (b"Connection: close\r\n", b"HTTP/1.1", True),
        (b"", b"HTTP/1.0", True),
        (b"Connection: keep-alive\r\n", b"HTTP/1.0", True),  # as uvicorn's way: 1.0 is closed
    ],
)
def test_the_connection_is_kept_or_closed_as_the_request_asks(
    extra: bytes, version: bytes, closes: bool
) -> None:
    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        protocol.data_received(request(body(pod(), uid="c"), extra, version=version))
        assert transport.writes and transport.closed == closes
        if not closes:  # the keep-alive timer is armed, as uvicorn arms it after a response
            assert protocol.timeout_keep_alive_task is not None

    transport = asyncio.run(served(feed))
    head, _ = split(transport.writes[0])
    assert (b"connection: close" in head) == closes
    assert answers(transport.writes)[0]["response"]["uid"] == "c"


def test_what_the_lane_does_not_take_goes_uvicorns_way_and_is_refused_there() -> None:
    payload = body(pod())
    wrong_type = request(payload).replace(b"Content-Type: application/json", b"Content-Type: text/plain")

    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        protocol.data_received(wrong_type)
        assert transport.writes == []  # not answered in the callback
        await until(answered(protocol))

    transport = asyncio.run(served(feed))
    assert transport.writes[0].startswith(b"HTTP/1.1 415 ")


class _Gate:
    """A webhook whose decision waits until the test opens it (a read through to the apiserver)."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.calls = 0

    async def hold(self, protocol: GuardedHttpToolsProtocol) -> None:
        """Send one review whose decision waits, and let it start."""
        self.open = asyncio.Event()
        protocol.data_received(request(body(pod(), uid="slow")))
        await asyncio.sleep(0)

    async def __call__(self, request: Any, lookups: Any) -> Any:
        self.calls += 1
        if request.uid == "slow":
            await self.open.wait()
        return allow()


def _app(handler: Any) -> Any:
    return create_app(FileLookups(), webhooks=(registry.Webhook(False, "", "v1", "pods", "Pod", handler),))


def test_a_decision_that_waits_finishes_in_a_task_and_what_follows_waits_its_turn() -> None:
    gate = _Gate()

    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        gate.open = asyncio.Event()
        pipelined = request(body(pod(), uid="slow")) + request(body(pod(), uid="next")) + HEALTHZ
        protocol.data_received(pipelined)
        for _ in range(20):
            await asyncio.sleep(0)
        assert transport.writes == [] and gate.calls == 1  # the others queue behind the first
        gate.open.set()
        await until(lambda: len(transport.writes) == 3)
        assert not transport.closed

    transport = asyncio.run(served(feed, _app(gate)))
    first, second, health = transport.writes  # one write each, in the order asked
    assert [a["response"]["uid"] for a in answers([first, second])] == ["slow", "next"]
    assert health.startswith(b"HTTP/1.1 200 ") and split(health)[1] == b"ok\n"


def test_a_connection_lost_while_a_decision_waits_gets_no_write() -> None:
    gate = _Gate()

    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        await gate.hold(protocol)
        protocol.connection_lost(None)
        gate.open.set()
        for _ in range(20):
            await asyncio.sleep(0)

    assert asyncio.run(served(feed, _app(gate))).writes == []


def test_a_shutdown_while_a_decision_waits_answers_then_closes() -> None:
    gate = _Gate()

    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        await gate.hold(protocol)
        protocol.shutdown()
        assert not transport.closed
        gate.open.set()
        await until(lambda: transport.writes)

    transport = asyncio.run(served(feed, _app(gate)))
    head, _ = split(transport.writes[0])
    assert head.startswith(b"HTTP/1.1 200 ") and b"connection: close" in head and transport.closed


async def _broken(request: Any, lookups: Any) -> Any:
    return None  # not a Decision: the server's own code fails after the decision


async def _broken_later(request: Any, lookups: Any) -> Any:
    await asyncio.sleep(0)
    return None


@pytest.mark.parametrize("handler", [_broken, _broken_later], ids=["at once", "after waiting"])
def test_an_answer_that_fails_is_a_500_and_the_connection_closes(handler: Any, caplog) -> None:
    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        protocol.data_received(request(body(pod())))
        await until(lambda: transport.writes)

    transport = asyncio.run(served(feed, _app(handler)))
    head, text = split(transport.writes[0])
    assert head.startswith(b"HTTP/1.1 500 ") and text == b"Internal Server Error"
    assert transport.closed
    assert "answering a review failed" in caplog.text
