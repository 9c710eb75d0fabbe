"""The KV-cache vocabulary (kv-cache spec): keys, ports, store spellings, conditions and reasons.

The Pod contract's label and annotation keys are in :mod:`api.constants` (``LABEL_KVCACHE_*``,
``ANNOTATION_KVCACHE_*``); everything else the three kinds, their webhooks, their controllers and
the ModelDeployment's cache wiring name is here, once.  Rendered flags, environment variables and
metrics keep the store's (Mooncake's) spelling; the API says *leader* and *reuse domain*.
"""

from __future__ import annotations

from types import MappingProxyType

from api import constants, setting_names
from api.engines import SETTING_KV_CACHE_DTYPE_OWNED

# --- Kinds ---------------------------------------------------------------------------------------
KIND_BACKEND = "KVCacheBackend"
KIND_POOL = "KVCachePool"
KIND_BINDING = "KVCachePoolBinding"
KIND_MODEL_DEPLOYMENT = "ModelDeployment"

# --- Settings ------------------------------------------------------------------------------------
SETTING_BACKEND_IMAGE = setting_names.KV_CACHE_BACKEND_IMAGE
SETTING_DTYPE_OWNED = SETTING_KV_CACHE_DTYPE_OWNED

# --- Finalizers, ownership, field managers -------------------------------------------------------
FINALIZER_BACKEND = "worker.gpustack.ai/kv-cache-backend-protection"
FINALIZER_POOL = "worker.gpustack.ai/kv-cache-pool-protection"
FINALIZER_BINDING = "worker.gpustack.ai/kv-cache-pool-binding-protection"
# On every object a backend renders; its value is the backend's name.  Deletion finds and judges
# by this key alone, so an object somebody else named alike is never touched.
ANNOTATION_OWNED_BY_BACKEND = "kvcache.gpustack.ai/backend"
LABEL_BACKEND = "kvcache.gpustack.ai/backend"
LABEL_ROLE = "kvcache.gpustack.ai/component"  # leader | member
LABEL_GROUP = "kvcache.gpustack.ai/group"  # the member group index
ROLE_LEADER = "leader"
ROLE_MEMBER = "member"
ROLE_TIER_CLEAN = "tier-clean"  # the cleanup Pods of cleanAfterDelete
ROLE_TIER_LEDGER = "tier-ledger"  # the ConfigMaps the tier survey and cleanup keep their ledgers in
ANNOTATION_NODE = "kvcache.gpustack.ai/node"  # the node a cleanup Pod empties
ANNOTATION_POD_SPEC_HASH = "kvcache.gpustack.ai/pod-spec-hash"
FIELD_MANAGER_BACKEND = "worker.gpustack.ai/kv-cache-backend"
FIELD_MANAGER_POOL = "worker.gpustack.ai/kv-cache-pool"
FIELD_MANAGER_BINDING = "worker.gpustack.ai/kv-cache-pool-binding"

# --- The Pod contract ----------------------------------------------------------------------------
INJECT_TRUE = "true"
INJECT_FALSE = "false"  # the explicit opt-out; a ModelDeployment's Pods carry it (their marker)
ENGINES = ("vLLM", "SGLang")
MANUFACTURER_ASCEND = "ascend"
POD_ROLES = ("Prefill", "Decode")
# Keys a Pod may submit under kvcache.gpustack.ai/ (rule 1): the label and the five annotations.
POD_INPUT_ANNOTATIONS = frozenset(
    {
        constants.ANNOTATION_KVCACHE_BINDING,
        constants.ANNOTATION_KVCACHE_ENGINE,
        constants.ANNOTATION_KVCACHE_MANUFACTURER,
        constants.ANNOTATION_KVCACHE_ROLE,
        constants.ANNOTATION_KVCACHE_CONTAINER,
        constants.ANNOTATION_KVCACHE_LAUNCH_ARGS_FORWARDED,
    }
)
POD_WRITTEN_ANNOTATIONS = (constants.ANNOTATION_KVCACHE_CLIENT_CONFIG, constants.ANNOTATION_KVCACHE_INJECTED)

# --- What injection and the ModelDeployment renderer write (§4) ----------------------------------
CONFIG_VOLUME = "gpustack-kvcache-config"
CONFIG_FILE_NAME = "mooncake.json"
CONFIG_MOUNT = constants.KVCACHE_CONFIG_MOUNT
CONFIG_FILE = f"{CONFIG_MOUNT}/{CONFIG_FILE_NAME}"
METADATA_SERVER = "P2PHANDSHAKE"
CLIENT_MODE = "standalone-store"
CLIENT_LOCAL_BUFFER_BYTES = 128 * 1024 * 1024
CONNECTOR_VLLM = "MooncakeStoreConnector"
CONNECTOR_VLLM_ASCEND = "AscendStoreConnector"
KV_ROLE = MappingProxyType({"": "kv_both", "Prefill": "kv_producer", "Decode": "kv_consumer"})
VEHICLE_FILE = "file"
VEHICLE_ENVIRONMENT = "environment"
ENV_CONFIG_PATH = "MOONCAKE_CONFIG_PATH"
ENV_MASTER = "MOONCAKE_MASTER"
ENV_METADATA_SERVER = "MOONCAKE_TE_META_DATA_SERVER"  # META_DATA: the readable spelling fails silently
ENV_PROTOCOL = "MOONCAKE_PROTOCOL"
ENV_DEVICE = "MOONCAKE_DEVICE"
ENV_GLOBAL_SEGMENT_SIZE = "MOONCAKE_GLOBAL_SEGMENT_SIZE"
ENV_LOCAL_HOSTNAME = "MOONCAKE_LOCAL_HOSTNAME"
ENV_TENANT_ID = "MOONCAKE_TENANT_ID"
ENV_LOCAL_BUFFER_SIZE = "MOONCAKE_LOCAL_BUFFER_SIZE"
ENV_TE_METRIC = "MC_TE_METRIC"
ENV_CLIENT_METRIC_BANDWIDTH = "MC_STORE_CLIENT_METRIC_BANDWIDTH"
ARG_KV_TRANSFER_CONFIG = "--kv-transfer-config"
ARG_HICACHE_STORAGE_BACKEND = "--hicache-storage-backend"
ARG_HICACHE_EXTRA_CONFIG = "--hicache-storage-backend-extra-config"
ARG_ENABLE_HIERARCHICAL_CACHE = "--enable-hierarchical-cache"
ARG_KV_CACHE_DTYPE = "--kv-cache-dtype"
ENV_SGLANG_CONFIG_PATH = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"

# --- Store spellings ------------------------------------------------------------------------------
_STORE_PROTOCOL = MappingProxyType(
    {
        "Auto": "tcp",
        "TCP": "tcp",
        "RDMA": "rdma",
        "EFA": "efa",
        "CANN": "ascend",
        "ROCM": "hip",
        "MUSA": "musa",
        "MACA": "maca",
    }
)
PROTOCOLS = tuple(_STORE_PROTOCOL)


def store_protocol(api_protocol: str | None) -> str:
    """The store's spelling of an API transport (``Auto``/unset → ``tcp``, ``CANN`` → ``ascend``)."""
    return _STORE_PROTOCOL.get(api_protocol or "Auto", (api_protocol or "").lower())


# --- The managed store ----------------------------------------------------------------------------
CLIENT_PORT = 50051
ADMIN_PORT = 9003
MEMBER_HTTP_PORT_BASE = 8080
DEFAULT_KV_LEASE_TTL = "5m"
POLICY_DIR = "/var/lib/mooncake/policy"
POLICY_FILE = f"{POLICY_DIR}/tenant_quotas.yaml"
POLICY_SEED_DIR = "/etc/mooncake/policy-seed"
POLICY_SEED_KEY = "tenant_quotas.yaml"
EMPTY_POLICY = "version: 1\ntenants: []\n"
DEFAULT_LOCAL_BUFFER_SIZE = "1Gi"  # the store's own default, rendered so the request counts it
ALLOCATION_STRATEGY = MappingProxyType({"FreeRatioFirst": "free_ratio_first", "Random": "random"})

# --- Election (§5.1 step 4): the leader campaigns for a Lease; the store's spelling is "HA" ---------
ELECTION_KUBERNETES = "Kubernetes"
ELECTION_NONE = "None"
MEMBER_ADDRESSING_LEASE = "Lease"
HA_BACKEND = "k8s"  # -ha_backend_type: the Kubernetes Lease backend of the store
ENV_POD_NAME = "POD_NAME"
ENV_POD_NAMESPACE = "POD_NAMESPACE"
ENV_POD_IP = "POD_IP"
LEASE_MASTER_SCHEME = "k8s://"  # MOONCAKE_MASTER under Lease addressing: k8s://<namespace>/<lease>

# --- The disk tier (§5.1 step 7) ----------------------------------------------------------------
# The bucket the tier is written in, chosen by the operator (spec §9 leaves it open); rule B11 floors
# capacityPerMember, capacity and keyLimit at one bucket.  512 objects is the most one bucket of the
# 0.3.13.post1 member can hold and still be written (at 513 every bucket write fails with
# FILE_WRITE_FAIL, whatever its bytes: docs/mooncake-master.md); 64 MiB closes a bucket once a member
# has evicted that much, with 512 objects of 128 KiB reaching both bounds together.
TIER_BUCKET_BYTES = 64 * 1024 * 1024
TIER_BUCKET_KEYS = 512
ENV_OFFLOAD_ENABLED = "MOONCAKE_OFFLOAD_ENABLED"
ENV_OFFLOAD_PATH = "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"
ENV_OFFLOAD_BUCKET_BYTES = "MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES"
ENV_OFFLOAD_BUCKET_KEYS = "MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT"
ENV_OFFLOAD_TOTAL_BYTES = "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES"
ENV_OFFLOAD_BUCKET_MAX_TOTAL = "MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE"
ENV_OFFLOAD_TOTAL_KEYS = "MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT"
ENV_OFFLOAD_EVICTION = "MOONCAKE_OFFLOAD_ENABLE_EVICTION"
ENV_OFFLOAD_EVICTION_POLICY = "MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY"
ENV_OFFLOAD_WATERMARK = "MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION"
ENV_OFFLOAD_HIGH = "MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO"
ENV_OFFLOAD_LOW = "MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO"
# The store compares the policy byte for byte and reads anything else as "never evict".
EVICTION_POLICY = MappingProxyType({"FIFO": "fifo", "LRU": "lru"})
TIER_VOLUME = "tier"
TIER_SURVEY_CONTAINER = "tier-survey"
TIER_SURVEY_MOUNT = "/tier"
TIER_CLEAN_MOUNT = "/tier"
TIER_UNMOUNT_PATH = "/api/unmount_local_disk"  # the member's own deregistration, held for the grace
TIER_GRACE_SLACK_S = 60  # a tier group's Pod grace = scaleIn.gracePeriodSeconds + this
TIER_CLEAN_DEADLINE_S = 300  # per node, from that node's cleanup Pod
# Vendor visibility variables a DRAM member blanks (it contributes host memory, never a device).
VISIBILITY_VARIABLES = (
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "MUSA_VISIBLE_DEVICES",
    "METAX_VISIBLE_DEVICES",
    "CNDEV_VISIBLE_DEVICES",
)


def leader_name(backend: str) -> str:
    """The leader Deployment, Service, Lease, and the leader's ServiceAccount, Role and RoleBinding."""
    return f"{backend}-leader"


def member_account_name(backend: str) -> str:
    """The members' ServiceAccount, Role and RoleBinding (under election)."""
    return f"{backend}-member"


def tier_survey_name(backend: str) -> str:
    """The ConfigMap recording each node's first tier survey (the ledger behind TierWasEmpty)."""
    return f"{backend}-tier-survey"


def tier_cleanup_name(backend: str) -> str:
    """The ConfigMap recording each node's cleanAfterDelete outcome while the backend is deleted."""
    return f"{backend}-tier-cleanup"


def member_name(backend: str, index: int) -> str:
    """The DaemonSet of member group ``index``."""
    return f"{backend}-members-{index}"


def policy_seed_name(backend: str) -> str:
    """The read-only seed ConfigMap of a backend's quota policy (rendered by the pool controller)."""
    return f"{backend}-quota-policy"


# --- Phases ---------------------------------------------------------------------------------------
PHASE_PROVISIONING = "Provisioning"
PHASE_READY = "Ready"
PHASE_DEGRADED = "Degraded"
PHASE_ERROR = "Error"
PHASE_DELETING = "Deleting"

# --- Conditions (§6) ------------------------------------------------------------------------------
COND_LEADER_AVAILABLE = "LeaderAvailable"
COND_MEMBERS_MOUNTED = "MembersMounted"
COND_CAPACITY_OBSERVED = "CapacityObserved"
COND_POOL_WRITES = "PoolWrites"
COND_DELETABLE = "Deletable"
COND_ROLLOUT_COMPLETE = "RolloutComplete"
COND_ELECTION_OBSERVED = "ElectionObserved"
COND_TIER_WAS_EMPTY = "TierWasEmpty"
COND_QUOTA_WITHIN_TOTAL = "QuotaWithinTotal"
COND_QUOTA_LEDGER_AVAILABLE = "QuotaLedgerAvailable"
COND_QUOTA_POLICY_WRITABLE = "QuotaPolicyWritable"
COND_CAPACITY_ALLOCATABLE = "CapacityAllocatable"
COND_RELEASABLE = "Releasable"
COND_DOMAIN_EXCLUSIVE = "DomainExclusive"
COND_QUOTA_OBSERVED = "QuotaObserved"
COND_QUOTA_GRANTED = "QuotaGranted"

REASON_LISTING_FAILED = "ListingFailed"
REASON_SEGMENT_LISTING_NOT_SERVED = "SegmentListingNotServed"
REASON_AMBIGUOUS_MEMBER_IDENTITY = "AmbiguousMemberIdentity"
REASON_NO_SEGMENTS = "NoSegments"
REASON_OVERSUBSCRIBED = "Oversubscribed"
REASON_MULTI_TENANCY_DISABLED = "MultiTenancyDisabled"
REASON_LEDGER_UNREACHABLE = "LedgerUnreachable"
REASON_NOTHING_TO_ALLOCATE = "NothingToAllocate"
REASON_LEDGER_NOT_RELEASED = "LedgerNotReleased"
REASON_LEDGER_REQUEST_FAILED = "LedgerRequestFailed"
REASON_HELD_BY_WORKLOADS = "HeldByWorkloads"
REASON_UNENFORCED = "Unenforced"
REASON_ROLLOUT_DONE = "Complete"
REASON_REPLICAS_PENDING = "ReplicasPending"
REASON_ELECTED = "Elected"
REASON_LEASE_NOT_FOUND = "LeaseNotFound"
REASON_NO_HOLDER = "NoHolder"
REASON_HOLDER_EXPIRED = "HolderExpired"
REASON_TIER_EMPTY = "TierEmpty"
REASON_TIER_NOT_EMPTY = "TierNotEmpty"

# --- Events of the disk tier's cleanup (on the Node: the backend is about to be gone) -------------
EVENT_TIER_NOT_CLEANED = "KVCacheTierNotCleaned"
EVENT_TIER_SHARED_PATH = "KVCacheTierSharedPath"
EVENT_TIER_PARTLY_EMPTIED = "KVCacheTierPartlyEmptied"
EVENT_TIER_NOT_EMPTY = "KVCacheTierNotEmpty"  # on the backend, beside TierWasEmpty=False

# --- The ModelDeployment side (model-deployment spec §10) ----------------------------------------
COND_DOMAIN_REGISTERED = "DomainRegistered"
COND_CACHE_ATTACHED = "CacheAttached"
REASON_REGISTERED = "Registered"
REASON_NOT_APPLICABLE = "NotApplicable"
REASON_BINDING_NOT_FOUND = "BindingNotFound"
REASON_BINDING_NOT_READY = "BindingNotReady"
REASON_BINDING_DELETING = "BindingDeleting"
REASON_CACHE_ACTIVE = "CacheActive"
REASON_CACHE_OPERATIONS_FAILING = "CacheOperationsFailing"
REASON_UNMANAGED = "Unmanaged"
REASON_NO_REPLICA_READY = "NoReplicaReady"
REASON_NO_OBSERVATION_AVAILABLE = "NoObservationAvailable"
