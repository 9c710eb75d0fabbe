"""``ModelDeployment``: inference-engine roles, each ``replicas`` instances of ``size`` Pods.

Follows ``api/worker/v1alpha1/model_deployment.go`` at the revision the model-deployment spec
targets: ``spec.model`` (served name, optional ``artifactRef``), ``spec.engine`` (``vLLM`` | ``SGLang``
and a free-form version), optional ``kvCache`` (a KVCachePoolBinding in this namespace),
``kvTransfer``, ``router`` and ``roles`` (a list-map keyed by ``name``). The status carries the phase,
conditions, endpoint, per-role counts, the attached reuse domain, the router contract, the resolved
weights and ``roleSummary``.

Added from the published README example: ``spec.engine.image``, the image every role runs unless
it names its own (the stored type has only ``name`` and ``version``; the README applies it).

Deliberately left out: the later revision's ``roles[].shmSize`` and ``roles[].elasticEp`` and the
status ``retirement``, per-role ``parallelism`` and ``endpoints`` views (model-deployment spec,
Appendix A: out of scope). An object carrying them is refused as carrying unknown fields.

Frozen at creation (CEL transition rules; the webhook repeats them with its own wording): the model,
the engine name, the cache attachment, the router name in place, the set of role names, and each
role's kind, size, instanceType, resources and command. ``roles`` carries a schema bound of 16
items to keep those rules within the apiserver's CEL budget; the 10-role limit and its explanation
stay the webhook's.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from api.models.base import (
    AGE,
    CRD,
    Argument,
    Int32,
    Int64,
    PrinterColumn,
    Quantity,
    Resource,
    Rule,
    Schema,
    field,
)
from api.models.common import (
    ABSOLUTE_PATH,
    PROTOCOL,
    PULL_POLICY,
    RELATIVE_PATH,
    Condition,
    EnvVar,
    HostPathVolumeSource,
    LocalObjectReference,
    conditions_field,
)

ROLE_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
ROLE_KIND = Literal["Server", "Prefill", "Decode"]
TRANSFER_PROTOCOL = Literal["Auto", "TCP", "RDMA", "EFA", "CANN", "ROCM"]
ROUTER_NAME = Literal["llm-d-router", "vllm-router", "sglang-gateway"]

_IDENTITY = "is part of what makes this deployment; a different value is a different deployment: create it instead of editing this one"


class ModelDeploymentModel(Schema):
    """What the engine serves, and optionally where its weights come from."""

    name: str = field(required=True, min_length=1, max_length=253, doc="The served model name.")
    artifact_ref: LocalObjectReference | None = field(
        alias="artifactRef", doc="A ModelArtifact in this namespace."
    )


class ModelDeploymentEngine(Schema):
    name: Literal["vLLM", "SGLang"] = field(required=True)
    version: str | None = field(
        min_length=1, max_length=64, doc="Free-form; required when a role names no image."
    )
    image: str | None = field(
        max_length=512, doc="The image every role runs unless it names its own; none is synthesized then."
    )


class ModelDeploymentKVCache(Schema):
    """Attachment to a shared KV cache through a KVCachePoolBinding in this namespace."""

    pool_ref: LocalObjectReference = field(alias="poolRef", required=True)
    connector: Literal["Mooncake"] | None = field(crd_default="Mooncake")


class ModelDeploymentKVTransfer(Schema):
    """The direct prefill-to-decode leg; unset renders tcp."""

    protocol: TRANSFER_PROTOCOL | None = None


class ModelDeploymentRouter(Schema):
    """The request router in front of the roles."""

    name: ROUTER_NAME = field(required=True)
    replicas: Int32 | None = field(pointer=True, ge=1, doc="Absent means one.")
    image: str | None = field(max_length=512)
    extra_args: list[str] | None = field(alias="extraArgs", list_type="atomic")
    image_pull_policy: PULL_POLICY | None = field(alias="imagePullPolicy")
    image_pull_secrets: list[LocalObjectReference] | None = field(
        alias="imagePullSecrets", list_type="atomic", max_length=32
    )
    request_timeout_seconds: Int32 | None = field(alias="requestTimeoutSeconds", pointer=True, ge=1)
    disaggregation_threshold_tokens: Int32 | None = field(
        alias="disaggregationThresholdTokens",
        pointer=True,
        ge=0,
        doc="llm-d-router only; 0 disables splitting.",
    )


class ModelDeploymentRoleResources(Schema):
    """What one Pod of the role asks of accelerators and fabric interfaces."""

    accelerator: Quantity | None = field(
        pointer=True, doc="Cards per Pod; defaulted to 1 on an accelerated type."
    )
    accelerator_sliced_memory_percentage: Int32 | None = field(
        alias="acceleratorSlicedMemoryPercentage", ge=0, le=100
    )
    accelerator_sliced_cores_percentage: Int32 | None = field(
        alias="acceleratorSlicedCoresPercentage", ge=0, le=100
    )
    accelerator_partitioned_profile: str | None = field(alias="acceleratorPartitionedProfile", max_length=64)
    interface: Quantity | None = field(pointer=True, doc="Whole fabric interfaces per Pod.")


class ModelDeploymentPort(Schema):
    port: Int32 = field(required=True, ge=1, le=65535)
    protocol: PROTOCOL | None = field(crd_default="TCP")


class ModelDeploymentAdditionalVolume(Schema):
    """A volume mounted beside the operator's own; one source (an entry with none is skipped)."""

    mount_path: str = field(alias="mountPath", required=True, max_length=1024, pattern=ABSOLUTE_PATH)
    read_only: bool | None = field(alias="readOnly")
    sub_path: str | None = field(alias="subPath", max_length=1024, pattern=RELATIVE_PATH)
    config_map: LocalObjectReference | None = field(alias="configMap")
    secret: LocalObjectReference | None = None
    host_path: HostPathVolumeSource | None = field(alias="hostPath")


class ModelDeploymentRoleTopology(Schema):
    required_level: str | None = field(
        alias="requiredLevel", max_length=317, doc="A topology level label key."
    )


class ModelDeploymentRole(Schema):
    """One engine role: ``replicas`` independent instances of ``size`` Pods each."""

    __k8s_rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.size == oldSelf.size",
            "size is fixed at creation; change replicas, or create a new deployment for another size",
            field_path=".size",
        ),
        Rule("self.kind == oldSelf.kind", f"kind {_IDENTITY}", field_path=".kind"),
        Rule(
            "self.instanceType == oldSelf.instanceType",
            f"instanceType {_IDENTITY}",
            field_path=".instanceType",
        ),
        Rule(
            "has(self.resources) == has(oldSelf.resources) && (!has(self.resources) || self.resources == oldSelf.resources)",
            f"resources {_IDENTITY}",
            field_path=".resources",
        ),
        Rule(
            "has(self.command) == has(oldSelf.command) && (!has(self.command) || self.command == oldSelf.command)",
            f"command {_IDENTITY} (a merge patch restating the role without command removes it)",
            field_path=".command",
        ),
    )

    name: str = field(required=True, min_length=1, max_length=63, pattern=ROLE_NAME)
    kind: ROLE_KIND | None = field(crd_default="Server")
    replicas: Int32 | None = field(crd_default=1, ge=1, le=1024, doc="Independent serving instances.")
    size: Int32 | None = field(crd_default=1, ge=1, le=64, doc="Pods per instance; fixed at creation.")
    instance_type: str = field(alias="instanceType", required=True, min_length=1, max_length=253)
    resources: ModelDeploymentRoleResources | None = None
    image: str | None = field(max_length=512)
    image_pull_policy: PULL_POLICY | None = field(alias="imagePullPolicy")
    image_pull_secrets: list[LocalObjectReference] | None = field(
        alias="imagePullSecrets", list_type="atomic", max_length=32
    )
    privileged: bool | None = None
    ports: list[ModelDeploymentPort] | None = field(list_type="map", map_keys=("port", "protocol"))
    additional_volumes: list[ModelDeploymentAdditionalVolume] | None = field(
        alias="additionalVolumes", list_type="atomic"
    )
    command: list[Argument] | None = field(list_type="atomic", max_length=128, doc="Take-over argv.")
    extra_args: list[str] | None = field(alias="extraArgs", list_type="atomic")
    env: list[EnvVar] | None = field(list_type="map", map_keys=("name",))
    topology: ModelDeploymentRoleTopology | None = None
    termination_grace_period_seconds: Int64 | None = field(
        alias="terminationGracePeriodSeconds", pointer=True, ge=15, le=3600
    )


class ModelDeploymentSpec(Schema):
    __k8s_rules__: ClassVar[tuple[Rule, ...]] = (
        Rule("self.model == oldSelf.model", f"spec.model {_IDENTITY}", field_path=".model"),
        Rule(
            "self.engine.name == oldSelf.engine.name",
            f"spec.engine.name {_IDENTITY}",
            field_path=".engine.name",
        ),
        Rule(
            "has(self.kvCache) == has(oldSelf.kvCache) && (!has(self.kvCache) || self.kvCache == oldSelf.kvCache)",
            f"spec.kvCache {_IDENTITY}",
            field_path=".kvCache",
        ),
        Rule(
            "!has(self.router) || !has(oldSelf.router) || self.router.name == oldSelf.router.name",
            "spec.router.name cannot change in place: remove spec.router, then add it back naming the other router",
            field_path=".router.name",
        ),
        Rule(
            "self.roles.size() == oldSelf.roles.size() && self.roles.all(r, oldSelf.roles.exists(o, o.name == r.name))",
            "the set of roles is fixed at creation: roles cannot be added, removed or renamed; "
            "create another deployment for another set",
            field_path=".roles",
        ),
    )

    model: ModelDeploymentModel = field(required=True)
    engine: ModelDeploymentEngine = field(required=True)
    kv_cache: ModelDeploymentKVCache | None = field(alias="kvCache")
    roles: list[ModelDeploymentRole] = field(
        required=True, list_type="map", map_keys=("name",), min_length=1, max_length=16
    )
    router: ModelDeploymentRouter | None = None
    kv_transfer: ModelDeploymentKVTransfer | None = field(alias="kvTransfer")


class ModelDeploymentRoleStatus(Schema):
    name: str = field(required=True)
    desired: Int32 = field(required=True, doc="Instances the spec asks for.")
    ready: Int32 = field(required=True, doc="Instances with every member Ready.")
    quota_reserved: Int32 = field(alias="quotaReserved", required=True)
    unmanaged: bool = field(required=True, doc="The role took the command line over.")
    kind: ROLE_KIND = field(required=True)
    assigned_flavors: list[str] | None = field(alias="assignedFlavors", list_type="atomic")


class ModelDeploymentKVCacheDomain(Schema):
    name: str = field(required=True, max_length=63)
    block_size: Int32 = field(alias="blockSize", required=True)
    dtype: str = field(required=True)


class ModelDeploymentKVCacheStatus(Schema):
    """The reuse domain attached, echoed from the Binding; absent until resolved."""

    binding: str = field(required=True)
    pool: str = field(required=True)
    domain: ModelDeploymentKVCacheDomain = field(required=True)


class ModelDeploymentRouterKVEvents(Schema):
    endpoint: str = field(required=True, max_length=512)
    replay_endpoint: str | None = field(alias="replayEndpoint", max_length=512)
    topic: str | None = None


class ModelDeploymentRouterRoleStatus(Schema):
    name: str = field(required=True, always=True)
    kind: ROLE_KIND = field(required=True)
    selector: dict[str, str] | None = None
    endpoint: str | None = field(max_length=512)
    kv_events: ModelDeploymentRouterKVEvents | None = field(alias="kvEvents")


class ModelDeploymentRouterMetrics(Schema):
    port: Int32 = field(required=True, ge=1)
    queued_requests: str = field(alias="queuedRequests", required=True)
    running_requests: str = field(alias="runningRequests", required=True)
    kv_cache_utilization: str = field(alias="kvCacheUtilization", required=True)


class ModelDeploymentRouterStatus(Schema):
    """The contract the router was configured from: only strings the operator rendered."""

    name: str = field(required=True)
    endpoint: str | None = field(max_length=512)
    pool_endpoint: str | None = field(alias="poolEndpoint", max_length=512)
    roles: list[ModelDeploymentRouterRoleStatus] | None = field(list_type="map", map_keys=("name",))
    metrics: ModelDeploymentRouterMetrics | None = None


class ModelDeploymentModelStatus(Schema):
    """The weights ``spec.model.artifactRef`` resolved to and how they reach the engine."""

    artifact: str = field(required=True)
    revision: str | None = None
    manifest_digest: str | None = field(alias="manifestDigest")
    delivery: Literal["PVC", "Engine", "Node", "Image"] = field(required=True)


class ModelDeploymentStatus(Schema):
    phase: str | None = field(doc="Starting, Ready, Degraded or Deleting.")
    phase_message: str | None = field(alias="phaseMessage")
    conditions: list[Condition] | None = conditions_field()
    endpoint: str | None = field(max_length=512)
    roles: list[ModelDeploymentRoleStatus] | None = field(list_type="map", map_keys=("name",))
    kv_cache: ModelDeploymentKVCacheStatus | None = field(alias="kvCache")
    router: ModelDeploymentRouterStatus | None = None
    role_summary: str | None = field(alias="roleSummary", doc="Ready instances by kind, e.g. 1R3P4D.")
    model: ModelDeploymentModelStatus | None = None


class ModelDeployment(Resource):
    """Inference-engine roles rendered as bare Pods, admitted and scaled per replica."""

    __crd__: ClassVar[CRD] = CRD(
        kind="ModelDeployment",
        plural="modeldeployments",
        scope="Namespaced",
        short_names=("md",),
        columns=(
            PrinterColumn("Engine", ".spec.engine.name"),
            PrinterColumn("Roles", ".status.roleSummary"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Endpoint", ".status.endpoint"),
            AGE,
        ),
    )

    spec: ModelDeploymentSpec = field(required=True)
    status: ModelDeploymentStatus | None = None
