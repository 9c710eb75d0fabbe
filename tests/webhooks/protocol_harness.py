"""The protocol the worker serves with (``webhooks.connections.GuardedHttpToolsProtocol``), driven
on a loop with a transport that records every write: no socket, no TLS, every byte visible."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from uvicorn.server import ServerState

from webhooks.connections import GuardedHttpToolsProtocol
from webhooks.lookups import FileLookups
from webhooks.server import create_app, uvicorn_config

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


def request(
    payload: bytes, extra: bytes = b"", *, path: bytes = VALIDATE, version: bytes = b"HTTP/1.1"
) -> bytes:
    """A POST of ``payload`` as JSON with its length declared (``extra``: more header lines)."""
    return (
        b"POST %s %s\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
        % (path, version, len(payload), extra)
    ) + payload


def chunked(payload: bytes, *, path: bytes = VALIDATE) -> bytes:
    """The same POST with its body chunked (no declared length)."""
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        % path
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)
    )


Feed = Callable[[GuardedHttpToolsProtocol, Recording], Awaitable[None]]


async def served(feed: Feed, app: Any = None) -> Recording:
    """Run ``feed`` against one connection of the protocol serving ``app`` (default: every webhook
    over an empty cluster), then lose the connection."""
    config = uvicorn_config(app or create_app(FileLookups()))  # as the worker serves
    config.load()
    transport = Recording()
    protocol = GuardedHttpToolsProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    protocol.connection_made(transport)
    await feed(protocol, transport)
    protocol.connection_lost(None)
    return transport


async def until(done: Callable[[], Any]) -> None:
    """Turn the loop until ``done()`` (the app's task and the cycle's callbacks); a guard on the
    turns, not a time."""
    for _ in range(10_000):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the protocol never got there")


def answered(protocol: GuardedHttpToolsProtocol) -> Callable[[], bool]:
    """Every request received has its response complete (none waiting in the pipeline)."""
    return lambda: not protocol.pipeline and (protocol.cycle is None or protocol.cycle.response_complete)


def split(write: bytes) -> tuple[bytes, bytes]:
    head, _, rest = write.partition(b"\r\n\r\n")
    return head, rest


def answers(writes: list[bytes]) -> list[dict]:
    return [orjson.loads(split(w)[1]) for w in writes]
