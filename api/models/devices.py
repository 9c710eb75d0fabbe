"""``Devices``: one node's accelerator inventory (spec) and allocation ledger (status).

Follows ``api/worker/v1alpha1/devices.go`` of the reference implementation: cluster-scoped, named
after its Node, ``spec.groups[]`` keyed by (``id``, ``manufacturer``) with the per-card capability
(logical and physical slicing, partition profiles and their empty-card placements), and
``spec.interfaces[]`` keyed by ``name`` for the RDMA inventory. ``status.groups[]`` is the ledger:
per card the allocation ``mode`` (0 None, 1 Exclusive, 2 Shared, 3 Sliced, 4 Partitioned; 5
Visibility is never written), ``allocated``/``remaining`` units out of 1,600,000, and for
partitioned cards the per-profile ``allocatedProfiles``/``remainingProfiles``.

Our addition, from the devices spec (§2.1): ``status.groups[].accelerators[].allocatedSlices``, the
number of logical slices a card hosts, which the stored reference type does not carry yet. And for
``kubectl``: the short name ``devs``, the ``gpustack`` category and an ``Age`` column, where the
reference's CRD has none of them (docs/kubectl.md).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from api.models.base import (
    AGE,
    CRD,
    Int32,
    Int64,
    PrinterColumn,
    Resource,
    Schema,
    Time,
    UInt32,
    UInt64,
    field,
)


class DeviceEthernet(Schema):
    """RoCE addressing of a card's own network port."""

    ip: str = field(required=True)
    subnet_mask: str = field(alias="subnetMask", required=True)
    gateway: str = field(required=True)


class DeviceFabric(Schema):
    """The scale-up fabric domain a card is in (NVLink/MNNVL, an Ascend super pod over UB); the
    domain itself is the cards sharing ``kind`` and ``id``, across nodes."""

    kind: str = field(required=True, doc="The interconnect: nvlink, ub or xgmi.")
    id: str = field(required=True, doc="The domain's identity, comparable across nodes.")
    clique_id: str | None = field(
        alias="cliqueId", doc="The partition inside the domain whose members can address one another."
    )
    member_count: UInt32 | None = field(alias="memberCount", doc="How many members the domain reports.")


class DeviceTopology(Schema):
    """Where a card sits: PCI coordinates, NUMA and CPU affinity, and its fabric domain."""

    pci_bus_id: str = field(alias="pciBusId", required=True)
    pci_root_id: str = field(alias="pciRootId", required=True)
    pci_class: str = field(alias="pciClass", required=True)
    numa_affinity: str = field(alias="numaAffinity", required=True)
    cpu_affinity: str = field(alias="cpuAffinity", required=True)
    roce: DeviceEthernet | None = None
    pci_switches: list[str] | None = field(alias="pciSwitches", list_type="atomic")
    fabric: DeviceFabric | None = None


class AcceleratorPlacement(Schema):
    """A contiguous run ``[start, start+length)`` of memory slices (or compute units)."""

    start: Int32 = field(required=True)
    length: Int32 = field(required=True)


class AcceleratorPhysicalSlicedProfile(Schema):
    """One hardware partition profile a card offers, e.g. ``3g.40gb``."""

    name: str = field(required=True)
    memory_mib: Int64 = field(alias="memoryMib", required=True)
    compute_slices: Int32 = field(alias="computeSlices", required=True)
    memory_slices: Int32 = field(alias="memorySlices", required=True)
    count: Int32 = field(required=True)
    placements: list[AcceleratorPlacement] | None = field(list_type="atomic")


class AcceleratorLogicalSliced(Schema):
    """A card's logical (software) slicing capability."""

    cores_percentage_overcommit: bool | None = field(alias="coresPercentageOvercommit")
    count: Int32 | None = None


class AcceleratorPhysicalSliced(Schema):
    """A card's hardware partitioning capability; ``count`` is the largest per-profile count."""

    profiles: list[AcceleratorPhysicalSlicedProfile] | None = field(list_type="map", map_keys=("name",))
    count: Int32 | None = None


class AcceleratorStatus(Schema):
    """A card's health and slicing capability as detected."""

    unhealthy: bool = field(required=True)
    logical_sliced: AcceleratorLogicalSliced | None = field(alias="logicalSliced")
    physical_sliced: AcceleratorPhysicalSliced | None = field(alias="physicalSliced")


class Accelerator(Schema):
    """One card: its identity, logical index, driver numbering, topology and status."""

    id: str = field(required=True)
    index: UInt32 = field(required=True)
    physical_indexes: list[UInt32] = field(alias="physicalIndexes", required=True)
    topology: DeviceTopology = field(required=True)
    status: AcceleratorStatus = field(required=True)


class AcceleratorSlicedLogicalDetail(Schema):
    cores_percentage_overcommit: bool | None = field(alias="coresPercentageOvercommit")
    count: Int32 | None = None


class AcceleratorSlicedPhysicalDetailProfile(Schema):
    name: str = field(required=True)
    count: Int32 | None = None
    memory_mib: Int64 | None = field(alias="memoryMib")


class AcceleratorSlicedPhysicalDetail(Schema):
    profiles: list[AcceleratorSlicedPhysicalDetailProfile] | None = field(list_type="map", map_keys=("name",))
    count: Int32 | None = None


class AcceleratorSlicedDetail(Schema):
    """A group's slicing capability summed over its cards (static; not availability)."""

    logical: AcceleratorSlicedLogicalDetail | None = None
    physical: AcceleratorSlicedPhysicalDetail | None = None


class DevicesGroup(Schema):
    """Cards of one model on the node."""

    id: str = field(required=True)
    manufacturer: str = field(required=True)
    name: str = field(required=True)
    memory: UInt64 = field(required=True, doc="Memory per card, in MiB.")
    cores: UInt32 | None = None
    driver_version: str | None = field(alias="driverVersion")
    runtime_version: str | None = field(alias="runtimeVersion")
    compute_capability: str | None = field(alias="computeCapability")
    family: str | None = None
    accelerators: list[Accelerator] | None = field(list_type="map", map_keys=("id",))
    accelerator_sliced_detail: AcceleratorSlicedDetail | None = field(alias="acceleratorSlicedDetail")


class DeviceInterfaceLink(Schema):
    """The outcome of verifying an RDMA link."""

    state: Literal["ok", "unverified", "failed"] = field(required=True)
    reason: str | None = None
    first_seen_time: Time | None = field(alias="firstSeenTime")


class DeviceInterfaceVirtualFunction(Schema):
    """One SR-IOV virtual function, nested under its physical function."""

    name: str = field(required=True)
    pci_bus_id: str | None = field(alias="pciBusId")
    numa_affinity: str | None = field(alias="numaAffinity")
    cpu_affinity: str | None = field(alias="cpuAffinity")
    mtu: Int32 | None = None
    up: bool | None = None
    rdma: bool | None = None
    rdma_device: str | None = field(alias="rdmaDevice")
    link: DeviceInterfaceLink | None = None


class DeviceInterface(Schema):
    """One network interface of the node, RDMA facts included."""

    name: str = field(required=True)
    bus: str | None = None
    pci_bus_id: str | None = field(alias="pciBusId")
    pci_root_id: str | None = field(alias="pciRootId")
    pci_switches: list[str] | None = field(alias="pciSwitches", list_type="atomic")
    pci_vendor: str | None = field(alias="pciVendor")
    pci_device: str | None = field(alias="pciDevice")
    numa_affinity: str | None = field(alias="numaAffinity")
    cpu_affinity: str | None = field(alias="cpuAffinity")
    mtu: Int32 | None = None
    up: bool | None = None
    virtual: bool | None = None
    rdma: bool | None = None
    rdma_device: str | None = field(alias="rdmaDevice")
    sriov: bool | None = None
    virtual_functions: list[DeviceInterfaceVirtualFunction] | None = field(
        alias="virtualFunctions", list_type="atomic"
    )
    link: DeviceInterfaceLink | None = None


class DevicesSpec(Schema):
    """What the node has: accelerator groups and network interfaces."""

    groups: list[DevicesGroup] = field(required=True, list_type="map", map_keys=("id", "manufacturer"))
    interfaces: list[DeviceInterface] | None = field(list_type="map", map_keys=("name",))


class AcceleratorProfileCount(Schema):
    """A partition profile and a count of instances (allocated or still buildable)."""

    name: str = field(required=True)
    count: Int32 | None = None


class AcceleratorAllocation(Schema):
    """One card's ledger entry (also the per-Pod allocation record's shape)."""

    id: str = field(required=True)
    index: UInt32 = field(required=True)
    mode: Literal[0, 1, 2, 3, 4, 5] = field(
        required=True,
        doc="0 None, 1 Exclusive, 2 Shared, 3 Sliced, 4 Partitioned, 5 Visibility (never in status).",
    )
    allocated: Int32 | None = None
    remaining: Int32 | None = None
    allocated_slices: Int32 | None = field(alias="allocatedSlices", ge=0)
    allocated_profiles: list[AcceleratorProfileCount] | None = field(
        alias="allocatedProfiles", list_type="map", map_keys=("name",)
    )
    remaining_profiles: list[AcceleratorProfileCount] | None = field(
        alias="remainingProfiles", list_type="map", map_keys=("name",)
    )
    allocated_physical_profile: str | None = field(alias="allocatedPhysicalProfile")
    allocated_physical_placements: list[AcceleratorPlacement] | None = field(
        alias="allocatedPhysicalPlacements", list_type="atomic"
    )
    allocated_physical_id: str | None = field(alias="allocatedPhysicalID")
    allocated_logical_placements: list[AcceleratorPlacement] | None = field(
        alias="allocatedLogicalPlacements", list_type="atomic"
    )


class DevicesAllocationGroup(Schema):
    """The ledger of one group."""

    id: str = field(required=True)
    manufacturer: str = field(required=True)
    accelerators: list[AcceleratorAllocation] | None = field(list_type="map", map_keys=("id",))


class DevicesStatus(Schema):
    groups: list[DevicesAllocationGroup] | None = field(list_type="map", map_keys=("id", "manufacturer"))


class Devices(Resource):
    """A node's accelerator inventory and allocation ledger, named after the Node."""

    __crd__: ClassVar[CRD] = CRD(
        kind="Devices",
        plural="devices",
        singular="devices",
        scope="Cluster",
        short_names=("devs",),
        columns=(AGE, PrinterColumn("Groups", ".spec.groups[*].id", priority=1)),
    )

    spec: DevicesSpec = field(required=True)
    status: DevicesStatus | None = None
