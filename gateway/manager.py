"""Subscriptions: for each cluster a readiness loop, then informers, then reads from their caches.

Rules (the reference's, guarded there by tests citing gpustack issue #5947):

- one claim per cluster: a subscribe while one is pending or registered is a no-op; ``force``
  unsubscribes first;
- a pending claim checks the cluster's operator API (:mod:`gateway.readiness`), each check bounded
  by the readiness timeout, and retries with back-off (5 s doubling to 1 min) until it passes or
  the cluster is unsubscribed; only the first failure of a run is logged as an error;
- an unsubscribe cancels a pending check, and a check that finishes late never registers itself
  (nor removes a newer claim's registration): a claim registers only while it is still the claim;
- once registered, the subscribed kinds the cluster serves are watched (a kind read later is
  watched from its first read on); their changes go to the :class:`~gateway.events.Bus`, and an
  unsubscribe publishes one DELETED with no object per kind, meaning "drop this cluster";
- reads come from the informers' caches; a cluster not subscribed, not ready, not serving the kind
  or not listed within ``sync_wait`` is left out with a warning, never failing the others.

Everything here runs on the event loop, except the checks (a thread pool) and the informers
(their own threads, handing changes over with ``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from api.objects import Obj
from gateway import metrics, readiness
from gateway.events import DELETED, MODIFIED, Bus, WorkerEvent
from gateway.kinds import KINDS, Kind
from gateway.kubeapi import ClusterClient, Informer
from gateway.readiness import Readiness
from gateway.sources import ClusterSource, check_cluster_name

log = logging.getLogger("gateway.manager")

Check = Callable[[ClusterClient, float], Readiness]


@dataclass(frozen=True, slots=True)
class Settings:
    readiness_timeout: float = 30.0
    resync: float = 3600.0
    first_delay: float = readiness.FIRST_DELAY
    max_delay: float = readiness.MAX_DELAY
    sync_wait: float = 5.0  # how long a read waits for a cluster's newly started watch to list


class Claim:
    """One subscribed cluster: pending until its operator API answers, then registered."""

    def __init__(self, cluster: str, token: str, kinds: tuple[Kind, ...], client: ClusterClient) -> None:
        self.cluster = cluster
        self.token = token
        self.kinds = kinds
        self.client = client
        self.task: asyncio.Task[None] | None = None
        self.registered = False
        self.served: frozenset[str] = frozenset()
        self.informers: dict[str, Informer] = {}
        self.reason = "its operator API has not been checked yet"
        self.failures = 0

    @property
    def state(self) -> str:
        return "registered" if self.registered else "pending"


@dataclass
class Snapshot:
    """What the caches hold for a read: ``(cluster, object)`` pairs, and who was left out, why."""

    pairs: list[tuple[str, Obj]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _order(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class Manager:
    def __init__(
        self,
        source: ClusterSource,
        bus: Bus,
        settings: Settings | None = None,
        *,
        check: Check = readiness.check,
        check_threads: int = 32,
    ) -> None:
        self.source = source
        self.bus = bus
        self.settings = settings or Settings()
        self._check_fn = check
        self._claims: dict[str, Claim] = {}
        self._executor = ThreadPoolExecutor(max_workers=check_threads, thread_name_prefix="gateway-check")

    # Subscriptions ------------------------------------------------------------------------------

    async def subscribe(self, cluster: str, token: str, kinds: Iterable[Kind], force: bool = False) -> bool:
        """Claim ``cluster``; False when it was already claimed (and ``force`` was not given).

        Raises :class:`~gateway.sources.SourceError` when no client can be built for it."""
        check_cluster_name(cluster)
        if force:
            await self.unsubscribe(cluster)
        if cluster in self._claims:
            return False
        client = self.source.connect(cluster, token)
        claim = Claim(cluster, token, tuple(dict.fromkeys(kinds)), client)
        self._claims[cluster] = claim
        claim.task = asyncio.get_running_loop().create_task(self._admit(claim), name=f"admit-{cluster}")
        self._count()
        log.info("cluster subscribed", extra={"cluster": cluster, "kinds": [k.kind for k in claim.kinds]})
        return True

    async def unsubscribe(self, cluster: str) -> bool:
        """Forget ``cluster``: cancel its check, stop its watches, drop it from every view."""
        claim = self._claims.pop(cluster, None)
        if claim is None:
            return False
        if claim.task is not None:
            claim.task.cancel()
        for informer in claim.informers.values():
            informer.stop()
        claim.client.close()
        if claim.registered:
            for kind in KINDS:
                self.bus.publish(WorkerEvent(DELETED, cluster, kind, None))
        self._count()
        log.info("cluster unsubscribed", extra={"cluster": cluster})
        return True

    def clusters(self) -> dict[str, str]:
        """Subscribed clusters and their state (pending, registered)."""
        return {name: claim.state for name, claim in sorted(self._claims.items())}

    def claim(self, cluster: str) -> Claim | None:
        return self._claims.get(cluster)

    async def close(self) -> None:
        for cluster in list(self._claims):
            await self.unsubscribe(cluster)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _count(self) -> None:
        registered = sum(1 for c in self._claims.values() if c.registered)
        metrics.CLUSTERS.labels("registered").set(registered)
        metrics.CLUSTERS.labels("pending").set(len(self._claims) - registered)

    # The readiness loop -------------------------------------------------------------------------

    async def _check(self, claim: Claim) -> Readiness:
        timeout = self.settings.readiness_timeout
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, self._check_fn, claim.client, timeout)
        try:
            result = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            metrics.READINESS_CHECKS.labels("timeout").inc()
            return Readiness(False, f"no answer within the readiness-check timeout of {timeout:g}s")
        metrics.READINESS_CHECKS.labels("ready" if result.ready else "not_ready").inc()
        return result

    async def _admit(self, claim: Claim) -> None:
        attempt = 0
        while True:
            result = await self._check(claim)
            # asyncio.wait_for (3.11) can lose a cancel that lands as the check completes, so the
            # loop also stops on its own once the claim is no longer the cluster's.
            if self._claims.get(claim.cluster) is not claim:
                return
            if result.ready:
                break
            claim.reason = result.reason
            claim.failures += 1
            wait = readiness.delay(attempt, self.settings.first_delay, self.settings.max_delay)
            extra = {"cluster": claim.cluster, "reason": result.reason, "retry_in_s": wait}
            if attempt == 0:
                log.error("cluster's operator API is not ready; retrying with back-off", extra=extra)
            else:
                log.debug("cluster's operator API is still not ready", extra=extra)
            attempt += 1
            await asyncio.sleep(wait)
        self._register(claim, result.served)

    def _register(self, claim: Claim, served: frozenset[str]) -> None:
        claim.registered = True
        claim.served = served
        claim.reason = ""
        for kind in claim.kinds:
            if kind.plural in served:
                self._inform(claim, kind)
            else:
                log.warning(
                    "cluster does not serve a subscribed kind; it contributes nothing for it",
                    extra={"cluster": claim.cluster, "kind": kind.kind},
                )
        self._count()
        log.info("cluster registered", extra={"cluster": claim.cluster, "watching": sorted(claim.informers)})

    # Watches ------------------------------------------------------------------------------------

    def _inform(self, claim: Claim, kind: Kind) -> Informer:
        informer = claim.informers.get(kind.kind)
        if informer is not None:
            return informer
        loop = asyncio.get_running_loop()
        informer = Informer(
            claim.client, kind.kind, label_selector=kind.selector, resync=self.settings.resync
        )

        def handler(event_type: str, obj: Obj, old: Obj | None) -> None:
            if event_type == MODIFIED and old is obj:  # a resync: nothing changed for a watcher
                return
            with contextlib.suppress(RuntimeError):  # the loop is gone: the gateway is stopping
                loop.call_soon_threadsafe(self._deliver, claim, kind.kind, event_type, obj)

        informer.add_handler(handler)
        claim.informers[kind.kind] = informer
        informer.start()
        return informer

    def _deliver(self, claim: Claim, kind: str, event_type: str, obj: Obj) -> None:
        if self._claims.get(claim.cluster) is not claim:  # queued before an unsubscribe
            return
        metrics.EVENTS.labels(kind).inc()
        self.bus.publish(WorkerEvent(event_type, claim.cluster, kind, obj))

    # Reads --------------------------------------------------------------------------------------

    async def prepare(self, kind: Kind, clusters: Sequence[str] = ()) -> Reading:
        """Make the named clusters' caches of ``kind`` ready to read (all registered clusters when
        none are named): watch the kind where it is not watched yet, and wait up to ``sync_wait``
        for a new watch to list.  Nothing is read yet: :meth:`Reading.pairs` reads, without
        waiting, so a watcher can subscribe between the two and miss nothing."""
        reading = self.reading(kind, clusters)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.sync_wait
        while any(not informer.synced() for _, informer in reading.sources) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        # An informer hands each event of its listing to this loop (call_soon_threadsafe) before it
        # says it is synced, but this task can resume in the loop's batch that was already running
        # when those deliveries were queued: yield once, so they are published before the caller
        # subscribes, not replayed to it as ADDED lines (a loaded machine did that).
        await asyncio.sleep(0)
        for claim, informer in reading.sources:
            if not informer.synced():
                reading.warnings.append(f"cluster {claim.cluster!r}: its {kind.plural} are not listed yet")
        return reading

    def reading(self, kind: Kind, clusters: Sequence[str] = ()) -> Reading:
        """:meth:`prepare` without the wait: the named clusters' caches of ``kind`` (watched from
        now on where they were not), read as they are; a cache not listed yet reads as empty."""
        names = sorted(set(clusters)) if clusters else sorted(self._claims)
        reading = Reading(self, kind)
        for name in names:
            claim = self._claims.get(name)
            if claim is None:
                reading.warnings.append(f"cluster {name!r} is not subscribed")
            elif not claim.registered:
                reading.warnings.append(f"cluster {name!r} is not ready: {claim.reason}")
            elif kind.operator and kind.plural not in claim.served:
                reading.warnings.append(f"cluster {name!r} does not serve {kind.plural}")
            else:
                reading.sources.append((claim, self._inform(claim, kind)))
        return reading

    async def snapshot(self, kind: Kind, clusters: Sequence[str] = ()) -> Snapshot:
        """Every object of ``kind`` in the named clusters (all registered ones when none are)."""
        reading = await self.prepare(kind, clusters)
        return Snapshot(reading.pairs(), reading.warnings)

    def current(self, claim: Claim) -> bool:
        return self._claims.get(claim.cluster) is claim


class Reading:
    """Caches made ready by :meth:`Manager.prepare`, and who is left out, why."""

    def __init__(self, manager: Manager, kind: Kind) -> None:
        self.manager = manager
        self.kind = kind
        self.sources: list[tuple[Claim, Informer]] = []
        self.warnings: list[str] = []

    def pairs(self) -> list[tuple[str, Obj]]:
        """``(cluster, object)`` from every listed cache, clusters in order, objects by name."""
        out: list[tuple[str, Obj]] = []
        for claim, informer in self.sources:
            if self.manager.current(claim) and informer.synced():
                out.extend((claim.cluster, obj) for obj in sorted(informer.list(), key=_order))
        return out
