"""Gate 3: the ``gpustack-node-devices`` AdmissionCheck controller (devices spec §6.3, §8; D.4/D.5).

It owns the AdmissionCheck ``gpustack-node-devices`` (``spec.controllerName:
worker.gpustack.ai/node-devices``): applied when the controller starts — retried until Kueue's CRD
is served, since the chart cannot ship a Kueue object — and kept ``Active``.  A ClusterQueue lists it
in ``spec.admissionChecksStrategy``; Kueue then adds its entry to every Workload of that queue and,
once the Workload reserves quota, waits for this controller's ``Ready``.

Per Workload (one at a time: a verdict must see the ones written before it):

1. skip unless it holds a reservation, is neither evicted nor finished, and is not ``Ready`` here —
   checked on the cache, then again on an uncached read whose ``resourceVersion`` makes the write
   conditional, so a verdict never lands between Kueue's two eviction writes;
2. gather the ResourceFlavors, Nodes and ``Devices`` from the caches; the bound Pods of the nodes
   the Workload is assigned to uncached (one list per node, up to four: :func:`nodes_to_read`), every
   other node's from the Pod cache (the informer the fit-label reconciler shares, indexed by node
   and by Workload); and the other Workloads from the cache, only those the Workload cache's node
   index assigns one of the nodes the decision reads (all of them when it reads the whole pool) —
   plus every ``Ready`` this controller wrote that the cache does not show yet;
3. :func:`controllers.nodedevices.fit.decide_confirmed` — with the node ledgers and flavor pools of
   the earlier verdicts (:class:`controllers.nodedevices.fit.DecisionCache`), a node's rebuilt only
   when its Pods' events marked it changed or its ``Devices`` moved — answers ``Ready`` or ``Retry``
   (with ``requeueAfterSeconds``: 30).  A ``Ready`` is made again on uncached reads of every node it
   places Pods on (past four nodes, one uncached list of every bound Pod), so a lagging cache can
   delay a Workload but never book a card twice; a Pod holding cards that goes or ends wakes the waiting ones.
   The state is written through the status subresource by server-side apply, field manager
   ``gpustack-node-devices``, only when state or message changed, with an Event on the Workload
   saying why.

Kueue evicts a ``Retry``-ed Workload, resets its checks and re-reserves after the back-off, which
brings it back here.  A ``Devices`` change (the device manager republishes when Pods come and go), a
Node arriving or leaving, or an inflight Workload letting go of its promise re-judge the Workloads
that wait, so a freed card is seen before the back-off ends.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Collection, Hashable, Iterable
from typing import Any, cast

from api import allocation, constants
from api.booleans import node_devices_retry_seconds
from api.objects import Obj
from controllers import admission_checks
from controllers.nodedevices import fit
from controllers.nodedevices.fit_labels import (
    INDEX_INFLIGHT,
    INDEX_NODE,
    INDEX_WORKLOAD,
    INFLIGHT,
    POD_INDEXES,
    POD_SELECTOR,
    WORKLOAD_INDEXES,
    is_fit_label,
    pod_node,
)
from fastpath.ledger import TERMINAL_PHASES
from kube import changes
from kube.client import ApiError
from kube.events import NORMAL, WARNING
from kube.informer import key_of
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.nodedevices.check")

FIELD_MANAGER = "gpustack-node-devices"
CHECK = constants.ADMISSION_CHECK_NODE_DEVICES
CONTROLLER_NAME = constants.ADMISSION_CHECK_NODE_DEVICES_CONTROLLER
CONDITION_ACTIVE = admission_checks.CONDITION_ACTIVE
REASON_READY = "NodeDevicesFit"
REASON_RETRY = "NodeDevicesDoNotFit"
CHECK_KEY: tuple[str, str] = ("", "admissioncheck/" + CHECK)  # never a Workload's (namespace, name)
MESSAGE_LIMIT = 1024
# A Ready this controller wrote is charged as a promise until the Workload cache shows the write.
# The cache shows it within a second or two; a write it never shows (its Workload deleted while the
# cache was away) stops being charged after this long, so a card is not held by nothing for ever.
UNSEEN_WRITE_SECONDS = 60.0
# How long a deleted Workload's uid is remembered, for a verdict written just before the delete whose
# answer comes back after the cache has processed it.
GONE_SECONDS = 300.0


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _holds_cards(pod: Obj) -> bool:
    return bool(((pod.get("metadata") or {}).get("annotations") or {}).get(allocation.ANNOTATION))


def _ended(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def _revision(obj: Obj | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or -1)
    except ValueError:
        return -1


def admission_check() -> Obj:
    """The AdmissionCheck object the worker applies at startup (spec only)."""
    return admission_checks.admission_check(CHECK, CONTROLLER_NAME)


def check_status_patch(workload: Obj, verdict: fit.Verdict, *, retry_after: int, now: str) -> Obj | None:
    """The server-side-apply body that records ``verdict`` in ``workload``'s check entry, or None
    when the entry already says it (same state, message and requeue delay).  The entry's
    ``lastTransitionTime`` moves only when the state does; ``resourceVersion`` and ``uid`` make the
    write conditional on the Workload the verdict was reached for."""
    current = fit.check_state(workload) or {}
    message = verdict.message[:MESSAGE_LIMIT]
    requeue = retry_after if verdict.state == fit.RETRY else None
    if (
        current.get("state") == verdict.state
        and current.get("message") == message
        and current.get("requeueAfterSeconds") == requeue
    ):
        return None
    transition = current.get("lastTransitionTime") if current.get("state") == verdict.state else None
    entry: Obj = {
        "name": CHECK,
        "state": verdict.state,
        "message": message,
        "lastTransitionTime": transition or now,
    }
    if requeue is not None:
        entry["requeueAfterSeconds"] = requeue
    return admission_checks.entry_apply(workload, entry)


EVERY_BOUND_POD = "spec.nodeName!="


def nodes_to_read(workload: Obj) -> list[str]:
    """The nodes whose Pods a verdict reads uncached before it decides: those the accelerator
    PodSets are assigned to, up to ``fit.NODE_READS`` (past that, or for a PodSet judged across its
    flavor's pool, the decision starts from the cache and reads the nodes it places on)."""
    nodes: set[str] = set()
    for ps in fit.podset_demands(workload):
        nodes.update(ps.nodes or ())
    return sorted(nodes) if len(nodes) <= fit.NODE_READS else []


class PodCache:
    """:class:`controllers.nodedevices.fit.PodSource` over the shared Pod informer."""

    def __init__(self, informer: Any) -> None:
        self.informer = informer

    def node_pods(self, node: str) -> list[Obj]:
        return self.informer.by_index(INDEX_NODE, node)

    def workload_pods(self, namespace: str, name: str) -> list[Obj]:
        return self.informer.by_index(INDEX_WORKLOAD, f"{namespace}/{name}")


def workloads_on(workloads: Any, near: Collection[str] | None) -> list[Obj]:
    """The Workloads of ``workloads`` (an informer with :data:`WORKLOAD_INDEXES`) that its node
    index assigns one of the nodes in ``near``, each once; for ``None`` (any node) the inflight
    ones, the only ones a decision charges (with 20,000 Workloads waiting, a pass over every cached
    one took most of a decision over a 10,000-node pool)."""
    if near is None:
        return workloads.by_index(INDEX_INFLIGHT, INFLIGHT)
    found: dict[tuple[str, str], Obj] = {}
    for node in near:
        for obj in workloads.by_index(INDEX_NODE, node):
            found[key_of(obj)] = obj
    return list(found.values())


class NodeDevicesCheck(Controller):
    """``NodeDevicesAdmissionReconciler``: answers the ``gpustack-node-devices`` check."""

    name = "node-devices-check"
    workers = 1  # one Workload at a time
    crd_retry_seconds = 5.0  # while Kueue's AdmissionCheck CRD is not served

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        # Kueue waits this long before re-reserving a Retry-ed Workload (30 s unless configured).
        self.retry_after_seconds = node_devices_retry_seconds()
        # The Workload informer the fit-label reconciler shares, indexed by the nodes each live
        # Workload is assigned: a decision reads the promises on its nodes, not the fleet's.
        self.workloads = manager.informer("Workload", indexes=WORKLOAD_INDEXES)
        self.flavors = self.informer("ResourceFlavor")
        self.nodes = self.informer("Node")
        self.devices = self.informer("Devices")
        self.checks = self.informer("AdmissionCheck")
        self.pods = PodCache(manager.informer("Pod", label_selector=POD_SELECTOR, indexes=POD_INDEXES))
        self.release_terminated = allocation.release_terminated_from_env()
        # Node ledgers and flavor pools kept between verdicts, keyed by resourceVersions (one
        # decision at a time: workers = 1, and the lock below besides).
        self.decisions = fit.DecisionCache()
        self._decide_lock = threading.Lock()
        self._lock = threading.Lock()
        # Ready verdicts written, with the clock at the write, until the cache shows them.
        self._ready_written: dict[tuple[str, str], tuple[Obj, float]] = {}
        self._gone: dict[str, float] = {}  # uids of deleted Workloads, with the clock at the delete
        self.clock = time.monotonic
        self._waiting: set[tuple[str, str]] = set()  # Workloads that need a verdict
        self._changed: set[str] = set()  # nodes whose cached Pods moved since the last decision
        self._crd_misses = 0
        self.queue.add(CHECK_KEY)

    # Watches ------------------------------------------------------------------------------------------

    def watches(self) -> list[Watch]:
        return [
            Watch("Workload", self._on_workload),
            Watch("Devices", self._on_devices),
            Watch("Node", self._on_node),
            Watch("ResourceFlavor", self._on_flavor),
            Watch("AdmissionCheck", self._on_check),
            Watch("Pod", self._on_pod, label_selector=POD_SELECTOR),
        ]

    def _on_pod(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
        """Mark the nodes whose cached Pods moved; a Pod holding cards that goes, or ends, may
        free them (a Pod without an allocation record frees none: its end wakes nothing)."""
        nodes = set(pod_node(obj))
        if old is not None:
            nodes.update(pod_node(old))
        if not nodes:
            return ()
        with self._lock:
            self._changed.update(nodes)
        if not _holds_cards(obj):
            return ()
        if event == "DELETED" or (old is not None and _ended(obj) and not _ended(old)):
            return self._waiting_keys()
        return ()

    def _on_workload(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
        key = key_of(obj)
        uid = (obj.get("metadata") or {}).get("uid")
        with self._lock:
            if event == "DELETED" and uid:
                self._forget(uid)
            remembered = self._remembered(key)
            if remembered is not None and (
                event == "DELETED"
                or uid != (remembered.get("metadata") or {}).get("uid")
                or _revision(obj) >= _revision(remembered)
            ):
                del self._ready_written[key]
            if event != "DELETED" and fit.needs_verdict(obj):
                self._waiting.add(key)
                wake = [key]
            else:
                self._waiting.discard(key)
                wake = []
        if old is not None and fit.is_inflight(old) and (event == "DELETED" or not fit.is_inflight(obj)):
            return self._waiting_keys()  # a promise let go: the waiting ones may fit now
        return wake

    def _on_devices(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
        if (
            event != "MODIFIED"
            or old is None
            or obj.get("status") != old.get("status")
            or obj.get("spec") != old.get("spec")
        ):
            return self._waiting_keys()
        return ()

    def _on_node(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
        # Fit-label-only updates (written by the fit-label reconciler) must not wake gate 3 (§11.22).
        if (
            event != "MODIFIED"
            or old is None
            or changes.labels_moved(obj, old, lambda k: not is_fit_label(k))
        ):
            return self._waiting_keys()
        return ()

    def _on_flavor(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
        if event != "MODIFIED" or old is None or obj.get("spec") != old.get("spec"):
            return self._waiting_keys()
        return ()

    def _on_check(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
        return [CHECK_KEY] if (obj.get("metadata") or {}).get("name") == CHECK else ()

    def _forget(self, uid: str) -> None:
        """Remember a deleted Workload's uid for GONE_SECONDS (the caller holds the lock). The
        entries are in the order of their deletes, so the expired ones are at the front."""
        now = self.clock()
        self._gone.pop(uid, None)
        self._gone[uid] = now
        while True:  # ends at the latest at the uid just added
            first, at = next(iter(self._gone.items()))
            if now - at < GONE_SECONDS:
                return
            del self._gone[first]

    def _remembered(self, key: tuple[str, str]) -> Obj | None:
        """The Ready this controller wrote for ``key`` that the cache does not show yet, if any."""
        entry = self._ready_written.get(key)
        return entry[0] if entry is not None else None

    def _waiting_keys(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._waiting)

    # Reconcile ----------------------------------------------------------------------------------------

    def reconcile(self, key: Hashable) -> float | None:
        if key == CHECK_KEY:
            return self.ensure_admission_check()
        namespace, name = cast(tuple[str, str], key)
        cached = self.workloads.get(name, namespace)
        if cached is None or not fit.needs_verdict(cached):
            with self._lock:
                self._waiting.discard((namespace, name))
            return None
        workload = self.client.get("Workload", name, namespace)
        if workload is None or not fit.needs_verdict(workload):
            return None
        verdict = self.judge(workload)
        self.record(workload, verdict)
        return float(self.retry_after_seconds) if verdict.state == fit.RETRY else None

    def judge(self, workload: Obj) -> fit.Verdict:
        """Gather the objects and decide: the assigned nodes' Pods uncached, the rest from the Pod
        cache, a ``Ready`` confirmed on uncached reads (:func:`fit.decide_confirmed`)."""
        fresh = {node: self._read_node(node) for node in nodes_to_read(workload)}
        with self._decide_lock:
            with self._lock:
                changed, self._changed = self._changed, set()
            verdict, reread = fit.decide_confirmed(
                workload,
                source=self.pods,
                changed=changed,
                read_node=self._read_node,
                read_all=self._read_all,
                cache=self.decisions,
                fresh=fresh,
                flavors=self.flavors.by_name(),
                nodes=self.nodes.by_name(),
                devices=self.devices.by_name(),
                promises=self.promised,
                release_terminated=self.release_terminated,
            )
        if reread:  # built from uncached reads: the next decision compares them with the cache again
            with self._lock:
                self._changed.update(reread)
        return verdict

    def _read_node(self, node: str) -> list[Obj]:
        listed, _ = self.client.list("Pod", field_selector=f"spec.nodeName={node}", timeout=60)
        return listed

    def _read_all(self) -> list[Obj]:
        listed, _ = self.client.list("Pod", field_selector=EVERY_BOUND_POD, timeout=60)
        return listed

    def promised(self, near: Collection[str] | None) -> list[Obj]:
        """The other Workloads a decision reading the ledgers of ``near`` may have to charge: the
        cached ones the node index assigns one of those nodes (every cached one for ``None``), each
        replaced by the ``Ready`` this controller wrote for it while the cache does not show that
        write yet, and every such write besides (``decide`` charges only the inflight ones that
        reach ``near``)."""
        with self._lock:
            remembered = dict(self._ready_written)
        out = []
        for obj in workloads_on(self.workloads, near):
            written, _ = remembered.pop(key_of(obj), (None, 0.0))
            out.append(written if written is not None and _revision(written) > _revision(obj) else obj)
        now = self.clock()
        for key, (written, at) in remembered.items():  # assigned elsewhere, or not cached yet
            current = self.workloads.get(key[1], key[0])
            if current is None and now - at > UNSEEN_WRITE_SECONDS:
                with self._lock:  # never shown by the cache: its Workload went while it was away
                    if self._remembered(key) is written:
                        del self._ready_written[key]
                continue
            if current is None or _revision(written) > _revision(current):
                out.append(written)
        return out

    def record(self, workload: Obj, verdict: fit.Verdict) -> None:
        """Write ``verdict`` into the Workload's check entry when it changes it."""
        body = check_status_patch(workload, verdict, retry_after=self.retry_after_seconds, now=_now())
        if body is None:
            return
        try:
            written = self.client.apply(body, field_manager=FIELD_MANAGER, subresource="status")
        except ApiError as error:
            if error.conflict or error.not_found:
                # The Workload moved on (or is gone) since the read: judge its new state.
                raise RetryNow(f"workload changed before the verdict was written: {error}") from None
            raise
        key = key_of(workload)
        if verdict.state == fit.READY:
            with self._lock:
                # A delete the cache processed while this write was on its way leaves nothing to
                # promise: remembered, the write would be charged until UNSEEN_WRITE_SECONDS.
                if (written.get("metadata") or {}).get("uid") not in self._gone:
                    self._ready_written[key] = (written, self.clock())
                self._waiting.discard(key)
        log.info(
            "node-devices verdict",
            extra={
                "namespace": key[0],
                "workload": key[1],
                "state": verdict.state,
                "verdict": verdict.message,
            },
        )
        self.recorder.event(
            workload,
            NORMAL if verdict.state == fit.READY else WARNING,
            REASON_READY if verdict.state == fit.READY else REASON_RETRY,
            verdict.message,
        )

    def ensure_admission_check(self) -> float | None:
        """Apply the AdmissionCheck and keep it ``Active``; retry while Kueue's CRD is not served."""
        if apply_admission_check(self.client):
            self._crd_misses = 0
            return None
        self._crd_misses += 1
        if self._crd_misses % 12 == 1:
            log.warning(
                "AdmissionCheck not applied yet: Kueue's CRD is not served",
                extra={"check": CHECK, "attempts": self._crd_misses},
            )
        return self.crd_retry_seconds


def apply_admission_check(client: Any) -> bool:
    """Apply the AdmissionCheck ``gpustack-node-devices`` (spec, field manager
    ``gpustack-node-devices``) and mark it ``Active`` unless it already is.  False when Kueue's CRD
    is not served (yet): the caller retries.  The worker's startup and this controller share it."""
    return admission_checks.apply_active(
        client, CHECK, CONTROLLER_NAME, field_manager=FIELD_MANAGER, reason="Active", log=log
    )


class RetryNow(Exception):
    """Raised to re-queue a Workload at once (with the queue's short per-key back-off)."""
