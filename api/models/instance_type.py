"""``InstanceType`` (one pool and its capacity) and ``InstanceTypeFlavor`` (the catalog of pools).

Follows ``api/worker/v1alpha1/instance_type.go``: the spec groups the admin-editable fields
(``displayName``, ``description``, ``inactive``) before the identity (``acceleratorGroup``,
``generalGroup``, ``acceleratable``, ``os``, ``arch``, ``unitResources``, ``localStorage``); the
status carries the phase, the entrance (LocalQueue name), the observed hardware ``detail`` and the
four views ``accelerator`` (EX), ``acceleratorShared`` (SH), ``acceleratorSliced`` (SL),
``acceleratorPartitioned`` (PT) plus ``cpu``, each ``{onceMaxRequest, remaining, capacity}``.

Our additions:

- ``status.acceleratorPartitioned.allocatedProfiles`` / ``remainingProfiles`` (devices spec §7):
  per-profile partition counts summed over the pool.
- ``status.detail.runtimeVersion`` / ``runtimeVersions`` (model-deployment spec §8): the lowest
  accelerator runtime version the pool's nodes report, and all of them, lowest first; the runner
  image formula reads them (the stored reference type has neither).
- ``status.unitSummary`` (``8/64Gi/100Gi``), ``status.acceleratorSummary`` (``1/2 2/27 100/270 0/0``)
  and ``status.cpuSummary`` (``48/72``): the combined printer columns, written by the controller,
  because a CRD can only print JSONPath columns (the reference serves them through a table
  converter on its aggregated API).

``InstanceTypeFlavor`` follows the devices spec (§2.3), which splits the pool key into
``generalGroup`` and ``acceleratorGroup`` like InstanceType does; the stored reference type still
carries a single ``group``.
"""

from __future__ import annotations

from typing import ClassVar

from api.models.base import AGE, CRD, PrinterColumn, Quantity, Resource, Rule, Schema, field, frozen
from api.models.devices import AcceleratorProfileCount, AcceleratorSlicedDetail


def _frozen_message(name: str) -> str:
    return (
        f"spec.{name} is immutable: only spec.displayName, spec.description and spec.inactive may change "
        "on an InstanceType; to change its identity create another InstanceType"
    )


class InstanceTypeUnitResources(Schema):
    """The CPU and RAM of one unit (one whole accelerator on an accelerated type)."""

    cpu: str | None = field(max_length=64, doc="Unit CPU cores, e.g. 8 (exactly 1 on a CPU-only type).")
    ram: str | None = field(max_length=64, doc="Unit RAM, e.g. 64Gi.")


class InstanceTypeSpec(Schema):
    """What the pool is: editable labels first, then the immutable identity."""

    __k8s_rules__: ClassVar[tuple[Rule, ...]] = (
        frozen("acceleratorGroup", _frozen_message("acceleratorGroup"), optional=True),
        frozen("generalGroup", _frozen_message("generalGroup"), optional=True),
        frozen("acceleratable", _frozen_message("acceleratable"), optional=False),
        frozen("os", _frozen_message("os"), optional=False),
        frozen("arch", _frozen_message("arch"), optional=False),
        frozen("unitResources", _frozen_message("unitResources"), optional=False),
        frozen("localStorage", _frozen_message("localStorage"), optional=False),
    )

    display_name: str | None = field(alias="displayName", max_length=64)
    description: str | None = field(max_length=1024)
    inactive: bool | None = field(doc="Takes the pool out of service: its ClusterQueue is held.")
    accelerator_group: str | None = field(alias="acceleratorGroup", max_length=63)
    general_group: str | None = field(alias="generalGroup", max_length=253)
    acceleratable: bool = field(required=True)
    os: str = field(required=True, max_length=63)
    arch: str = field(required=True, max_length=63)
    unit_resources: InstanceTypeUnitResources = field(alias="unitResources", required=True)
    local_storage: str = field(alias="localStorage", required=True, max_length=64)


class InstanceTypeCPUCache(Schema):
    l1i: str | None = None
    l1d: str | None = None
    l2: str | None = None
    l3: str | None = None


class InstanceTypeCPUFields(Schema):
    """The CPU descriptor, inlined wherever it appears (Go ``json:",inline"``)."""

    physical_cores: str | None = field(alias="physicalCores")
    threads_per_physical_core: str | None = field(alias="threadsPerPhysicalCore")
    logical_cores: str | None = field(alias="logicalCores")
    stepping: str | None = None
    clock_speed: str | None = field(alias="clockSpeed")
    max_clock_speed: str | None = field(alias="maxClockSpeed")
    cache_line: str | None = field(alias="cacheLine")
    cache: InstanceTypeCPUCache | None = None


class InstanceTypeAcceleratorCPU(InstanceTypeCPUFields):
    """The host CPU of an accelerated pool."""

    manufacturer: str | None = None
    product: str | None = None
    family: str | None = None


class InstanceTypeDetail(InstanceTypeCPUFields):
    """Observed hardware; a non-empty ``manufacturer`` means the detail is ready."""

    manufacturer: str | None = None
    product: str | None = None
    family: str | None = None
    memory: str | None = None
    cores: str | None = None
    compute_capability: str | None = field(alias="computeCapability")
    runtime_version: str | None = field(
        alias="runtimeVersion", doc="Our addition: the lowest accelerator runtime version the pool reports."
    )
    runtime_versions: list[str] | None = field(
        alias="runtimeVersions",
        list_type="atomic",
        doc="Our addition: every runtime version the pool reports, lowest first.",
    )
    sliced_detail: AcceleratorSlicedDetail | None = field(alias="slicedDetail")
    cpu: InstanceTypeAcceleratorCPU | None = None


class InstanceTypeResource(Schema):
    """One capacity view: the largest single request, what remains, the total."""

    once_max_request: Quantity | None = field(alias="onceMaxRequest", pointer=True)
    remaining: Quantity | None = field(pointer=True)
    capacity: Quantity | None = field(pointer=True)


class InstanceTypePartitionedResource(InstanceTypeResource):
    """The PT view, with per-profile sums (``remainingProfiles`` lists every offered profile)."""

    allocated_profiles: list[AcceleratorProfileCount] | None = field(
        alias="allocatedProfiles", list_type="map", map_keys=("name",)
    )
    remaining_profiles: list[AcceleratorProfileCount] | None = field(
        alias="remainingProfiles", list_type="map", map_keys=("name",)
    )


class InstanceTypeStatus(Schema):
    """The pool as observed: phase, entrance, hardware detail and the four capacity views."""

    detail: InstanceTypeDetail | None = None
    entrance: str | None = field(doc="The LocalQueue name a workload puts in kueue.x-k8s.io/queue-name.")
    phase: str = field(required=True, doc="Active, Inactive or Draining.")
    phase_message: str | None = field(alias="phaseMessage")
    accelerator: InstanceTypeResource = field(required=True, doc="EX: whole free cards.")
    accelerator_shared: InstanceTypeResource = field(
        alias="acceleratorShared", required=True, doc="SH: shares."
    )
    accelerator_sliced: InstanceTypeResource = field(
        alias="acceleratorSliced", required=True, doc="SL: VRAM %."
    )
    accelerator_partitioned: InstanceTypePartitionedResource = field(
        alias="acceleratorPartitioned", required=True, doc="PT: partition instances."
    )
    cpu: InstanceTypeResource = field(required=True)
    unit_summary: str | None = field(
        alias="unitSummary", doc="Our addition: unit CPU/RAM/storage, e.g. 8/64Gi/100Gi."
    )
    accelerator_summary: str | None = field(
        alias="acceleratorSummary",
        doc="Our addition: onceMaxRequest/remaining of EX SH SL PT, e.g. 1/2 2/27 100/270 0/0.",
    )
    cpu_summary: str | None = field(
        alias="cpuSummary", doc="Our addition: onceMaxRequest/capacity of cpu, e.g. 48/72."
    )


class InstanceType(Resource):
    """A pool of like nodes behind one isolated queue; its name is its ClusterQueue's."""

    __crd__: ClassVar[CRD] = CRD(
        kind="InstanceType",
        plural="instancetypes",
        scope="Cluster",
        short_names=("instype",),
        columns=(
            PrinterColumn("Entrance", ".status.entrance"),
            PrinterColumn("Unit(CPU/RAM)/Storage", ".status.unitSummary"),
            PrinterColumn("Accelerator(EX/SH/SL/PT)", ".status.acceleratorSummary"),
            PrinterColumn("CPU", ".status.cpuSummary"),
            PrinterColumn("Phase", ".status.phase"),
            AGE,
            PrinterColumn("Partitions", ".status.acceleratorPartitioned.remainingProfiles", priority=1),
        ),
    )

    spec: InstanceTypeSpec | None = None
    status: InstanceTypeStatus | None = None


class InstanceTypeFlavorSpec(Schema):
    """One pool in the catalog, os/arch-agnostic."""

    general_group: str | None = field(alias="generalGroup")
    accelerator_group: str | None = field(alias="acceleratorGroup")
    acceleratable: bool = field(required=True)
    manufacturer: str | None = None
    product: str | None = None
    family: str | None = None
    memory: str | None = None
    cores: str | None = None
    sliceable: bool | None = None


class InstanceTypeFlavor(Resource):
    """A read-only catalog entry of an existing pool, for authoring InstanceTypes against."""

    __crd__: ClassVar[CRD] = CRD(
        kind="InstanceTypeFlavor",
        plural="instancetypeflavors",
        scope="Cluster",
        short_names=("instypeflavor",),
        status=False,
        columns=(
            PrinterColumn("General-Group", ".spec.generalGroup"),
            PrinterColumn("Accelerator-Group", ".spec.acceleratorGroup"),
            PrinterColumn("Acceleratable", ".spec.acceleratable", "boolean"),
            PrinterColumn("Manufacturer", ".spec.manufacturer"),
            PrinterColumn("Product", ".spec.product"),
            PrinterColumn("Family", ".spec.family"),
            PrinterColumn("Memory", ".spec.memory"),
            PrinterColumn("Cores", ".spec.cores"),
            PrinterColumn("Sliceable", ".spec.sliceable", "boolean"),
            AGE,
        ),
    )

    spec: InstanceTypeFlavorSpec | None = None
