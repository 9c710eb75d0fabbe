"""Per-card fit labels on Nodes (``NodeFitLabelReconciler``, devices spec §6.6), keyed by node.

One label per family and accelerator group (``<aKey>``), computed with gate 3's own predicates
(``fastpath.fit_labels``):

- ``sliced-max-free-units.fit.gpustack.ai/<aKey>``: the largest ``remaining`` over the group's
  cards that can take a slice and have a free slot (``0`` when all are full);
- ``shared-free-cards.fit.gpustack.ai/<aKey>``: the group's cards that can still grant a share;
- ``exclusive-free-cards.fit.gpustack.ai/<aKey>``: its cards that are whole and free;
- ``partitioned-free-instances.fit.gpustack.ai/<aKey>.<profile>``: free placements of each profile
  on its partitioned cards.

The spec names the first two; the others extend it to every family (docs/scheduling.md).  The
Workload fit pin (``webhooks.workload``) reads them; without them a pinned Workload fits no node.

What they count is what a *new* Workload could still get: the node's ledger (its ``Devices``
status, charged at least as much as its Pods' allocation records say) **minus the promises of
Workloads that hold a reservation on the node** and whose Pods do not hold their cards yet — gate
3's inflight accounting, applied to every live reservation.  So the label drops as soon as Kueue
reserves a node's last card, and the Workload that lost a race for it is kept off that node at its
next attempt (Kueue requeues a ``Retry`` after 30 s; the label moves within the 3 s window).

They are removed when the group has no such card or the node is not managed, patched onto the
Node directly (not through NFD), and written only on change after a 3-second coalescing window, so
a burst of ledger updates costs one Node write.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from api import allocation, constants
from controllers.nodedevices import fit
from fastpath import fit_labels
from fastpath.ledger import Book, group_keys
from kube import changes
from kube.client import ApiError
from kube.informer import IndexFunc
from kube.manager import Controller, Manager, Watch

FIELD_MANAGER = "gpustack-operator/node-fit-labels"
COALESCE_SECONDS = 3.0
INDEX_NODE = "node"
POD_SELECTOR = constants.KUEUE_PODSET  # Pods Kueue made part of a Workload: the only ones promised
is_fit_label = constants.is_fit_label


def assigned_nodes(workload: Mapping[str, Any]) -> list[str]:
    """The nodes a live Workload's hostname-level topology assignments name (index function)."""
    if not fit.live(workload):
        return []
    nodes: set[str] = set()
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ():
        if isinstance(assignment, Mapping):
            nodes.update(fit.hostname_counts(assignment.get("topologyAssignment")) or ())
    return sorted(nodes)


INFLIGHT = "true"


def inflight(workload: Mapping[str, Any]) -> list[str]:
    """``[INFLIGHT]`` for a Workload whose cards are promised before its Pods hold them
    (:func:`fit.is_inflight`; index function): a decision over a whole pool charges those, and
    reads them here instead of passing over every Workload of the fleet."""
    return [INFLIGHT] if fit.is_inflight(workload) else []


def pod_node(pod: Mapping[str, Any]) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


INDEX_WORKLOAD = "workload"
INDEX_INFLIGHT = "inflight"


# The Pod informer this reconciler and gate 3 share (whichever asks first creates it): its indexes.
POD_INDEXES: dict[str, IndexFunc] = {INDEX_NODE: pod_node, INDEX_WORKLOAD: fit.pod_workload}
# The Workload informer they share: its indexes.
WORKLOAD_INDEXES: dict[str, IndexFunc] = {INDEX_NODE: assigned_nodes, INDEX_INFLIGHT: inflight}


def desired_fit_labels(
    node: Mapping[str, Any],
    devices: Mapping[str, Any] | None,
    *,
    pods: Iterable[Mapping[str, Any]] = (),
    workloads: Iterable[Mapping[str, Any]] = (),
    flavors: Mapping[str, Mapping[str, Any]] | None = None,
    release_terminated: bool = True,
) -> dict[str, str]:
    """The fit labels the node should carry (none when unmanaged or without a ledger): its ledger
    with ``pods``' records merged in, less the promises of ``workloads`` reserved on it."""
    labels = changes.path(node, "metadata", "labels") or {}
    if devices is None or labels.get(constants.LABEL_MANAGED) != "true":
        return {}
    name = changes.name_of(node)
    pods = list(pods)
    book = Book({name: devices}, {name: pods}, release_terminated=release_terminated)
    held = fit.held_pods(pods)
    vram: dict[str, int] = {}
    for workload in workloads:
        if fit.live(workload):
            fit.charge_inflight(workload, book, held, flavors or {}, {name: devices}, vram)
    out: dict[str, str] = {}
    for group in group_keys(dict(devices)):
        ledger = book.ledger(name, group)
        if ledger is not None:
            out.update(fit_labels.fit_labels(ledger))
    return out


def fit_label_patch(node: Mapping[str, Any], want: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch of ``metadata.labels``: set what differs, delete what is stale."""
    have = {k: v for k, v in (changes.path(node, "metadata", "labels") or {}).items() if is_fit_label(k)}
    patch: dict[str, str | None] = {k: v for k, v in want.items() if have.get(k) != v}
    patch.update({k: None for k in have if k not in want})
    return patch


def _promise(workload: Mapping[str, Any] | None) -> tuple:
    """What of a Workload moves a node's labels: whether it is live, and where it is assigned."""
    if workload is None:
        return (False, ())
    return (fit.live(workload), tuple(assigned_nodes(workload)))


class NodeFitLabelReconciler(Controller):
    name = "node-fit-labels"
    workers = 2

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.nodes = self.informer("Node")
        self.devices = self.informer("Devices")
        self.flavors = self.informer("ResourceFlavor")
        self.workloads = manager.informer("Workload", indexes=WORKLOAD_INDEXES)
        self.pods = manager.informer("Pod", label_selector=POD_SELECTOR, indexes=POD_INDEXES)
        self.release_terminated = allocation.release_terminated_from_env()

    def watches(self) -> list[Watch]:
        def later(names: Iterable[str]) -> list[str]:
            for name in names:
                self.queue.add_after(name, COALESCE_SECONDS)
            return []

        def nodes(event: str, obj: dict, old: dict | None) -> list[str]:
            if event == "DELETED":
                return []
            if changes.resync(obj, old) or event == "ADDED":
                return [changes.name_of(obj)]
            # Our own label writes wake nothing; a managed flip or a stray edit of ours does.
            if changes.labels_moved(obj, old, lambda k: k == constants.LABEL_MANAGED or is_fit_label(k)):
                return later([changes.name_of(obj)])
            return []

        def devices(event: str, obj: dict, old: dict | None) -> list[str]:
            if changes.moved(event, obj, old, ("spec",), ("status",)):
                return later([changes.name_of(obj)])
            return []

        def workloads(event: str, obj: dict, old: dict | None) -> list[str]:
            before, after = _promise(old), _promise(None if event == "DELETED" else obj)
            if before == after:
                return []
            return later(set(before[1]) | set(after[1]))

        def pods(event: str, obj: dict, old: dict | None) -> list[str]:
            # A Pod moves a label when it lands on a node or when its cards become held (its
            # promise turns into ledger), or when it goes.
            if event == "DELETED" or changes.moved(
                event, obj, old, ("spec", "nodeName"), ("metadata", "annotations", allocation.ANNOTATION)
            ):
                return later(pod_node(obj))
            return []

        return [
            Watch("Node", nodes),
            Watch("Devices", devices),
            Watch("Workload", workloads),
            Watch("Pod", pods, label_selector=POD_SELECTOR),
        ]

    def reconcile(self, key: Hashable) -> float | None:
        name = str(key)
        node = self.nodes.get(name)
        if node is None:
            return None
        want = desired_fit_labels(
            node,
            self.devices.get(name),
            pods=self.pods.by_index(INDEX_NODE, name),
            workloads=self.workloads.by_index(INDEX_NODE, name),
            flavors=self.flavors.by_name(),
            release_terminated=self.release_terminated,
        )
        patch = fit_label_patch(node, want)
        if not patch:
            return None
        try:
            self.client.patch("Node", name, {"metadata": {"labels": patch}}, field_manager=FIELD_MANAGER)
        except ApiError as error:
            if not error.not_found:
                raise
        return None
