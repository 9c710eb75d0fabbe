"""Every controller the worker runs, in start order: the classes themselves, so the call graph
from ``worker`` to each reconciler can be followed by reading."""

from __future__ import annotations

from controllers.delivery.artifacts import ModelArtifactReconciler
from controllers.delivery.md_feature import ArtifactDelivery
from controllers.delivery.model_stores import ModelStoreBindingReconciler, ModelStoreReconciler
from controllers.delivery.node_stores import NodeModelStoreWriter
from controllers.delivery.prefetches import ModelPrefetchReconciler
from controllers.install.settings import SettingStatusReconciler
from controllers.instance.backing import (
    ImagePullSecretReconciler,
    PersistentVolumeReconciler,
    SSHPublicKeyReconciler,
)
from controllers.instance.reconciler import InstanceReconciler
from controllers.kvcache.backend import KVCacheBackendReconciler
from controllers.kvcache.binding import KVCachePoolBindingReconciler
from controllers.kvcache.md_feature import KVCacheFeature
from controllers.kvcache.pool import KVCachePoolReconciler
from controllers.modeldeployment.controller import ModelDeploymentReconciler
from controllers.modeldeployment.extensions import Extensions
from controllers.modeldeployment.joint import JointAdmissionCheck
from controllers.nodedevices.check import NodeDevicesCheck
from controllers.nodedevices.fit_labels import NodeFitLabelReconciler
from controllers.nodedevices.report import NodeDevicesFitReport
from controllers.nodefeatures.reconciler import NodeFeatureReconciler
from controllers.pools.cluster_queues import ClusterQueueReconciler
from controllers.pools.devices_labels import DevicesLabelReconciler
from controllers.pools.instance_type_flavors import InstanceTypeFlavorReconciler
from controllers.pools.instance_types import InstanceTypeReconciler
from controllers.pools.local_queues import LocalQueueReconciler
from controllers.pools.node_capacity_keys import NodeCapacityReconciler
from controllers.pools.resource_flavors import ResourceFlavorReconciler
from controllers.topology.node_profiles import NodeTopologyReconciler
from controllers.topology.required_level import RequiredLevel
from controllers.topology.sources import TopologySourceReconciler
from kube.manager import Controller, Manager


def model_deployment_extensions() -> Extensions:
    """The features a ModelDeployment renders with: the KV cache (``spec.kvCache``), model delivery
    (``spec.model.artifactRef``) and topology placement (``roles[].topology``).  Wired here, so the
    controller imports none of the packages that build on it."""
    return Extensions(cache=KVCacheFeature(), delivery=ArtifactDelivery(), topology=RequiredLevel())


class ModelDeployments(ModelDeploymentReconciler):
    """The ModelDeployment reconciler with this build's features."""

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager, model_deployment_extensions())


CONTROLLERS: tuple[type[Controller], ...] = (
    # Settings: the status echo behind `kubectl get settings`' VALUE column (D.8).
    SettingStatusReconciler,
    # Node discovery: the worker's NodeFeature per node and the gpustack-cpu-info rule (§2.0).
    NodeFeatureReconciler,
    # Topology (B.3, B.4): sources published through NodeFeatures, then each node's profile.
    TopologySourceReconciler,
    NodeTopologyReconciler,
    # The scheduling chain, gates 2 and 4: pools, queues, InstanceTypes and node counting keys.
    ResourceFlavorReconciler,
    InstanceTypeReconciler,
    InstanceTypeFlavorReconciler,
    ClusterQueueReconciler,
    LocalQueueReconciler,
    NodeCapacityReconciler,
    DevicesLabelReconciler,
    # Per-card fit labels the Workload fit pin reads (§6.6).
    NodeFitLabelReconciler,
    # Gate 3: the per-card AdmissionCheck gpustack-node-devices; and why a Workload never fits.
    NodeDevicesCheck,
    NodeDevicesFitReport,
    # KV cache (kv-cache spec §5): the store, its pools and their per-namespace grants.
    KVCacheBackendReconciler,
    KVCachePoolReconciler,
    KVCachePoolBindingReconciler,
    # GPU Instances: the core objects behind the companion kinds, then the Instances themselves.
    SSHPublicKeyReconciler,
    ImagePullSecretReconciler,
    PersistentVolumeReconciler,
    InstanceReconciler,
    # Model delivery: artifacts resolved once, and each plugin node's NodeModelStore spec; the pool
    # layer's status, the grants' accounting, and warming with its pins.
    ModelArtifactReconciler,
    NodeModelStoreWriter,
    ModelStoreReconciler,
    ModelStoreBindingReconciler,
    ModelPrefetchReconciler,
    # ModelDeployments: the joint AdmissionCheck, then the deployments' Pods, Services and status.
    JointAdmissionCheck,
    ModelDeployments,
)
