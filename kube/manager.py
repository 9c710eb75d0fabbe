"""The controller manager: shared informers, controllers with worker threads, leader election.

Every replica starts the informers (caches are cheap and make a take-over fast); only the leader's
controllers take keys off their queues.  A controller declares what it watches and how an event
maps to keys; ``reconcile(key)`` is level-based and idempotent, returns an optional requeue delay,
and raising re-queues the key with per-key exponential back-off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram

from api.objects import Obj
from kube.client import Client
from kube.events import Recorder
from kube.informer import IndexFunc, Informer
from kube.leader import LeaderElector
from kube.workqueue import WorkQueue

log = logging.getLogger("controllers.manager")

RECONCILE_SECONDS = Histogram(
    "gpustack_controller_reconcile_duration_seconds",
    "Time one reconcile took.",
    ["controller"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RECONCILE_ERRORS = Counter(
    "gpustack_controller_reconcile_errors_total", "Reconciles that raised.", ["controller"]
)

RECONCILES = Counter("gpustack_controller_reconciles_total", "Reconciles run.", ["controller"])
# 1 once this replica's controllers took over (every cached object enqueued) and every queue has
# drained since: a full pass over the caches has happened and nothing is pending now. Tests wait on
# it instead of sleeping; an operator reads it as "caught up".
SETTLED = Gauge(
    "gpustack_controllers_settled",
    "1 when the leader's controllers made their take-over pass and have no key pending now.",
)
# 1 while this replica holds the Lease and its controllers reconcile (or runs without leader
# election); the sum over the replicas is 1 in a healthy worker and 0 when none leads.
LEADER = Gauge(
    "gpustack_worker_leader",
    "1 while this replica holds the Lease and its controllers reconcile, else 0.",
)

Mapper = Callable[[str, Obj, Obj | None], Iterable[Hashable]]


@dataclass(frozen=True, slots=True)
class Watch:
    """Events of ``kind`` (optionally one namespace / label selector) mapped to reconcile keys."""

    kind: str
    mapper: Mapper
    namespace: str = ""
    label_selector: str = ""


class Controller:
    """Base class: set ``name``, override :meth:`watches` and :meth:`reconcile`."""

    name = "controller"
    workers = 1

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.client = manager.client
        self.queue = WorkQueue(self.name)
        self.recorder = Recorder(manager.client, f"gpustack-worker/{self.name}")

    def watches(self) -> list[Watch]:
        return []

    def reconcile(self, key: Hashable) -> float | None:
        raise NotImplementedError

    def informer(self, kind: str, namespace: str = "", label_selector: str = "") -> Informer:
        return self.manager.informer(kind, namespace, label_selector)

    # -------------------------------------------------------------------------------------------

    def _work(self, stop: threading.Event) -> None:
        duration = RECONCILE_SECONDS.labels(self.name)
        errors = RECONCILE_ERRORS.labels(self.name)
        runs = RECONCILES.labels(self.name)
        while not stop.is_set():
            key = self.queue.get(timeout=0.5)
            if key is None:
                continue
            started = time.perf_counter()
            runs.inc()
            try:
                after = self.reconcile(key)
            except Exception as error:
                errors.inc()
                delay = self.queue.add_rate_limited(key)
                log.warning(
                    "reconcile failed",
                    extra={
                        "controller": self.name,
                        "key": str(key),
                        "error": f"{type(error).__name__}: {error}",
                        "retry_in": round(delay, 2),
                    },
                    exc_info=log.isEnabledFor(logging.DEBUG),
                )
            else:
                self.queue.forget(key)
                if after is not None:
                    self.queue.add_after(key, after)
            finally:
                duration.observe(time.perf_counter() - started)
                self.queue.done(key)


class Manager:
    def __init__(
        self,
        client: Client,
        *,
        leader_election: bool = True,
        lease_name: str = "worker.gpustack.ai",
        lease_namespace: str = "gpustack-system",
        identity: str | None = None,
        resync: float = 3600.0,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
    ) -> None:
        self.client = client
        self.resync = resync
        self._informers: dict[tuple[str, str, str], Informer] = {}
        self._indexes: dict[tuple[str, str, str], dict[str, IndexFunc]] = {}
        self.controllers: list[Controller] = []
        self.elector = (
            LeaderElector(
                client,
                lease_name,
                lease_namespace,
                identity=identity,
                duration=lease_duration,
                renew_deadline=renew_deadline,
            )
            if leader_election
            else None
        )
        self._stop = threading.Event()
        self._workers_stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._campaign: threading.Thread | None = None
        self._took_over = False
        SETTLED.set_function(lambda: 1.0 if self.settled() else 0.0)
        LEADER.set_function(lambda: 1.0 if self._took_over else 0.0)

    def informer(
        self,
        kind: str,
        namespace: str = "",
        label_selector: str = "",
        indexes: dict[str, IndexFunc] | None = None,
    ) -> Informer:
        key = (kind, namespace, label_selector)
        informer = self._informers.get(key)
        if informer is None:
            informer = self._informers[key] = Informer(
                self.client,
                kind,
                namespace=namespace,
                label_selector=label_selector,
                resync=self.resync,
                indexes=indexes,
            )
        elif indexes:
            for name, func in indexes.items():
                if name not in informer._index_funcs:
                    informer._index_funcs[name] = func
                    informer._indexes[name] = {}
        return informer

    def add(self, factory: Callable[[Manager], Controller]) -> Controller:
        controller = factory(self)
        for watch in controller.watches():
            informer = self.informer(watch.kind, watch.namespace, watch.label_selector)

            def handler(event: str, obj: Obj, old: Obj | None, _c=controller, _m=watch.mapper) -> None:
                for key in _m(event, obj, old):
                    _c.queue.add(key)

            informer.add_handler(handler)
        self.controllers.append(controller)
        return controller

    def synced(self) -> bool:
        return all(informer.synced() for informer in self._informers.values())

    def settled(self) -> bool:
        """The controllers took over (every cached object was enqueued) and every queue is idle:
        a full reconcile pass has happened and nothing is pending now."""
        return self._took_over and all(controller.queue.idle() for controller in self.controllers)

    def leading(self) -> bool:
        return self.elector is None or self.elector.leading

    def _start_workers(self) -> None:
        self._workers_stop = threading.Event()
        for controller in self.controllers:
            for index in range(controller.workers):
                thread = threading.Thread(
                    target=controller._work,
                    args=(self._workers_stop,),
                    name=f"{controller.name}-{index}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)
        # Everything the caches hold is reconciled once on taking over.
        for informer in self._informers.values():
            for handler in list(informer._handlers):
                for obj in informer.list():
                    handler("MODIFIED", obj, obj)
        self._took_over = True
        log.info("controllers started", extra={"controllers": [c.name for c in self.controllers]})

    def _stop_workers(self) -> None:
        self._took_over = False
        self._workers_stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def start(self, *, sync_timeout: float = 120.0, wait: bool = True) -> None:
        """Start informers and, once their caches are synced and this replica leads, the
        controllers; in background threads, so the webhooks beside it serve at once."""
        for informer in self._informers.values():
            informer.start()

        def campaign() -> None:
            deadline = time.monotonic() + sync_timeout
            while not self.synced() and time.monotonic() < deadline and not self._stop.is_set():
                time.sleep(0.05)
            if self._stop.is_set():
                return
            if self.elector is None:
                self._start_workers()
            else:
                self.elector.run(self._start_workers, self._stop_workers)

        self._campaign = threading.Thread(target=campaign, name="manager", daemon=True)
        self._campaign.start()
        if wait:
            deadline = time.monotonic() + sync_timeout
            while not self.synced() and time.monotonic() < deadline:
                time.sleep(0.05)

    def stop(self) -> None:
        """Graceful shutdown: stop campaigning (releasing the Lease), workers, informers."""
        self._stop.set()
        if self.elector is not None:
            self.elector.stop()
        if self._campaign is not None and self._campaign is not threading.current_thread():
            # The campaign ends by stopping the workers and giving the Lease up; a process that
            # exits before that leaves its successor waiting out the lease duration (15 s).
            self._campaign.join(timeout=self.elector.renew_deadline if self.elector else 5.0)
        self._stop_workers()
        for controller in self.controllers:
            controller.queue.shutdown()
        for informer in self._informers.values():
            informer.stop()
