"""Every label, annotation, finalizer, field manager, condition type and reason, named once.

Grouped by the domain that owns them.  Keys with a variable part are functions.
"""

from __future__ import annotations

# --- System ---------------------------------------------------------------------------------------
SYSTEM_NAMESPACE = "gpustack-system"
FIELD_MANAGER = "gpustack-operator"
LEADER_ELECTION_ID = "worker.gpustack.ai"
FINALIZER_CONTROLLED = "gpustack.ai/controlled"
SETTINGS_SECRET = "gpustack-settings"
KUBE_SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")

# --- Node discovery (NFD and the device manager) --------------------------------------------------
LABEL_MANAGED = "gpustack.ai/managed"
LABEL_ACCELERATABLE = "feature.gpustack.ai/acceleratable"
LABEL_CPU_ONLY = "feature.gpustack.ai/cpu-only"
LABEL_OS = "kubernetes.io/os"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_HOSTNAME = "kubernetes.io/hostname"
PREFIX_ACCELERATABLE = "acceleratable.feature.gpustack.ai/"
PREFIX_GENERAL = "general.feature.gpustack.ai/"
PREFIX_CPU_ANNOTATION = "feature.gpustack.ai/cpu-"
LABEL_RDMA_CAPABLE = "feature.gpustack.ai/rdma.capable"
LABEL_RDMA_DISTANCE = "feature.gpustack.ai/rdma.distance"
LABEL_RDMA_NUMA = "feature.gpustack.ai/rdma.numa"
LABEL_FABRIC_DOMAIN = "feature.gpustack.ai/fabric.domain"
LABEL_FABRIC_MEMBERS = "feature.gpustack.ai/fabric.members"
NFD_PCI_PRESENT = "feature.node.kubernetes.io/pci-{vendor}.present"
NODE_FEATURE_RULE_CPU = "gpustack-cpu-info"


def label_accelerator_group(group: str) -> str:
    """``acceleratable.feature.gpustack.ai/<aKey>``: the node offers cards of this group."""
    return PREFIX_ACCELERATABLE + group


def label_accelerator_count(group: str) -> str:
    """``acceleratable.feature.gpustack.ai/<aKey>.count``: cards of this group on the node."""
    return f"{PREFIX_ACCELERATABLE}{group}.count"


def label_general_group(group: str) -> str:
    return PREFIX_GENERAL + group


# --- Topology ------------------------------------------------------------------------------------
LABEL_TOPOLOGY_PROFILE = "topology.gpustack.ai/profile"
LABEL_TOPOLOGY_SOURCE_UID = "topology.gpustack.ai/source-uid"
# On a generated ResourceFlavor whose nodes all moved to another profile: kept while a ClusterQueue
# still lists it (the queue drains before it swaps, B.4 step 7), deleted once none does.
LABEL_FLAVOR_RETIRING = "topology.gpustack.ai/retiring"
ANNOTATION_EMPTY_PLAN_HOLD = "topology.gpustack.ai/empty-plan-hold"
ANNOTATION_DRAIN_PLAN_HOLD = "topology.gpustack.ai/drain-plan-hold"  # value: the stop policy before the drain
# On a ClusterQueue held or drained for a live profile change: "<old profile> -> <new profile>" (several
# comma-separated), so its InstanceType reads "profile change in progress", never "no node serves this pool".
ANNOTATION_PROFILE_CHANGE = "topology.gpustack.ai/profile-change"
ANNOTATION_APPLIED_STOP_POLICY = "schedule.gpustack.ai/applied-stop-policy"
# Set on a deleted Topology Kueue still holds (below): an update makes Kueue look at it again.
ANNOTATION_KUEUE_NUDGED_AT = "topology.gpustack.ai/kueue-nudged-at"
KUEUE_RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
TOPOLOGY_RESERVED_PREFIXES = (
    "kubernetes.io",
    "k8s.io",
    "topology.gpustack.ai",
    "feature.gpustack.ai",
    "fabric.topograph.run",
    "accelerator.topograph.run",
)

# --- Per-card fit labels (Workload pin) ----------------------------------------------------------


FIT_LABEL_DOMAIN = "fit.gpustack.ai"


def is_fit_label(key: str) -> bool:
    """``sliced-max-free-units.fit.gpustack.ai/<aKey>`` and its kin."""
    prefix, sep, _ = key.partition("/")
    return bool(sep) and prefix.endswith("." + FIT_LABEL_DOMAIN)


def label_fit_sliced_max_free_units(group: str) -> str:
    return f"sliced-max-free-units.fit.gpustack.ai/{group}"


def label_fit_shared_free_cards(group: str) -> str:
    return f"shared-free-cards.fit.gpustack.ai/{group}"


def label_fit_exclusive_free_cards(group: str) -> str:
    """How many of the group's unpartitioned cards are whole and free (extends §6.6 to whole cards)."""
    return f"exclusive-free-cards.fit.gpustack.ai/{group}"


def label_fit_partitioned_free_instances(group: str, profile: str) -> str:
    """How many more instances of ``profile`` the group's partitioned cards can place (extends §6.6
    to partitions); the name is ``<aKey>.<profile>``, e.g. ``nvidia-h100-80gb-hbm3.3g.40gb``."""
    return f"partitioned-free-instances.fit.gpustack.ai/{group}.{profile}"


# --- Pools, InstanceTypes and Kueue --------------------------------------------------------------
LABEL_QUEUE_ENTRANCE = "schedule.gpustack.ai/queue-entrance"
LABEL_DERIVED_FROM_NODE = "schedule.gpustack.ai/derived-from-node"
ANNOTATION_QUEUE = "schedule.gpustack.ai/queue"
LABEL_RESOURCE_TYPE = "resource.gpustack.ai/type"
RESOURCE_TYPE_NODES = "nodes"
RESOURCE_TYPE_INSTANCE_TYPES = "instancetypes"
PREFIX_NOTE = "note.gpustack.ai/"
ANNOTATION_CPU_DETAIL = "note.gpustack.ai/cpuDetail"
GENERIC_GROUP = "generic"
NAME_PREFIX = "gpustack--"
LOCAL_QUEUE_PREFIX = "gpustack-fnv64-"

ADMISSION_CHECK_NODE_DEVICES = "gpustack-node-devices"
ADMISSION_CHECK_NODE_DEVICES_CONTROLLER = "worker.gpustack.ai/node-devices"
ADMISSION_CHECK_JOINT = "gpustack-model-deployment-joint"
ADMISSION_CHECK_JOINT_CONTROLLER = "worker.gpustack.ai/model-deployment-joint"

# Kueue's own keys.
KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_WORKLOAD = "kueue.x-k8s.io/workload"
KUEUE_PODSET = "kueue.x-k8s.io/podset"
KUEUE_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_POD_GROUP_FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"
KUEUE_POD_GROUP_SERVING = "kueue.x-k8s.io/pod-group-serving"
KUEUE_ROLE_HASH = "kueue.x-k8s.io/role-hash"
KUEUE_PODSET_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PODSET_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"

# --- Devices and allocation ----------------------------------------------------------------------
ANNOTATION_ACCELERATOR_ALLOCATED = "device.gpustack.ai/accelerator.allocated"
# A card's mode (Devices ``status.groups[].accelerators[].mode``), which is also the code of the
# request family (§3.2) whose grant puts a card in it.  The compiled spelling of these codes is
# fastpath/codes.pxd; tests/unit/test_codes.py ties the two together.
DEVICE_MODE_NONE = 0
DEVICE_MODE_EXCLUSIVE = 1
DEVICE_MODE_SHARED = 2
DEVICE_MODE_SLICED = 3
DEVICE_MODE_PARTITIONED = 4
DEVICE_MODE_VISIBILITY = 5
FAMILY_NAMES = ("none", "exclusive", "shared", "sliced", "partitioned", "visibility")  # by code
FAMILY_CODES = {name: code for code, name in enumerate(FAMILY_NAMES)}

# --- Instances -----------------------------------------------------------------------------------
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_OWNED_BY_INSTANCES = "instance.gpustack.ai/owned-by"  # value: the owning kind's plural
FINALIZER_INSTANCE = "worker.gpustack.ai/instance-protection"
INSTANCE_CONTAINER_MAIN = "main"
INSTANCE_CONTAINER_SSHD = "sshd"
SSH_AUTHORIZED_KEYS_MOUNT = "/var/run/sshd-authorized-keys"
SSH_AUTHORIZED_KEYS_FILE = "authorized_keys"  # the data key of an InstanceSSHPublicKey's Secret
SSH_PORT = 22

# --- ModelDeployment -----------------------------------------------------------------------------
LABEL_APP_NAME = "app.kubernetes.io/name"
LABEL_APP_INSTANCE = "app.kubernetes.io/instance"
LABEL_APP_COMPONENT = "app.kubernetes.io/component"
APP_NAME_MODEL_DEPLOYMENT = "model-deployment"
PART_OF_WORKER = "gpustack-operator-worker"
LABEL_ROLE_KIND = "modeldeployment.gpustack.ai/role-kind"
LABEL_POD_ORDINAL = "modeldeployment.gpustack.ai/pod-ordinal"
LABEL_MEMBER_INDEX = "modeldeployment.gpustack.ai/member-index"
ANNOTATION_POD_SPEC_HASH = "modeldeployment.gpustack.ai/pod-spec-hash"
FINALIZER_MODEL_DEPLOYMENT = "worker.gpustack.ai/model-deployment-protection"
ENV_REPLICA_LEADER_ADDRESS = "GPUSTACK_REPLICA_LEADER_ADDRESS"
ENV_REPLICA_SIZE = "GPUSTACK_REPLICA_SIZE"
ENV_MEMBER_INDEX = "GPUSTACK_MEMBER_INDEX"
RANK_ENV = (ENV_REPLICA_LEADER_ADDRESS, ENV_REPLICA_SIZE, ENV_MEMBER_INDEX)
DEFAULT_SERVING_PORT = 8000
KV_EVENTS_PORTS = (5557, 5558)  # ZMQ publisher and replay of --kv-events-config
VLLM_MOONCAKE_BOOTSTRAP_PORT = 8998  # upstream default; an open point of the spec (Appendix B)
SGLANG_BOOTSTRAP_PORT = 8998  # upstream default; an open point of the spec (Appendix B)
DIRECT_DECODER_ENGINE_PORT = 8200  # the engine behind a managed decoder's routing proxy

# --- KV cache ------------------------------------------------------------------------------------
KVCACHE_PREFIX = "kvcache.gpustack.ai/"
LABEL_KVCACHE_INJECT = "kvcache.gpustack.ai/inject"
ANNOTATION_KVCACHE_BINDING = "kvcache.gpustack.ai/binding"
ANNOTATION_KVCACHE_ENGINE = "kvcache.gpustack.ai/engine"
ANNOTATION_KVCACHE_MANUFACTURER = "kvcache.gpustack.ai/manufacturer"
ANNOTATION_KVCACHE_ROLE = "kvcache.gpustack.ai/role"
ANNOTATION_KVCACHE_CONTAINER = "kvcache.gpustack.ai/container"
ANNOTATION_KVCACHE_LAUNCH_ARGS_FORWARDED = "kvcache.gpustack.ai/launch-args-forwarded"
ANNOTATION_KVCACHE_CLIENT_CONFIG = "kvcache.gpustack.ai/client-config"
ANNOTATION_KVCACHE_INJECTED = "kvcache.gpustack.ai/injected"
KVCACHE_CONFIG_MOUNT = "/etc/gpustack/kvcache"

# --- Model delivery ------------------------------------------------------------------------------
FINALIZER_MODEL_ARTIFACT = "worker.gpustack.ai/model-artifact-protection"
CSI_DRIVER_MODEL = "model.csi.gpustack.ai"
MODEL_MOUNT_PATH = "/var/lib/gpustack/model"
MODEL_CACHE_MOUNT_PATH = "/var/lib/gpustack/model-cache"

# --- Conditions and reasons ----------------------------------------------------------------------
CONDITION_READY = "Ready"
CONDITION_TOPOLOGY_READY = "TopologyReady"
REASON_AWAITING_QUEUE_STATUS = "AwaitingQueueStatus"

# InstanceType phases.
PHASE_ACTIVE = "Active"
PHASE_INACTIVE = "Inactive"
PHASE_DRAINING = "Draining"

# Instance phases.
INSTANCE_PHASES = ("Starting", "Ready", "Stopping", "Stopped", "Deleting")

# ModelDeployment conditions.
MD_CONDITIONS = (
    "DomainRegistered",
    "QuotaReserved",
    "CacheAttached",
    "ReplicasUpToDate",
    "RoleKindsReady",
    "KVEventsPublishing",
    "RouterReady",
    "WeightsReady",
)

# The two admission configurations: the mutating one's name must sort before Kueue's
# (kueue-mutating-webhook-configuration), which hashes Pod resources after our fold (D.7).
MUTATING_CONFIGURATION = "gpustack-worker-mutation"
VALIDATING_CONFIGURATION = "gpustack-worker-validation"
