"""``Instance`` (an accelerator-backed container workspace) and its companion kinds
``InstanceSSHPublicKey``, ``InstanceImagePullSecret`` and ``InstancePersistentVolume``.

Follows ``api/worker/v1alpha1/instance.go``: ``spec`` carries ``type`` and inlines the template
(``image``, ``imagePullPolicy``, ``command``, ``privileged``, ``ports``, ``env``, ``resources``,
``volumeMount``, ``imagePullSecret``, ``additionalVolumes``), then ``volume``, ``sshPublicKey``,
``stop`` and ``nodeName``. ``InstanceSSHPublicKey`` follows ``api/worker/v1/instance_ssh_public_key.go``
(``spec.displayName``, ``spec.description``, ``spec.data``); ``InstanceImagePullSecret`` follows
``api/worker/v1/instance_image_pull_secret.go`` and ``InstancePersistentVolume``
``api/worker/v1/instance_persistent_volume.go``.

Each companion kind is backed by a core object of the same name in the same namespace (a Secret, a
``kubernetes.io/dockerconfigjson`` Secret, a PersistentVolumeClaim) that the operator writes from it
and owns; the Instance's Pod mounts or names the core object.

Deliberate deviations:

- ``spec.resources.cpu``, ``.ram`` and ``.localStorage`` are optional here, where the Go type holds
  them as required values: the Instance webhook derives them from the InstanceType, and the
  published examples omit them. Absent reads as the Go zero value ("derive it").
- ``spec.additionalVolumes[].model.artifactRef`` (model-delivery spec §4.3) is an additional volume
  source, mounting a ModelArtifact read-only.
- The companion kinds are served as CRDs, not by an aggregated API server, so each object is stored
  beside its core object.  ``InstanceImagePullSecret.spec.password`` stays write-only: once the
  backing Secret holds it, the operator removes it from the object.
- ``status.conditions`` carries one condition, ``Ready`` (the phase ``Ready`` as a condition), which
  the Go type lacks, so ``kubectl wait --for=condition=Ready`` works on an Instance.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from api.models.base import AGE, CRD, Int32, PrinterColumn, Quantity, Resource, Rule, Schema, field, frozen
from api.models.common import (
    ABSOLUTE_PATH,
    PROTOCOL,
    PULL_POLICY,
    Condition,
    EnvVar,
    HostIP,
    HostPathVolumeSource,
    LocalObjectReference,
    PodIP,
    conditions_field,
)
from api.models.devices import DevicesAllocationGroup


class InstancePort(Schema):
    """A container port the Instance exposes (a NodePort Service is created for it)."""

    port: Int32 = field(required=True)
    protocol: PROTOCOL | None = field(crd_default="TCP")
    name: str | None = field(max_length=16)


class InstanceResources(Schema):
    """What the Instance asks for; CPU, RAM and storage are derived from the InstanceType when absent."""

    cpu: Quantity | None = field(pointer=True)
    ram: Quantity | None = field(pointer=True)
    local_storage: Quantity | None = field(alias="localStorage", pointer=True)
    accelerator: Quantity | None = field(
        pointer=True, nullable=True, doc="Whole cards; defaulted to 1 on an accelerated type."
    )
    accelerator_sliced_memory_percentage: Int32 | None = field(
        alias="acceleratorSlicedMemoryPercentage",
        ge=0,
        le=100,
        doc="A logical slice's VRAM share; 0 is no slice.",
    )
    accelerator_sliced_cores_percentage: Int32 | None = field(
        alias="acceleratorSlicedCoresPercentage", ge=0, le=100, doc="A logical slice's compute share."
    )
    accelerator_partitioned_profile: str | None = field(
        alias="acceleratorPartitionedProfile",
        max_length=64,
        doc="A hardware partition profile, e.g. 3g.40gb.",
    )


class InstanceEphemeralVolume(Schema):
    capacity: Quantity = field(required=True)


class InstanceVolume(Schema):
    """The workspace volume: exactly one of ``ephemeral`` and ``persistent``."""

    ephemeral: InstanceEphemeralVolume | None = None
    persistent: LocalObjectReference | None = None


class ModelVolumeSource(Schema):
    """A ModelArtifact mounted read-only (hub weights arrive through the node's model cache)."""

    artifact_ref: LocalObjectReference = field(alias="artifactRef", required=True)


class InstanceAdditionalVolume(Schema):
    """A volume mounted besides the workspace; exactly one source."""

    mount_path: str = field(alias="mountPath", required=True, max_length=1024, pattern=ABSOLUTE_PATH)
    read_only: bool | None = field(alias="readOnly")
    sub_path: str | None = field(alias="subPath", max_length=1024)
    persistent: LocalObjectReference | None = None
    config_map: LocalObjectReference | None = field(alias="configMap")
    secret: LocalObjectReference | None = None
    host_path: HostPathVolumeSource | None = field(alias="hostPath")
    model: ModelVolumeSource | None = None


class InstanceSpec(Schema):
    """The Instance: its type, container template, workspace and access."""

    __k8s_rules__: ClassVar[tuple[Rule, ...]] = (
        frozen(
            "volume",
            "spec.volume is immutable, even while the Instance is stopped: its workspace is its data; "
            "create another Instance to use another volume",
            optional=True,
        ),
    )

    display_name: str | None = field(alias="displayName", max_length=64)
    description: str | None = field(max_length=1024)
    type: str = field(required=True, doc="The InstanceType that provisions the Instance.")
    image: str = field(required=True)
    image_pull_policy: PULL_POLICY | None = field(alias="imagePullPolicy", crd_default="IfNotPresent")
    command: list[str] | None = field(list_type="atomic")
    privileged: bool | None = None
    ports: list[InstancePort] | None = field(list_type="map", map_keys=("port", "protocol"))
    env: list[EnvVar] | None = field(list_type="map", map_keys=("name",))
    resources: InstanceResources | None = None
    volume_mount: str | None = field(
        alias="volumeMount", crd_default="/workspace", max_length=1024, pattern=ABSOLUTE_PATH
    )
    image_pull_secret: LocalObjectReference | None = field(alias="imagePullSecret")
    additional_volumes: list[InstanceAdditionalVolume] | None = field(
        alias="additionalVolumes", list_type="atomic"
    )
    volume: InstanceVolume | None = None
    ssh_public_key: LocalObjectReference | None = field(alias="sshPublicKey")
    stop: bool | None = field(doc="Stops the Instance; set by the operator when its InstanceType drains.")
    node_name: str | None = field(alias="nodeName", max_length=253)


class InstanceServicePort(InstancePort):
    """A spec port and the node port its Service got."""

    node_port: Int32 | None = field(alias="nodePort")


class InstanceStatus(Schema):
    phase: str | None = field(doc="Starting, Ready, Stopping, Stopped, Deleting, or a Pod-derived summary.")
    phase_message: str | None = field(alias="phaseMessage")
    node_name: str | None = field(alias="nodeName")
    access_addresses: list[str] | None = field(alias="accessAddresses")
    host_ips: list[HostIP] | None = field(alias="hostIPs")
    pod_ips: list[PodIP] | None = field(alias="podIPs")
    ports: list[InstanceServicePort] | None = None
    allocations: list[DevicesAllocationGroup] | None = None
    conditions: list[Condition] | None = conditions_field()


class Instance(Resource):
    """An accelerator-backed container workspace, optionally reachable over SSH."""

    __crd__: ClassVar[CRD] = CRD(
        kind="Instance",
        plural="instances",
        scope="Namespaced",
        short_names=("inst",),
        columns=(
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Type", ".spec.type"),
            PrinterColumn("Node", ".status.nodeName"),
            AGE,
        ),
    )

    spec: InstanceSpec = field(required=True)
    status: InstanceStatus | None = None


class InstanceSSHPublicKeySpec(Schema):
    display_name: str | None = field(alias="displayName", max_length=64)
    description: str | None = field(max_length=1024)
    data: str | None = field(doc="One OpenSSH public key line.")


class InstanceSSHPublicKey(Resource):
    """An SSH public key an Instance's SSH sidecar authorizes."""

    __crd__: ClassVar[CRD] = CRD(
        kind="InstanceSSHPublicKey",
        plural="instancesshpublickeys",
        scope="Namespaced",
        status=False,
        columns=(AGE,),
    )

    spec: InstanceSSHPublicKeySpec | None = None


class InstanceImagePullSecretSpec(Schema):
    """Registry credentials; ``registry``, ``username`` and ``password`` are written together."""

    display_name: str | None = field(alias="displayName", max_length=64)
    description: str | None = field(max_length=1024)
    registry: str | None = field(max_length=253, doc="The registry host, e.g. registry.example.com.")
    username: str | None = field(max_length=1024)
    password: str | None = field(
        max_length=8192, doc="Write-only: moved into the backing Secret and then removed from here."
    )
    email: str | None = field(max_length=320)


class InstanceImagePullSecret(Resource):
    """Registry credentials an Instance's Pod pulls its image with (a dockerconfigjson Secret)."""

    __crd__: ClassVar[CRD] = CRD(
        kind="InstanceImagePullSecret",
        plural="instanceimagepullsecrets",
        scope="Namespaced",
        status=False,
        columns=(
            PrinterColumn("Registry", ".spec.registry"),
            PrinterColumn("Username", ".spec.username"),
            AGE,
        ),
    )

    spec: InstanceImagePullSecretSpec | None = None


ACCESS_MODE = Literal["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod"]


class InstancePersistentVolumeSpec(Schema):
    """A claim for a persistent workspace; its storage class, size and access mode are fixed."""

    __k8s_rules__: ClassVar[tuple[Rule, ...]] = (
        frozen("type", "spec.type is immutable: create another InstancePersistentVolume", optional=True),
        frozen(
            "capacity", "spec.capacity is immutable: create another InstancePersistentVolume", optional=True
        ),
        frozen(
            "accessMode",
            "spec.accessMode is immutable: create another InstancePersistentVolume",
            optional=True,
        ),
    )

    display_name: str | None = field(alias="displayName", max_length=64)
    description: str | None = field(max_length=1024)
    type: str | None = field(
        pointer=True,
        max_length=253,
        doc="The StorageClass that provisions the volume; the default one if unset.",
    )
    capacity: Quantity | None = field(crd_default="20Gi", doc="The size of the claim.")
    access_mode: ACCESS_MODE | None = field(alias="accessMode", pointer=True)


class ObjectReference(Schema):
    """A reference to an object (``core.ObjectReference``)."""

    __k8s_map_type__: ClassVar[str | None] = "atomic"

    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    api_version: str | None = field(alias="apiVersion")
    resource_version: str | None = field(alias="resourceVersion")
    field_path: str | None = field(alias="fieldPath")


class InstancePersistentVolumeStatus(Schema):
    phase: str | None = field(doc="The claim's phase: Pending, Bound or Lost.")
    volume: ObjectReference | None = field(doc="The PersistentVolume bound to the claim.")


class InstancePersistentVolume(Resource):
    """A persistent workspace volume (a PersistentVolumeClaim of the same name)."""

    __crd__: ClassVar[CRD] = CRD(
        kind="InstancePersistentVolume",
        plural="instancepersistentvolumes",
        scope="Namespaced",
        columns=(
            PrinterColumn("Capacity", ".spec.capacity"),
            PrinterColumn("Type", ".spec.type"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Volume", ".status.volume.name"),
            AGE,
        ),
    )

    spec: InstancePersistentVolumeSpec = field(required=True)
    status: InstancePersistentVolumeStatus | None = None
