"""Where each kind lives on the apiserver: group, version, plural, scope.

One table for every reader and writer of the binary (webhook lookups, informers, reconcilers), so a
REST path is never spelled twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from api import GROUP, SETTINGS_GROUP, VERSION


@dataclass(frozen=True, slots=True)
class Resource:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "", name: str = "", subresource: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


NFD = "nfd.k8s-sigs.io"
NFD_VERSION = "v1alpha1"
KUEUE = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"

_TABLE: tuple[Resource, ...] = (
    Resource("Namespace", "", "v1", "namespaces", False),
    Resource("Node", "", "v1", "nodes", False),
    Resource("Pod", "", "v1", "pods", True),
    Resource("Service", "", "v1", "services", True),
    Resource("Secret", "", "v1", "secrets", True),
    Resource("ConfigMap", "", "v1", "configmaps", True),
    Resource("Event", "", "v1", "events", True),
    Resource("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", True),
    Resource("PersistentVolume", "", "v1", "persistentvolumes", False),
    Resource("ServiceAccount", "", "v1", "serviceaccounts", True),
    Resource("Lease", "coordination.k8s.io", "v1", "leases", True),
    Resource("Deployment", "apps", "v1", "deployments", True),
    Resource("DaemonSet", "apps", "v1", "daemonsets", True),
    Resource("Role", "rbac.authorization.k8s.io", "v1", "roles", True),
    Resource("RoleBinding", "rbac.authorization.k8s.io", "v1", "rolebindings", True),
    Resource("RuntimeClass", "node.k8s.io", "v1", "runtimeclasses", False),
    Resource("StorageClass", "storage.k8s.io", "v1", "storageclasses", False),
    Resource("CSIDriver", "storage.k8s.io", "v1", "csidrivers", False),
    Resource("CSINode", "storage.k8s.io", "v1", "csinodes", False),
    Resource("SelfSubjectReview", "authentication.k8s.io", "v1", "selfsubjectreviews", False),
    Resource("TokenReview", "authentication.k8s.io", "v1", "tokenreviews", False),
    Resource("SubjectAccessReview", "authorization.k8s.io", "v1", "subjectaccessreviews", False),
    Resource("CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", False),
    Resource(
        "MutatingWebhookConfiguration",
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    Resource(
        "ValidatingWebhookConfiguration",
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        False,
    ),
    Resource("LocalQueue", KUEUE, KUEUE_VERSION, "localqueues", True),
    Resource("ClusterQueue", KUEUE, KUEUE_VERSION, "clusterqueues", False),
    Resource("ResourceFlavor", KUEUE, KUEUE_VERSION, "resourceflavors", False),
    Resource("Workload", KUEUE, KUEUE_VERSION, "workloads", True),
    Resource("AdmissionCheck", KUEUE, KUEUE_VERSION, "admissionchecks", False),
    Resource("Topology", KUEUE, KUEUE_VERSION, "topologies", False),
    Resource("Setting", SETTINGS_GROUP, "v1", "settings", True),
    Resource("NodeFeature", NFD, NFD_VERSION, "nodefeatures", True),
    Resource("NodeFeatureRule", NFD, NFD_VERSION, "nodefeaturerules", False),
    Resource("Devices", GROUP, VERSION, "devices", False),
    Resource("InstanceType", GROUP, VERSION, "instancetypes", False),
    Resource("InstanceTypeFlavor", GROUP, VERSION, "instancetypeflavors", False),
    Resource("Instance", GROUP, VERSION, "instances", True),
    Resource("InstanceSSHPublicKey", GROUP, VERSION, "instancesshpublickeys", True),
    Resource("InstanceImagePullSecret", GROUP, VERSION, "instanceimagepullsecrets", True),
    Resource("InstancePersistentVolume", GROUP, VERSION, "instancepersistentvolumes", True),
    Resource("InstancePersistentVolumeType", GROUP, VERSION, "instancepersistentvolumetypes", False),
    Resource("ModelDeployment", GROUP, VERSION, "modeldeployments", True),
    Resource("ModelArtifact", GROUP, VERSION, "modelartifacts", True),
    Resource("ModelStore", GROUP, VERSION, "modelstores", False),
    Resource("ModelStoreBinding", GROUP, VERSION, "modelstorebindings", True),
    Resource("NodeModelStore", GROUP, VERSION, "nodemodelstores", False),
    Resource("ModelPrefetch", GROUP, VERSION, "modelprefetches", True),
    Resource("KVCacheBackend", GROUP, VERSION, "kvcachebackends", False),
    Resource("KVCachePool", GROUP, VERSION, "kvcachepools", False),
    Resource("KVCachePoolBinding", GROUP, VERSION, "kvcachepoolbindings", True),
    Resource("TopologySource", GROUP, VERSION, "topologysources", False),
)

BY_KIND: dict[str, Resource] = {r.kind: r for r in _TABLE}


def resource(kind: str) -> Resource:
    try:
        return BY_KIND[kind]
    except KeyError:
        raise KeyError(f"no REST mapping for kind {kind!r}") from None


BY_PLURAL: dict[tuple[str, str], Resource] = {(r.group, r.plural): r for r in _TABLE}


def by_plural(group: str, plural: str) -> Resource:
    """The kind served at ``/apis/<group>/<version>/<plural>`` (``/api/v1/<plural>`` for core)."""
    try:
        return BY_PLURAL[(group, plural)]
    except KeyError:
        raise KeyError(f"no kind is served as {group or 'core'}/{plural}") from None
