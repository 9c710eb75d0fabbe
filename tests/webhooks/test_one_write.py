"""Each response leaves the server in one write (``webhooks.connections.OneWriteTransport``): the
protocol the worker serves with, driven on a loop with a transport that records every write."""

from __future__ import annotations

import asyncio

from tests.webhooks.protocol_harness import Recording, answered, answers, request, served, until
from tests.webhooks.reviews import body, pod
from webhooks.connections import GuardedHttpToolsProtocol, OneWriteTransport


def test_a_response_is_one_write_with_its_head_and_body() -> None:
    async def feed(protocol: GuardedHttpToolsProtocol, _: Recording) -> None:
        protocol.data_received(request(body(pod(), uid="one")))
        await until(answered(protocol))

    transport = asyncio.run(served(feed))
    assert len(transport.writes) == 1, transport.writes
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert answers(transport.writes)[0]["response"]["uid"] == "one"


def test_pipelined_requests_get_one_write_each_in_order() -> None:
    async def feed(protocol: GuardedHttpToolsProtocol, _: Recording) -> None:
        protocol.data_received(request(body(pod(), uid="a")) + request(body(pod(), uid="b")))
        await until(answered(protocol))

    transport = asyncio.run(served(feed))
    assert len(transport.writes) == 2, transport.writes
    assert [a["response"]["uid"] for a in answers(transport.writes)] == ["a", "b"]


def test_100_continue_goes_out_before_the_body_arrives() -> None:
    payload = body(pod(), uid="late")
    sent = request(payload, b"Expect: 100-continue\r\n")
    head = sent[: -len(payload)]

    async def feed(protocol: GuardedHttpToolsProtocol, transport: Recording) -> None:
        protocol.data_received(head)
        await until(lambda: transport.writes)
        assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # not kept back
        protocol.data_received(payload)
        await until(answered(protocol))

    transport = asyncio.run(served(feed))
    assert len(transport.writes) == 2, transport.writes
    assert answers(transport.writes[1:])[0]["response"]["uid"] == "late"


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
