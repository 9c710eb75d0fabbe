"""Every controller the worker runs, in start order: the classes themselves, so the call graph
from ``worker`` to each reconciler can be followed by reading."""

from __future__ import annotations

from controllers.delivery.artifacts import ModelArtifactReconciler
from controllers.delivery.node_stores import NodeModelStoreWriter
from controllers.nodedevices.check import NodeDevicesCheck
from controllers.nodedevices.fit_labels import NodeFitLabelReconciler
from controllers.pools.cluster_queues import ClusterQueueReconciler
from controllers.pools.devices_labels import DevicesLabelReconciler
from controllers.pools.instance_types import InstanceTypeReconciler
from controllers.pools.local_queues import LocalQueueReconciler
from controllers.pools.node_capacity_keys import NodeCapacityReconciler
from controllers.pools.resource_flavors import ResourceFlavorReconciler
from kube.manager import Controller

CONTROLLERS: tuple[type[Controller], ...] = (
    # The scheduling chain, gates 2 and 4: pools, queues, InstanceTypes and node counting keys.
    ResourceFlavorReconciler,
    InstanceTypeReconciler,
    ClusterQueueReconciler,
    LocalQueueReconciler,
    NodeCapacityReconciler,
    DevicesLabelReconciler,
    # Per-card fit labels the Workload fit pin reads (§6.6).
    NodeFitLabelReconciler,
    # Gate 3: the per-card AdmissionCheck gpustack-node-devices.
    NodeDevicesCheck,
    # Model delivery: artifacts resolved once, and each plugin node's NodeModelStore spec.
    ModelArtifactReconciler,
    NodeModelStoreWriter,
)
