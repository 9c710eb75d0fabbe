"""The dashboard's live side: what it watches, when it tells the page, how it sees a cluster go.

- **Watches** — besides the operator's kinds a subscription names, every registered cluster's
  InstanceTypes, Devices, Instances and ModelDeployments, its managed Nodes
  (``gpustack.ai/managed=true``), its queued Pods (``kueue.x-k8s.io/queue-name``: the only ones the
  operator's gates let hold cards; their allocation records name the cards) and its Kueue
  Workloads, all through the gateway's own :class:`~gateway.manager.Manager` (its informers, its
  bus).  Nothing is written anywhere.
- **Revisions** — every change any watch delivers marks the view dirty; after ``debounce`` seconds
  the revision goes up by one and every open event stream is told the new number (server-sent
  events); the page then reads the documents again.  A document is built once per revision and
  kept until the next one, so the API and every page read the same numbers for one revision.
- **Reachability** — every ``probe_interval`` seconds each registered cluster's discovery document
  is read (bounded by ``probe_timeout``): a cluster that answers is ``reachable`` and its time is
  its last seen; one that does not is ``unreachable`` and keeps its last seen (its objects stay, as
  the gateway's caches keep them); a subscribed cluster not registered is ``pending``, with the
  gateway's reason.  A cluster leaves the view only when it is unsubscribed.
- **History** — every ``sample_interval`` seconds the fleet document's pools are sampled into a
  bounded :class:`~gateway.dashboard.history.History`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import orjson

from api import constants
from api.objects import Obj
from gateway import readiness
from gateway.dashboard import model
from gateway.dashboard.history import History
from gateway.events import Bus, Subscription
from gateway.kinds import KINDS, Kind
from gateway.manager import Manager
from kube.resources import KUEUE

log = logging.getLogger("gateway.dashboard")

WATCHED: dict[str, Kind] = {
    "InstanceType": KINDS["InstanceType"],
    "Devices": KINDS["Devices"],
    "Instance": KINDS["Instance"],
    "ModelDeployment": Kind("ModelDeployment", "modeldeployments", True),
    "Node": Kind("Node", "nodes", False, group="", selector=f"{constants.LABEL_MANAGED}=true"),
    "Pod": Kind("Pod", "pods", True, group="", selector=constants.KUEUE_QUEUE_NAME),
    "Workload": Kind("Workload", "workloads", True, group=KUEUE),
}
assert set(WATCHED) == set(model.KIND_NAMES)

EVENT_BUFFER = 1 << 16  # changes the dashboard's own bus subscription may queue (it drains at once)


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    probe_interval: float = 2.0
    probe_timeout: float = 2.0
    debounce: float = 0.5
    sample_interval: float = 15.0
    window: float = 3600.0
    max_pools: int = 512
    heartbeat: float = 15.0
    max_streams: int = 64


class TooManyStreams(Exception):
    pass


class Dashboard:
    def __init__(
        self,
        manager: Manager,
        bus: Bus,
        settings: DashboardSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.manager = manager
        self.bus = bus
        self.settings = settings or DashboardSettings()
        self.clock = clock
        self.history = History(
            interval=self.settings.sample_interval,
            window=self.settings.window,
            max_pools=self.settings.max_pools,
        )
        self.revision = 0
        self.builds = 0  # documents built (each at most once per revision)
        self._seen: dict[str, float] = {}  # cluster -> when it last answered
        self._failed: dict[str, str] = {}  # cluster -> why its last probe failed
        self._shape: tuple[tuple[str, str, str, bool], ...] = ()
        self._docs: dict[str, tuple[Obj | None, bytes]] = {}
        self._streams: set[asyncio.Event] = set()
        self._dirty: asyncio.Event | None = None
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dashboard-probe")

    # Running ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """The dashboard's loops; runs until cancelled (the gateway's app starts it)."""
        self._dirty = asyncio.Event()
        tasks = [asyncio.create_task(self._listen(kind.kind)) for kind in WATCHED.values()]
        tasks += [
            asyncio.create_task(self._publish()),
            asyncio.create_task(self._probe()),
            asyncio.create_task(self._sample()),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            self._executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """End every event stream (the gateway is stopping)."""
        self._closed = True
        for event in self._streams:
            event.set()

    def changed(self) -> None:
        if self._dirty is not None:
            self._dirty.set()

    async def _listen(self, kind: str) -> None:
        while True:
            subscription: Subscription = self.bus.subscribe(kind, EVENT_BUFFER)
            try:
                while await subscription.next() is not None:
                    self.changed()
            finally:
                self.bus.unsubscribe(subscription)
            if self._closed:
                return
            self.changed()  # overflowed: whatever it missed, the caches have

    async def _publish(self) -> None:
        assert self._dirty is not None
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.settings.debounce)
            self._dirty.clear()
            self.bump()

    def bump(self) -> None:
        """A new revision: drop the documents built for the last one, wake every stream."""
        self.revision += 1
        self._docs.clear()
        for event in self._streams:
            event.set()

    # Reachability -------------------------------------------------------------------------------

    async def _probe(self) -> None:
        while True:
            await self.probe_once()
            await asyncio.sleep(self.settings.probe_interval)

    async def probe_once(self) -> None:
        """Watch every kind in every registered cluster, check each one answers, note changes."""
        for kind in WATCHED.values():
            self.manager.reading(kind)  # starts the watches of clusters registered since
        names = [n for n, state in self.manager.clusters().items() if state == "registered"]
        results = await asyncio.gather(*(self._check(n) for n in names))
        now = self.clock()
        for name, (ok, reason) in zip(names, results, strict=True):
            if ok:
                self._seen[name] = now
                self._failed.pop(name, None)
            else:
                self._failed[name] = reason
        subscribed = self.manager.clusters()
        for gone in [n for n in self._seen if n not in subscribed]:
            del self._seen[gone]
        for gone in [n for n in self._failed if n not in subscribed]:
            del self._failed[gone]
        shape = tuple(
            (c.name, c.state, c.reason, c.last_seen is None) for c in self._clusters(with_objects=False)
        )
        if shape != self._shape:
            self._shape = shape
            self.changed()

    async def _check(self, name: str) -> tuple[bool, str]:
        claim = self.manager.claim(name)
        if claim is None:
            return False, "unsubscribed"
        timeout = self.settings.probe_timeout
        loop = asyncio.get_running_loop()
        try:
            result = await asyncio.wait_for(
                loop.run_in_executor(self._executor, readiness.check, claim.client, timeout), timeout + 1
            )
        except TimeoutError:
            return False, f"unreachable: no answer within {timeout:g}s"
        except RuntimeError:  # the executor is shut down: the gateway is stopping
            return False, "stopping"
        return result.ready, result.reason

    # History ------------------------------------------------------------------------------------

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sample_interval)
            self.sample()

    def sample(self) -> None:
        doc = self.fleet()
        self.history.record(self.clock(), doc["pools"])

    # The documents ------------------------------------------------------------------------------

    def _clusters(self, *, with_objects: bool = True) -> list[model.ClusterState]:
        readings = (
            {name: self.manager.reading(kind) for name, kind in WATCHED.items()} if with_objects else {}
        )
        objects: dict[str, dict[str, list[Obj]]] = {}
        for kind, reading in readings.items():
            for claim, informer in reading.sources:
                if self.manager.current(claim) and informer.synced():
                    objects.setdefault(claim.cluster, {})[kind] = informer.list()
        out = []
        for name, state in self.manager.clusters().items():
            subscribed = self.manager.claim(name)
            if subscribed is None:
                continue
            seen = self._seen.get(name)
            if state != "registered":
                out.append(model.ClusterState(name, model.PENDING, subscribed.reason, seen))
            elif name in self._failed:
                out.append(
                    model.ClusterState(
                        name, model.UNREACHABLE, self._failed[name], seen, objects.get(name, {})
                    )
                )
            else:
                out.append(model.ClusterState(name, model.REACHABLE, "", seen, objects.get(name, {})))
        return out

    def _document(
        self, key: str, build: Callable[[list[model.ClusterState], int, float], Obj | None]
    ) -> tuple[Obj | None, bytes]:
        cached = self._docs.get(key)
        if cached is None:
            self.builds += 1
            doc = build(self._clusters(), self.revision, self.clock())
            cached = self._docs[key] = (doc, orjson.dumps(doc) if doc is not None else b"")
        return cached

    def fleet(self) -> Obj:
        doc = self._document("fleet", model.fleet)[0]
        assert doc is not None
        return doc

    def fleet_bytes(self) -> bytes:
        return self._document("fleet", model.fleet)[1]

    def pool_bytes(self, name: str) -> bytes | None:
        doc, data = self._document(
            f"pool/{name}", lambda clusters, revision, now: model.pool(clusters, name, revision, now)
        )
        return data if doc is not None else None

    def workloads_bytes(self) -> bytes:
        return self._document("workloads", model.workloads)[1]

    def history_bytes(self, name: str) -> bytes:
        return orjson.dumps(self.history.to_json(name))

    # Event streams ------------------------------------------------------------------------------

    def open_stream(self) -> AsyncIterator[bytes]:
        """Server-sent events: the revision now, then each new one; a comment as a heartbeat.

        Raises :class:`TooManyStreams` at once when ``max_streams`` are open."""
        if len(self._streams) >= self.settings.max_streams:
            raise TooManyStreams(f"{len(self._streams)} event streams are open already")
        wake = asyncio.Event()
        self._streams.add(wake)
        return self._stream(wake)

    async def _stream(self, wake: asyncio.Event) -> AsyncIterator[bytes]:
        try:
            yield b"retry: 2000\n\n"
            sent = -1
            while not self._closed:
                if self.revision != sent:
                    sent = self.revision
                    yield b"event: revision\ndata: " + orjson.dumps({"revision": sent}) + b"\n\n"
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.settings.heartbeat)
                    wake.clear()
                    continue
                yield b": heartbeat\n\n"
        finally:
            self._streams.discard(wake)

    def streams(self) -> int:
        return len(self._streams)
