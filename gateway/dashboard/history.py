"""The history the pool pages plot: used cards and pending Workloads per fleet pool, sampled by the
gateway itself and kept in memory, bounded.

Each pool keeps at most ``window / interval`` samples (the last hour at one sample every 15 s:
240), and at most ``max_pools`` pools are kept: a pool that no sample has named for a whole window
is forgotten first, then the one named longest ago.  So the memory is bounded whatever the fleet
does: ``max_pools x window / interval`` samples of three numbers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from api.objects import Obj

Sample = tuple[float, int | float, int]  # (epoch seconds, used cards, pending Workloads)


class History:
    def __init__(self, *, interval: float = 15.0, window: float = 3600.0, max_pools: int = 512) -> None:
        if interval <= 0 or window < interval or max_pools < 1:
            raise ValueError("history: interval > 0, window >= interval and max_pools >= 1")
        self.interval = interval
        self.window = window
        self.max_pools = max_pools
        self.per_pool = int(window // interval)
        self._samples: dict[str, deque[Sample]] = {}
        self._named: dict[str, float] = {}  # pool -> when a sample last named it

    def record(self, now: float, pools: Iterable[Mapping[str, Any]]) -> None:
        """One sample of every pool in a fleet document's ``pools``."""
        for pool in pools:
            name = str(pool["name"])
            samples = self._samples.get(name)
            if samples is None:
                samples = self._samples[name] = deque(maxlen=self.per_pool)
            samples.append((now, pool["used"], int(pool["pending"])))
            self._named[name] = now
        self._forget(now)

    def _forget(self, now: float) -> None:
        for name in [n for n, t in self._named.items() if now - t > self.window]:
            del self._samples[name], self._named[name]
        if len(self._samples) > self.max_pools:
            for name, _ in sorted(self._named.items(), key=lambda kv: kv[1])[
                : len(self._samples) - self.max_pools
            ]:
                del self._samples[name], self._named[name]

    def samples(self, pool: str) -> list[Sample]:
        return list(self._samples.get(pool, ()))

    def pools(self) -> list[str]:
        return sorted(self._samples)

    def size(self) -> int:
        """Samples held in all (what the bound bounds)."""
        return sum(len(s) for s in self._samples.values())

    def to_json(self, pool: str) -> Obj:
        return {
            "pool": pool,
            "interval": self.interval,
            "window": self.window,
            "samples": [
                {"t": t, "used": used, "pending": pending} for t, used, pending in self.samples(pool)
            ],
        }
