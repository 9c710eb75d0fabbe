"""``TopologySourceReconciler``: each TopologySource's arm, read and published (topology spec B.3).

One key per source.  The pass reads the arm's inventory — the Nodes' labels (nodeLabels), the
ConfigMap key from the worker namespace's cache (configMap), or one bounded HTTPS ``GET`` when the
poll is due (webhook; between polls the last answer is judged again) — hands it to
:mod:`controllers.topology.source_plan`, and applies the plan: NodeFeatures put whole or deleted,
then the status.  Node labels are never written here; NFD projects the NodeFeatures.

Before it writes anything the pass says what the profile change it leads to will evict or stop
(:mod:`controllers.topology.change_report`): a ``ProfileChangePlanned`` Event (Warning when
Workloads are evicted or Instances stopped) when the report changes, and ``status.profileChange``
with the ``ProfileChange`` condition while the change is pending or under way (until every
ClusterQueue swapped; ``ProfileChangeComplete`` then).

Triggers: a source's spec (not its status), its NodeFeatures (a foreign edit is put back), the
ConfigMaps of the worker namespace, Node creation and deletion, for nodeLabels sources every
Node label change, and our ClusterQueues' flavors, hold and reservations (the report follows the
swap).  Writing sources do not follow Node label drift (B.7 item 4).
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

from api import constants
from api import topology as topo
from controllers.pools import render
from controllers.settings import MIXED_ON_NODE, PROFILE_CHANGE_STOP_POLICY, SettingsReader
from controllers.topology import change_report, fetch
from controllers.topology.source_plan import (
    NAMESPACE,
    Memory,
    Read,
    SourcePlan,
    arm_of,
    name_of,
    owned,
    plan_node_labels,
    plan_snapshot,
    poll_interval,
    seconds,
    status_differs,
    uid_of,
)
from kube import changes
from kube.client import ApiError
from kube.events import NORMAL, WARNING
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.topology.sources")

FIELD_MANAGER = "gpustack-operator/topology-sources"


def _decoded(secret: dict[str, Any] | None, key: str) -> bytes:
    value = ((secret or {}).get("data") or {}).get(key)
    if not value:
        return b""
    try:
        return base64.b64decode(value)
    except (ValueError, TypeError):
        return b""


class TopologySourceReconciler(Controller):
    name = "topology-sources"
    workers = 2  # a webhook read may take up to its timeout; the other sources keep moving

    def __init__(self, manager: Manager, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(manager)
        self.clock = clock
        self.sources = self.informer("TopologySource")
        self.nodes = self.informer("Node")
        self.features = self.informer("NodeFeature", NAMESPACE)
        self.config_maps = self.informer("ConfigMap", NAMESPACE)
        # What a profile change evicts or stops (the report).
        self.flavors = self.informer("ResourceFlavor")
        self.queues = self.informer("ClusterQueue")
        self.workloads = self.informer("Workload")
        self.instances = self.informer("Instance")
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))
        # Per source: the change last told in an Event (None: none since the start, or done).
        self._planned: dict[str, change_report.Told | None] = {}
        self._memory: dict[str, Memory] = {}
        # Webhook arm: the last answer (and the generation it was read for), judged again between polls.
        self._reads: dict[str, tuple[Any, Read]] = {}
        self._reported: dict[str, str] = {}

    # --- triggers ---------------------------------------------------------------------------------

    def _all(self) -> list[Hashable]:
        return [name_of(s) for s in self.sources.list()]

    def watches(self) -> list[Watch]:
        def sources(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            if changes.moved(event, obj, old, ("metadata", "generation"), ("metadata", "deletionTimestamp")):
                return [name_of(obj)]
            return []

        def nodes(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            if event in ("ADDED", "DELETED") or changes.resync(obj, old):
                return self._all()
            if changes.path(obj, "metadata", "labels") != changes.path(old, "metadata", "labels"):
                return [
                    name_of(s)
                    for s in self.sources.list()
                    if (s.get("spec") or {}).get("nodeLabels") is not None
                ]
            return []

        def features(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            uid = changes.path(obj, "metadata", "labels", constants.LABEL_TOPOLOGY_SOURCE_UID)
            if not uid:
                return []
            if event != "DELETED" and not changes.moved(event, obj, old, ("spec",), ("metadata", "labels")):
                return []
            named: list[Hashable] = [name_of(s) for s in self.sources.list() if uid_of(s) == uid]
            return named or [("orphans", uid)]

        def config_maps(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            name = name_of(obj)
            return [
                name_of(s)
                for s in self.sources.list()
                if (
                    (arm_of(s).get("configMapRef") or {}).get("name") == name
                    and "configMap" in (s.get("spec") or {})
                )
                or (arm_of(s).get("caBundleConfigMapRef") or {}).get("name") == name
            ]

        def queues(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            if not render.owned_cluster_queue(obj):
                return []
            if event in ("ADDED", "DELETED") or changes.moved(
                event,
                obj,
                old,
                ("spec", "resourceGroups"),
                ("spec", "stopPolicy"),
                ("metadata", "annotations"),
                ("status", "reservingWorkloads"),
                ("status", "flavorsReservation"),
            ):
                return self._all()
            return []

        return [
            Watch("TopologySource", sources),
            Watch("Node", nodes),
            Watch("NodeFeature", features, namespace=NAMESPACE),
            Watch("ConfigMap", config_maps, namespace=NAMESPACE),
            Watch("ClusterQueue", queues),
        ]

    # --- the pass ---------------------------------------------------------------------------------

    def reconcile(self, key: Hashable) -> float | None:
        if isinstance(key, tuple):  # NodeFeatures of a source that is gone
            self._delete_features(str(key[1]))
            return None
        name = str(key)
        source = self.sources.get(name)
        if source is None or changes.path(source, "metadata", "deletionTimestamp"):
            for uid in list(self._memory):
                if not any(uid_of(s) == uid for s in self.sources.list()):
                    self._memory.pop(uid, None)
                    self._reads.pop(uid, None)
            self._planned.pop(name, None)
            if source is not None:
                self._delete_features(uid_of(source))
            return None
        now = self.clock()
        spec = source.get("spec") or {}
        uid = uid_of(source)
        features = self.features.list()
        if spec.get("nodeLabels") is not None:
            plan = plan_node_labels(source, self.nodes.list(), [f for f in features if owned(f, uid)], now)
        elif isinstance(spec.get("configMap"), dict) or isinstance(spec.get("webhook"), dict):
            read = self._read(source, now)
            plan = plan_snapshot(
                source, self.nodes.list(), features, self.sources.list(), read, self._memory.get(uid), now
            )
            if plan.memory is None:
                self._memory.pop(uid, None)
            else:
                self._memory[uid] = plan.memory
        else:
            return None  # admission refuses a source without exactly one arm
        self._report(source, plan, features, now)
        self._apply(source, plan)
        return plan.requeue

    def _report(self, source: dict, plan: SourcePlan, features: list[dict], now: float) -> None:
        """What the profile change this pass leads to will evict or stop: into the status the pass
        writes, and an Event now, before the NodeFeatures and the status that change the profiles."""
        uid = uid_of(source)
        report = change_report.plan_change(
            source,
            plan.status,
            self.nodes.list(),
            self.sources.list(),
            change_report.published(features, uid),
            change_report.published_after(features, uid, plan.writes, plan.deletes),
            flavors=self.flavors.list(),
            queues=self.queues.list(),
            workloads=self.workloads.list(),
            instances=self.instances.list(),
            policy=self.settings.valid(PROFILE_CHANGE_STOP_POLICY),
            mixed_on_node=self.settings.enabled(MIXED_ON_NODE),
        )
        plan.status = change_report.with_report(source, plan.status, report, now)
        name = name_of(source)
        told = self._planned.get(name)
        if name not in self._planned:  # since the start: a change the stored status reports was told
            reported = any(
                c.get("type") == change_report.CONDITION_PROFILE_CHANGE and c.get("status") == "True"
                for c in (source.get("status") or {}).get("conditions") or []
            )
            told = report.told() if reported else None
        if report.empty:
            if told is not None:
                self.recorder.event(
                    source,
                    NORMAL,
                    change_report.REASON_COMPLETE,
                    "every ClusterQueue swapped to the new profile",
                )
            self._planned[name] = None
            return
        if told is None or not report.told_by(told):
            message = report.message()
            log.info("profile change planned", extra={"source": name, "report": message})
            self.recorder.event(
                source, WARNING if report.evicts else NORMAL, change_report.REASON_PLANNED, message
            )
            told = report.told()
        self._planned[name] = told

    def _read(self, source: dict, now: float) -> Read:
        spec = source.get("spec") or {}
        uid = uid_of(source)
        if isinstance(spec.get("configMap"), dict):
            arm = spec["configMap"]
            ref = arm.get("configMapRef") or {}
            where = f"ConfigMap {ref.get('namespace')}/{ref.get('name')}"
            if ref.get("namespace") != NAMESPACE:
                return Read(now, error=f"{where} is outside the worker namespace {NAMESPACE}")
            config_map = self.config_maps.get(ref.get("name") or "", NAMESPACE)
            if config_map is None:
                return Read(now, error=f"{where} does not exist")
            key = arm.get("key") or ""
            data = (config_map.get("data") or {}).get(key)
            if data is None:
                binary = (config_map.get("binaryData") or {}).get(key)
                if binary is None:
                    return Read(now, error=f"{where} has no key {key!r}")
                try:
                    return Read(now, raw=base64.b64decode(binary))
                except (ValueError, TypeError):
                    return Read(now, error=f"{where} key {key!r} is not base64")
            return Read(now, raw=data.encode())
        arm = spec.get("webhook") or {}
        generation = changes.path(source, "metadata", "generation")
        last = self._reads.get(uid)
        if last is not None and last[0] == generation and now < last[1].at + poll_interval(source):
            return last[1]  # between polls (a NodeFeature or Node event): the last answer again
        read = self._fetch(arm, now)
        self._reads[uid] = (generation, read)
        return read

    def _fetch(self, arm: dict, now: float) -> Read:
        try:
            credentials = self._credentials(arm)
        except fetch.FetchError as error:
            return Read(now, error=str(error))
        url = str(arm.get("url") or "")
        try:
            return Read(now, raw=fetch.fetch(url, credentials, timeout=seconds(arm.get("timeout")) or 10.0))
        except fetch.FetchError as error:
            return Read(now, error=f"GET {url}: {error}")

    def _credentials(self, arm: dict) -> fetch.Credentials:
        def secret(ref: dict, keys: tuple[str, ...]) -> list[bytes]:
            if ref.get("namespace") != NAMESPACE:
                raise fetch.FetchError(
                    f"Secret {ref.get('namespace')}/{ref.get('name')} is outside {NAMESPACE}"
                )
            obj = self.client.get("Secret", ref.get("name") or "", NAMESPACE)
            if obj is None:
                raise fetch.FetchError(f"Secret {NAMESPACE}/{ref.get('name')} does not exist")
            values = [_decoded(obj, k) for k in keys]
            missing = [k for k, v in zip(keys, values, strict=True) if not v]
            if missing:
                raise fetch.FetchError(f"Secret {NAMESPACE}/{ref.get('name')} has no {', '.join(missing)}")
            return values

        token, certificate, key, ca = "", b"", b"", b""
        if arm.get("bearerTokenSecretRef"):
            token = (
                secret(arm["bearerTokenSecretRef"], (topo.SECRET_TOKEN_KEY,))[0]
                .decode("utf-8", "replace")
                .strip()
            )
        elif arm.get("tlsClientCertificateSecretRef"):
            certificate, key = secret(
                arm["tlsClientCertificateSecretRef"], (topo.SECRET_CERT_KEY, topo.SECRET_KEY_KEY)
            )
        ref = arm.get("caBundleConfigMapRef")
        if ref:
            config_map = (
                self.config_maps.get(ref.get("name") or "", NAMESPACE)
                if ref.get("namespace") == NAMESPACE
                else None
            )
            bundle = ((config_map or {}).get("data") or {}).get(topo.CONFIG_MAP_CA_KEY)
            if not bundle:
                raise fetch.FetchError(
                    f"ConfigMap {ref.get('namespace')}/{ref.get('name')} has no {topo.CONFIG_MAP_CA_KEY}"
                )
            ca = bundle.encode()
        return fetch.Credentials(token=token, certificate=certificate, key=key, ca_bundle=ca)

    # --- applying ---------------------------------------------------------------------------------

    def _apply(self, source: dict, plan: SourcePlan) -> None:
        for body in plan.writes:  # a conflict (a concurrent edit) raises: the retry reads it again
            if body["metadata"].get("resourceVersion"):
                self.client.update(body)
            else:
                self.client.create(body)
        for name in plan.deletes:
            self.client.delete("NodeFeature", name, NAMESPACE)
        if plan.writes or plan.deletes:
            log.info(
                "published the topology",
                extra={"source": name_of(source), "written": len(plan.writes), "deleted": len(plan.deletes)},
            )
        if status_differs(source, plan.status):
            self._write_status(source, plan.status)
        ready = next(
            (c for c in plan.status.get("conditions") or [] if c["type"] == topo.CONDITION_READY), None
        )
        if ready is not None and ready["status"] != "True":
            message = f"{ready['reason']}: {ready['message']}"
            if self._reported.get(name_of(source)) != message:
                self._reported[name_of(source)] = message
                self.recorder.event(source, WARNING, ready["reason"], ready["message"])
        else:
            self._reported.pop(name_of(source), None)

    def _write_status(self, source: dict, status: dict) -> None:
        body = {
            "apiVersion": source.get("apiVersion") or "worker.gpustack.ai/v1",
            "kind": "TopologySource",
            "metadata": {"name": name_of(source)},
            "status": status,
        }
        try:
            self.client.apply(body, field_manager=FIELD_MANAGER, subresource="status")
        except ApiError as error:
            if not error.not_found:
                raise

    def _delete_features(self, uid: str) -> None:
        for feature in self.features.list():
            if owned(feature, uid):
                self.client.delete("NodeFeature", name_of(feature), NAMESPACE)
