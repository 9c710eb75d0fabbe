"""A role's Pods, purely (model-deployment.md §7.4): the template every replica of a role shares,
and the stamp that makes one Pod of one replica.

:func:`render_role` builds the **template** from the deployment view, the role's InstanceType and
the pass's facts (Settings, cluster facts, the features' resolutions); :func:`stamp` adds a replica's
identity and computes the hash last.  Neither reads or writes the cluster.

The ``main`` container of a managed role runs the engine's own command line —
``vllm serve <model>`` or ``python3 -m sglang.launch_server --model-path <model> --enable-metrics`` —
then the weights' arguments (``--revision``, ``--served-model-name``), the connector's arguments,
the KV-events publisher's, the role's ``extraArgs``, and finally ``--host 0.0.0.0`` /
``--port <engine port>`` where the assembled line lacks them.  A take-over role's ``command`` is the
whole argv; it still gets rank env above size 1, resources, labels, group metadata
and its Pod fields, and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api import API_VERSION, constants, engines, units
from api.objects import Obj
from controllers.modeldeployment import drain, kvevents, labels, names, pairing, ports, resources
from controllers.modeldeployment.extensions import (
    CacheFeature,
    CacheResolution,
    DeliveryFeature,
    DeliveryResolution,
    RoleCache,
    RoleDelivery,
    TopologyFeature,
)
from controllers.modeldeployment.image import ImageError, image_for
from fastpath import argv, quantity
from readmodels.modeldeployment import (
    FABRIC_PROTOCOLS,
    Deployment,
    Role,
    as_dict,
    as_list,
    as_str,
    store_protocol,
)

MAIN = "main"
DEFAULT_GRACE_SECONDS = 30
VLLM_COMMAND = ("vllm", "serve")
SGLANG_COMMAND = ("python3", "-m", "sglang.launch_server", "--model-path")
SGLANG_METRICS = "--enable-metrics"
ANY_ADDRESS = "0.0.0.0"
PROMETHEUS_SCRAPE = "prometheus.io/scrape"
PROMETHEUS_PATH = "prometheus.io/path"
PROMETHEUS_PORT = "prometheus.io/port"
PROMETHEUS_SCHEME = "prometheus.io/scheme"
USER_VOLUME_PREFIX = "user-"
EPHEMERAL_STORAGE = "ephemeral-storage"


class RenderError(Exception):
    """A role cannot be rendered; ``transient`` when a later observation can resolve it."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient


@dataclass(frozen=True)
class Facts:
    """What the pass knows beyond the deployment: Settings and the cluster."""

    overcommit: bool = True
    routing_sidecar_image: str = "gpustack/mirrored-llm-d-router-disagg-sidecar:v0.10.0"
    engine_image: str = ""  # the engine-image Setting: replaces every managed role's image when set
    kube_minor: int = 29
    runtime_classes: frozenset[str] = frozenset()


@dataclass
class Context:
    """One pass's inputs to the renderer."""

    md: Deployment
    uid: str
    instance_types: Mapping[str, Obj | None]
    facts: Facts = field(default_factory=Facts)
    cache: CacheFeature | None = None
    cache_resolution: CacheResolution | None = None
    delivery: DeliveryFeature | None = None
    delivery_resolution: DeliveryResolution | None = None
    topology: TopologyFeature | None = None


@dataclass
class RoleTemplate:
    """Everything a role's spec states, identical across its replicas."""

    role: Role
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: Obj
    serving: ports.Serving
    image: str
    publishes_kv_events: bool
    node_affinity: Obj | None = None  # the weights' placement, set at stamping, outside the hash


def instance_type_of(ctx: Context, role: Role) -> Obj:
    found = ctx.instance_types.get(role.instance_type)
    if not found:
        raise RenderError(
            f"InstanceType {role.instance_type!r} of role {role.name} is not observed: create it, or wait "
            "for the pool controller to derive it",
            transient=True,
        )
    return found


def is_ascend(instance_type: Mapping[str, Any]) -> bool:
    maker = resources.manufacturer(instance_type)
    return maker is not None and maker.name == "ascend"


def _queue(role: Role, instance_type: Mapping[str, Any]) -> str:
    entrance = as_str(as_dict(instance_type.get("status")).get("entrance"))
    if not entrance:
        raise RenderError(
            f"InstanceType {role.instance_type!r} publishes no status.entrance yet, so role {role.name}'s "
            "Pods would carry no queue label and bypass Kueue; waiting for it",
            transient=True,
        )
    return entrance


def _user_volumes(role: Role) -> tuple[list[Obj], list[Obj]]:
    volumes: list[Obj] = []
    mounts: list[Obj] = []
    for k, raw in enumerate(role.volumes):
        entry = as_dict(raw)
        source: Obj | None = None
        if isinstance(entry.get("configMap"), dict):
            source = {"configMap": {"name": as_str(entry["configMap"].get("name"))}}
        elif isinstance(entry.get("secret"), dict):
            source = {"secret": {"secretName": as_str(entry["secret"].get("name"))}}
        elif isinstance(entry.get("hostPath"), dict):
            source = {"hostPath": dict(entry["hostPath"])}
        if source is None or not as_str(entry.get("mountPath")):
            continue  # a volume without a source is skipped
        name = f"{USER_VOLUME_PREFIX}{k}"
        volumes.append({"name": name, **source})
        mount: Obj = {"name": name, "mountPath": entry["mountPath"]}
        if entry.get("readOnly") is True:
            mount["readOnly"] = True
        if as_str(entry.get("subPath")):
            mount["subPath"] = entry["subPath"]
        mounts.append(mount)
    return volumes, mounts


def _engine_argv(md: Deployment, model: str) -> list[str]:
    if md.engine == engines.ENGINE_SGLANG:
        return [*SGLANG_COMMAND, model, SGLANG_METRICS]
    return [*VLLM_COMMAND, model]


def _fill(engine: str, line: list[str], engine_port: int) -> list[str]:
    """Append ``--host 0.0.0.0`` and ``--port <engine port>`` where the line lacks them (§3.4)."""
    out = list(line)
    if not argv.find_owned_args(engine, out, frozenset({engines.HOST_FLAG})):
        out += [engines.HOST_FLAG, ANY_ADDRESS]
    if not argv.find_owned_args(engine, out, frozenset({engines.PORT_FLAG})):
        out += [engines.PORT_FLAG, str(engine_port)]
    return out


def _runtime_class(ctx: Context, instance_type: Mapping[str, Any]) -> str:
    maker = resources.manufacturer(instance_type)
    if (
        maker is None
        or not (instance_type.get("spec") or {}).get("acceleratable")
        or maker.runtime_class not in ctx.facts.runtime_classes
    ):
        return ""
    return maker.runtime_class


def _image(md: Deployment, role: Role, instance_type: Mapping[str, Any]) -> str:
    version = as_str(md.engine_block.get("version"))
    try:
        return image_for(
            role.image, as_str(md.engine_block.get("image")), md.engine, version, instance_type, role.name
        )
    except ImageError as error:
        raise RenderError(error.message, transient=error.transient) from None


def _features(
    ctx: Context, role: Role, instance_type: Mapping[str, Any]
) -> tuple[RoleCache | None, RoleDelivery | None]:
    """What the cache client (managed roles only) and the weights' delivery add to ``role``."""
    md = ctx.md
    cache = None
    if ctx.cache is not None and ctx.cache_resolution is not None and role.managed:
        cache = ctx.cache.role(ctx.cache_resolution, md, role, instance_type)
    delivery = None
    if ctx.delivery is not None and ctx.delivery_resolution is not None:
        delivery = ctx.delivery.role(ctx.delivery_resolution, md, role, instance_type)
    return cache, delivery


def render_role(ctx: Context, role: Role) -> RoleTemplate:
    """The template of ``role``'s Pods, or :class:`RenderError`."""
    md = ctx.md
    instance_type = instance_type_of(ctx, role)
    queue = _queue(role, instance_type)
    image = (
        ctx.facts.engine_image if role.managed and ctx.facts.engine_image else _image(md, role, instance_type)
    )
    ascend = is_ascend(instance_type)
    facts = ports.serving(md, role)
    cache, delivery = _features(ctx, role, instance_type)
    conn = pairing.connector(md, role, ascend, cache)
    publishes = kvevents.publishes(md, role, ascend)

    container: Obj = {"name": MAIN, "image": image}
    if as_str(role.raw.get("imagePullPolicy")):
        container["imagePullPolicy"] = role.raw["imagePullPolicy"]
    user_volumes, user_mounts = _user_volumes(role)
    volumes = list(user_volumes)
    mounts = list(user_mounts)
    annotations: dict[str, str] = {}
    owned_env = engines.owned_env(md.engine)
    if role.managed:
        model = (delivery.model if delivery and delivery.model else None) or md.model_name
        line = _engine_argv(md, model)
        if delivery is not None:
            line += delivery.args  # what the model is (--revision, --served-model-name) right after it
        line += conn.args
        if publishes:
            line += kvevents.args()
        line += [a for a in role.extra_args if isinstance(a, str)]
        container["command"] = _fill(md.engine, line, facts.engine_port)
        operator_env = conn.env + (delivery.env if delivery else [])
        container["env"] = pairing.merge_env(operator_env, role.env, owned_env)
        volumes += conn.volumes + (delivery.volumes if delivery else [])
        mounts += conn.mounts + (delivery.mounts if delivery else [])
        annotations.update(conn.annotations)
        listeners = conn.ports + (kvevents.ports() if publishes else [])
    else:
        container["command"] = [a for a in role.command if isinstance(a, str)]
        container["env"] = pairing.merge_env(delivery.env if delivery else [], role.env, owned_env)
        volumes += delivery.volumes if delivery else []
        mounts += delivery.mounts if delivery else []
        listeners = []
    if delivery is not None:
        annotations.update(delivery.annotations)
    if ctx.topology is not None:
        annotations.update(ctx.topology.annotations(md, role))
    try:
        container["ports"] = ports.merge(ports.main_ports(role, facts), listeners)
    except ports.PortError as error:
        raise RenderError(f"role {role.name}: {error}", transient=False) from None
    rendered = _resources(ctx, role, instance_type, _fabric(md, role, ascend, cache))
    if delivery is not None and delivery.ephemeral_limit_raise:
        _raise_ephemeral_limit(rendered, delivery.ephemeral_limit_raise)
    if rendered:
        container["resources"] = rendered
    if role.privileged:
        container["securityContext"] = {"privileged": True}
    if mounts:
        container["volumeMounts"] = mounts
    container.update(ports.probes(facts))
    if not container["env"]:
        del container["env"]
    if role.managed:
        annotations.update(_scrape(facts))
        container["lifecycle"] = drain.pre_stop(md.engine, facts.scheme, facts.engine_port, grace_of(role))
    spec = _pod_spec(ctx, role, instance_type, container, volumes, facts, ascend)
    template_labels = labels.template_labels(md.name, role.name, role.kind, queue)
    affinity = delivery.node_affinity if delivery is not None else None
    return RoleTemplate(role, template_labels, annotations, spec, facts, image, publishes, affinity)


def _raise_ephemeral_limit(rendered: Obj, raise_bytes: int) -> None:
    """Engine delivery's cache ``emptyDir`` counts against the container: its ephemeral-storage
    **limit** grows by the directory's size, the request stays (model-delivery §4.3, §7.12).  A
    container without a limit has nothing to raise."""
    limits = rendered.get("limits") or {}
    current = limits.get(EPHEMERAL_STORAGE)
    if current is None:
        return
    limits[EPHEMERAL_STORAGE] = units.size(quantity.floor_div(current, 1) + raise_bytes)


def _resources(ctx: Context, role: Role, instance_type: Mapping[str, Any], fabric: str | None) -> Obj:
    try:
        return resources.container_resources(
            role.resources,
            instance_type,
            overcommit=ctx.facts.overcommit,
            interfaces=role.interface_count,
            fabric=fabric,
        )
    except resources.ResourceError as error:
        raise RenderError(f"role {role.name}: {error}", transient=True) from None


def _fabric(md: Deployment, role: Role, ascend: bool, cache: RoleCache | None) -> str | None:
    """The transport the role's interfaces serve: the direct leg's if it is a fabric, else the store's."""
    if pairing.direct_leg(md, role, ascend):
        leg = store_protocol(md.kv_transfer.get("protocol"))
        if leg in FABRIC_PROTOCOLS:
            return leg
    store = cache.store_protocol if cache is not None else None
    return store if store in FABRIC_PROTOCOLS else None


def grace_of(role: Role) -> int:
    """The role's grace: as given, else 30 s (§9.7)."""
    grace = role.raw.get("terminationGracePeriodSeconds")
    return grace if isinstance(grace, int) and not isinstance(grace, bool) else DEFAULT_GRACE_SECONDS


def _scrape(facts: ports.Serving) -> dict[str, str]:
    return {
        PROMETHEUS_SCRAPE: "true",
        PROMETHEUS_PATH: "/metrics",
        PROMETHEUS_PORT: str(facts.engine_port),
        PROMETHEUS_SCHEME: "https" if facts.scheme == "https" or facts.proxy_tls else "http",
    }


def _pod_spec(
    ctx: Context,
    role: Role,
    instance_type: Mapping[str, Any],
    main: Obj,
    volumes: list[Obj],
    facts: ports.Serving,
    ascend: bool,
) -> Obj:
    md = ctx.md
    spec: Obj = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Always",
        "containers": [main],
    }
    grace = role.raw.get("terminationGracePeriodSeconds")
    if role.managed or (isinstance(grace, int) and not isinstance(grace, bool)):
        spec["terminationGracePeriodSeconds"] = grace_of(role)
    secrets = [
        {"name": as_str(as_dict(s).get("name"))}
        for s in as_list(role.raw.get("imagePullSecrets"))
        if as_str(as_dict(s).get("name"))
    ]
    if secrets:
        spec["imagePullSecrets"] = secrets
    runtime = _runtime_class(ctx, instance_type)
    if runtime:
        spec["runtimeClassName"] = runtime
    if volumes:
        spec["volumes"] = volumes
    if facts.direct_decoder:
        native = ctx.facts.kube_minor >= pairing.NATIVE_SIDECAR_MINOR
        proxy = pairing.proxy_container(
            md,
            role,
            facts,
            image=ctx.facts.routing_sidecar_image,
            ascend=ascend,
            port=ports.proxy_port(role, facts),
            native=native,
        )
        if native:
            spec["initContainers"] = [proxy]
        else:
            spec["containers"] = [proxy, main]
    return spec


def _rank_env(md: Deployment, role: Role, ordinal: int) -> list[Obj]:
    return [
        {
            "name": constants.ENV_REPLICA_LEADER_ADDRESS,
            "value": names.leader_address(md.name, role.name, ordinal),
        },
        {"name": constants.ENV_REPLICA_SIZE, "value": str(role.size)},
        {
            "name": constants.ENV_MEMBER_INDEX,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{constants.LABEL_MEMBER_INDEX}']"}},
        },
    ]


def owner_reference(md: Deployment, uid: str) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelDeployment",
        "name": md.name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }


def stamp(ctx: Context, template: RoleTemplate, ordinal: int, member: int) -> Obj:
    """One Pod of replica ``ordinal`` (member ``member``), its hash written last."""
    md, role = ctx.md, template.role
    spec = dict(template.spec)
    pod_labels = {
        **template.labels,
        **labels.stamp_labels(
            names.pod_group_name(md.namespace, md.name, role.name, ordinal), ordinal, member, role.size
        ),
    }
    annotations = {**template.annotations, **labels.stamp_annotations(role.name, role.size)}
    meta: Obj = {"namespace": md.namespace}
    if role.size > 1:
        name = names.member_name(md.name, role.name, ordinal, member)
        meta["name"] = name
        spec["hostname"] = name
        spec["subdomain"] = names.instance_service(md.name, role.name, ordinal)
        containers = list(spec["containers"])
        index = next(i for i, ct in enumerate(containers) if ct["name"] == MAIN)
        main = dict(containers[index])
        main["env"] = list(main.get("env") or ()) + _rank_env(md, role, ordinal)
        containers[index] = main
        spec["containers"] = containers
    else:
        meta["generateName"] = names.generate_name(md.name, role.name)
    annotations[constants.ANNOTATION_POD_SPEC_HASH] = labels.pod_spec_hash(pod_labels, annotations, spec)
    if template.node_affinity:  # placement of the weights' volume: after the hash, outside it
        spec["affinity"] = {"nodeAffinity": template.node_affinity}
    meta["labels"] = pod_labels
    meta["annotations"] = annotations
    meta["ownerReferences"] = [owner_reference(md, ctx.uid)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
