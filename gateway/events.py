"""Cluster events and their fan-out to watch streams, on the event loop.

An informer thread hands each change to the loop; :class:`Bus` gives it to every subscription of
that kind.  A subscription holds at most ``limit`` events: a watcher that reads slower than its
clusters change is closed, not allowed to grow memory, and its stream says so in its last line
(:func:`overflow_status`), the way the apiserver ends a watch with an ERROR event.  The watcher
lists again and watches again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True, slots=True)
class WorkerEvent:
    """A change in one cluster; ``object`` None (with DELETED) drops the whole cluster."""

    type: str
    cluster: str
    kind: str
    object: dict[str, Any] | None


class Subscription:
    """One watcher's bounded queue of events of one kind."""

    def __init__(self, kind: str, limit: int) -> None:
        self.kind = kind
        self.limit = limit
        self.overflowed = False
        self.closed = False
        self._events: deque[WorkerEvent] = deque()
        self._ready = asyncio.Event()

    def offer(self, event: WorkerEvent) -> bool:
        """Queue ``event``; False (and closed) when the watcher is ``limit`` events behind."""
        if self.closed:
            return False
        if len(self._events) >= self.limit:
            self.overflowed = True
            self.close()
            return False
        self._events.append(event)
        self._ready.set()
        return True

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def next(self) -> WorkerEvent | None:
        """The next event; None once closed (an overflowed watcher gets nothing more)."""
        while True:
            if self.overflowed:
                return None
            if self._events:
                return self._events.popleft()
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()

    def pending(self) -> int:
        return len(self._events)


class Bus:
    """Subscriptions by kind.  Use it from the event loop thread only."""

    def __init__(self) -> None:
        self._subscriptions: dict[str, set[Subscription]] = {}
        self.dropped = 0  # watchers closed for falling behind

    def subscribe(self, kind: str, limit: int) -> Subscription:
        subscription = Subscription(kind, limit)
        self._subscriptions.setdefault(kind, set()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        subscription.close()
        self._subscriptions.get(subscription.kind, set()).discard(subscription)

    def publish(self, event: WorkerEvent) -> None:
        for subscription in list(self._subscriptions.get(event.kind, ())):
            if not subscription.offer(event):
                self._subscriptions[event.kind].discard(subscription)
                if subscription.overflowed:
                    self.dropped += 1

    def close_all(self) -> None:
        """End every watch (the gateway is stopping)."""
        for subscriptions in self._subscriptions.values():
            for subscription in subscriptions:
                subscription.close()
        self._subscriptions.clear()

    def watchers(self, kind: str) -> int:
        return len(self._subscriptions.get(kind, ()))


def overflow_status(limit: int) -> dict[str, Any]:
    """The last object of a stream closed for falling behind (a Kubernetes ``Status``)."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": 410,
        "reason": "Expired",
        "message": (
            f"watch closed: the client fell {limit} events behind its clusters; list again, then watch again"
        ),
    }
