"""The node-wide download limits: a request semaphore of ``download.concurrency`` and one shared
``bytesPerSecond`` token bucket, both adjustable while downloads run (a new ``spec`` applies without
a restart)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class RequestLimit:
    """A counting semaphore whose limit can change; lowering it lets running requests finish."""

    def __init__(self, limit: int) -> None:
        self._limit = max(1, limit)
        self._held = 0
        self._cond = threading.Condition()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def held(self) -> int:
        return self._held

    def set_limit(self, limit: int) -> None:
        with self._cond:
            self._limit = max(1, limit)
            self._cond.notify_all()

    def acquire(self, cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Wait for a slot; False when ``cancelled`` became true first."""
        with self._cond:
            while self._held >= self._limit:
                if cancelled():
                    return False
                self._cond.wait(0.2)
            self._held += 1
            return True

    def release(self) -> None:
        with self._cond:
            self._held -= 1
            self._cond.notify()

    @contextmanager
    def slot(self, cancelled: Callable[[], bool] = lambda: False) -> Iterator[bool]:
        got = self.acquire(cancelled)
        try:
            yield got
        finally:
            if got:
                self.release()


class ByteRate:
    """A token bucket of ``rate`` bytes a second (0: unlimited), a burst of one second's worth.

    :meth:`take` blocks until ``n`` bytes may pass; callers take what they just received, so the
    long-run rate over every download on the node stays at ``rate``.
    """

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._rate = max(0, rate)
        self._tokens = float(self._rate)
        self._stamp = clock()

    @property
    def rate(self) -> int:
        return self._rate

    def set_rate(self, rate: int) -> None:
        with self._lock:
            self._rate = max(0, rate)
            self._tokens = min(self._tokens, float(self._rate))

    def take(self, n: int, cancelled: Callable[[], bool] = lambda: False) -> None:
        while True:
            with self._lock:
                if self._rate == 0:
                    return
                now = self._clock()
                self._tokens = min(float(self._rate), self._tokens + (now - self._stamp) * self._rate)
                self._stamp = now
                # Debt is allowed (a chunk may exceed the burst); the next taker waits it off.
                if self._tokens > 0:
                    self._tokens -= n
                    return
                wait = -self._tokens / self._rate + 1e-3
            if cancelled():
                return
            time.sleep(min(wait, 0.25))
