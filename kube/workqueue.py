"""A rate-limited work queue: keys, not events; per-key exponential back-off; delayed adds.

A key in the queue is held once however often it is added; a key being processed is not handed
to a second worker, and one added meanwhile is re-queued when the first finishes (level-based
reconciles: any pass may be the first after a restart).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Hashable

from prometheus_client import Gauge

DEPTH = Gauge("gpustack_controller_queue_depth", "Keys waiting in a controller's work queue.", ["controller"])


class WorkQueue:
    def __init__(self, name: str, *, base_delay: float = 0.05, max_delay: float = 300.0) -> None:
        self.name = name
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._ready: list[Hashable] = []
        self._queued: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._delayed: list[tuple[float, int, Hashable]] = []
        self._failures: dict[Hashable, int] = {}
        self._counter = 0
        self._cond = threading.Condition()
        self._shutdown = False
        self._depth = DEPTH.labels(name)

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready)

    def idle(self) -> bool:
        """Nothing to do now: no key ready, being processed, marked for another pass, or due from
        the delayed heap (a requeue set for later does not count)."""
        with self._cond:
            due = bool(self._delayed) and self._delayed[0][0] <= time.monotonic()
            return not (self._ready or self._processing or self._dirty or due)

    def add(self, key: Hashable) -> None:
        with self._cond:
            if self._shutdown:
                return
            if key in self._processing:
                self._dirty.add(key)
                return
            if key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
                self._depth.set(len(self._ready))
                self._cond.notify()

    def add_after(self, key: Hashable, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            self._counter += 1
            heapq.heappush(self._delayed, (time.monotonic() + delay, self._counter, key))
            self._cond.notify()

    def add_rate_limited(self, key: Hashable) -> float:
        """Re-queue after a failure, waiting ``base × 2^failures`` (capped); returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(self.base_delay * (2**failures), self.max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def _promote(self) -> float | None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
        self._depth.set(len(self._ready))
        return self._delayed[0][0] - now if self._delayed else None

    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next key, or None on shutdown or timeout.  Call :meth:`done` when finished."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                wait = self._promote()
                if self._shutdown:
                    return None
                if self._ready:
                    key = self._ready.pop(0)
                    self._queued.discard(key)
                    self._processing.add(key)
                    self._depth.set(len(self._ready))
                    return key
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: Hashable) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    self._ready.append(key)
                    self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()
