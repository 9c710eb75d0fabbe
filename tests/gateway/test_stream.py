"""Watch streams at the ASGI level: a watcher that reads too slowly is closed, not allowed to grow
memory, and its last line says so; a client that leaves ends the stream."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gateway.events import Bus, WorkerEvent
from gateway.kinds import KINDS
from gateway.server import WatchStream
from gateway.views import raw_line
from tests.unit.gateway_objects import instance_type

IT = KINDS["InstanceType"]


def _stream(bus: Bus, limit: int) -> tuple[WatchStream, Any]:
    subscription = bus.subscribe("InstanceType", limit)

    async def lines() -> Any:
        while (event := await subscription.next()) is not None:
            text = raw_line(event, IT)
            if text is not None:
                yield text

    return WatchStream(bus, subscription, lines(), "instancetypes", False), subscription


def test_a_watcher_that_falls_behind_is_closed_and_told_why():
    async def test() -> list[dict]:
        bus = Bus()
        stream, subscription = _stream(bus, limit=3)
        unblock = asyncio.Event()
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)
            if message.get("body") and len(sent) == 2:  # the client stops reading after one line
                await unblock.wait()

        async def receive() -> dict:
            await asyncio.Event().wait()  # the client never leaves
            return {"type": "http.disconnect"}

        task = asyncio.create_task(stream({"type": "http"}, receive, send))
        for n in range(10):
            bus.publish(WorkerEvent("ADDED", "a", "InstanceType", instance_type(f"t{n}")))
            await asyncio.sleep(0)
        assert subscription.overflowed
        assert subscription.pending() <= 3  # memory stayed bounded
        assert bus.watchers("InstanceType") == 0
        unblock.set()
        await asyncio.wait_for(task, 5)
        return [orjson.loads(m["body"]) for m in sent[1:] if m.get("body")]

    received = asyncio.run(test())
    assert received[0]["object"]["metadata"]["name"] == "t0"
    last = received[-1]
    assert last["type"] == "ERROR"
    assert last["object"]["code"] == 410 and last["object"]["reason"] == "Expired"
    assert "list again" in last["object"]["message"]
    assert len(received) == 2  # nothing queued behind the overflow is sent


def test_a_client_that_leaves_ends_the_stream_and_frees_it():
    async def test() -> None:
        bus = Bus()
        stream, _ = _stream(bus, limit=10)
        gone = asyncio.Event()
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        async def receive() -> dict:
            await gone.wait()
            return {"type": "http.disconnect"}

        task = asyncio.create_task(stream({"type": "http"}, receive, send))
        await asyncio.sleep(0.01)
        assert bus.watchers("InstanceType") == 1
        gone.set()
        await asyncio.wait_for(task, 5)
        assert bus.watchers("InstanceType") == 0
        assert sent[0]["status"] == 200

    asyncio.run(test())
