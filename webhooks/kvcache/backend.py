"""``KVCacheBackend`` admission (kv-cache spec §3.1, rules B1–B12).

:func:`judge` is pure: the object, the stored object on UPDATE, and the image Setting (read only
when rule B2 needs it).  B2 asks for an image only on CREATE and when ``spec.image`` itself moves,
so no later update (the controller removing its finalizer above all) depends on the Setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api import kvcache as kv
from api.objects import as_dict, as_list, as_str
from webhooks.decision import Decision, FieldError, allow, forbidden, invalid, reject, required
from webhooks.kvcache.values import dig, host_port, quantity_bytes
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

MANAGED = "spec.connection.managed"
MEMBERS = f"{MANAGED}.members"
LEADER = f"{MANAGED}.leader"

# B6: leader flags the renderer derives from a field, or that would re-plumb the store underneath
# the operator (HA, persistence, CXL, a second listener), or load flags from elsewhere.
LEADER_DERIVED_FLAGS = frozenset(
    {
        "rpc_port",
        "metrics_port",
        "enable_multi_tenants",
        "tenant_quota_connector_type",
        "tenant_quota_connector_uri",
        "allocation_strategy",
        "enable_ha",
        "ha_backend_type",
        "ha_backend_connstring",
        "cluster_id",
        "pod_name",
        "pod_namespace",
    }
)
LEADER_FORBIDDEN_FLAGS = frozenset(
    {
        "port",
        "rpc_address",
        "rpc_interface",
        "enable_cxl",
        "cxl_path",
        "cxl_size",
        "enable_oplog",
        "etcd_endpoints",
        "enable_offload",
        "offload_on_evict",
        "enable_snapshot",
        "enable_snapshot_restore",
        "flagfile",
        "fromenv",
        "tryfromenv",
    }
)
SNAPSHOT_PREFIX = "snapshot_"
METRICS_HOSTS = ("0.0.0.0", "::")
# B7: the member's configuration keys the renderer derives (as MOONCAKE_* variables).
MEMBER_DERIVED_KEYS = frozenset(
    {
        "local_hostname",
        "metadata_server",
        "master_server_address",
        "protocol",
        "global_segment_size",
        "local_buffer_size",
        "device_name",
        "enable_ssd_offload",
        "ssd_offload_path",
    }
)
LEADER_RENDERED_ENV = frozenset({kv.ENV_POD_NAME, kv.ENV_POD_NAMESPACE, kv.ENV_POD_IP})
MEMBER_RENDERED_ENV = frozenset(
    {
        kv.ENV_LOCAL_HOSTNAME,
        kv.ENV_METADATA_SERVER,
        kv.ENV_MASTER,
        kv.ENV_PROTOCOL,
        kv.ENV_GLOBAL_SEGMENT_SIZE,
        kv.ENV_LOCAL_BUFFER_SIZE,
        kv.ENV_TE_METRIC,
    }
)
OFFLOAD_ENV_PREFIX = "MOONCAKE_OFFLOAD_"
FABRIC_PROTOCOLS = ("RDMA", "EFA")
INFINIBAND = "/dev/infiniband"
# B11: the tier's bucket, chosen by the operator (spec §9 leaves it open) and rendered by it.
TIER_BUCKET_BYTES = kv.TIER_BUCKET_BYTES
TIER_BUCKET_KEYS = kv.TIER_BUCKET_KEYS
TIER_BUCKET = f"{TIER_BUCKET_BYTES >> 20}Mi"


@dataclass
class Verdict:
    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def flag_key(arg: str) -> str:
    """B6/B7: the text before the first ``=``, leading dashes stripped (``--a=b`` → ``a``)."""
    return arg.split("=", 1)[0].lstrip("-")


def _leader_flag_refusal(key: str) -> str | None:
    if key in LEADER_DERIVED_FLAGS:
        return "the operator renders it from the backend's fields; set the field instead"
    if key in LEADER_FORBIDDEN_FLAGS or key.startswith(SNAPSHOT_PREFIX):
        return (
            "it re-plumbs the store underneath the operator (listeners, high availability, persistence, "
            "CXL, offload or a flag file), which the operator would then report wrongly; remove it"
        )
    return None


def _leader_args(leader: dict[str, Any], v: Verdict) -> None:
    path = f"{LEADER}.extraArgs"
    for index, arg in enumerate(as_list(leader.get("extraArgs"))):
        at = f"{path}[{index}]"
        if not isinstance(arg, str) or not arg.startswith("-") or not flag_key(arg):
            v.errors.append(invalid(at, arg, "each entry is one store flag, spelled -flag or -flag=value"))
            continue
        key = flag_key(arg)
        why = _leader_flag_refusal(key)
        if why is None and key.startswith("no"):  # gflags' negated boolean: -noenable_multi_tenants
            why = _leader_flag_refusal(key[2:])
        if why is not None:
            v.errors.append(forbidden(at, f"the store flag {key!r} cannot be set here: {why}"))
        elif key == "metrics_host" and arg.partition("=")[2] not in METRICS_HOSTS:
            v.errors.append(
                invalid(
                    at,
                    arg,
                    "metrics_host may only widen the admin listener (0.0.0.0 or ::): the operator's probes "
                    "and status reads reach it from outside the Pod",
                )
            )


def _env_collisions(env: Any, rendered: frozenset[str], path: str, v: Verdict, prefix: str = "") -> None:
    for index, entry in enumerate(as_list(env)):
        name = as_str(as_dict(entry).get("name"))
        if name in rendered or (prefix and name.startswith(prefix)):
            v.errors.append(
                forbidden(
                    f"{path}[{index}].name",
                    f"{name} is rendered by the operator from the backend's fields, and a second value "
                    "would silently replace it; drop this entry (set the field it comes from instead)",
                )
            )


def _member_args(group: dict[str, Any], at: str, v: Verdict) -> None:
    for index, arg in enumerate(as_list(group.get("extraArgs"))):
        where = f"{at}.extraArgs[{index}]"
        if not isinstance(arg, str) or not arg.startswith("-") or "=" not in arg or not flag_key(arg):
            v.errors.append(invalid(where, arg, "each entry is one member setting, spelled -key=value"))
            continue
        key = flag_key(arg)
        if key in MEMBER_DERIVED_KEYS:
            v.errors.append(
                forbidden(
                    where,
                    f"the member setting {key!r} is rendered by the operator from the group's fields "
                    "(capacityPerMember, localBufferSize, transport, the leader's address); set the field "
                    "instead",
                )
            )


def _host_paths(group: dict[str, Any], at: str, v: Verdict) -> None:
    seen: dict[str, int] = {}
    tier_paths = {as_str(as_dict(d).get("path")) for d in as_list(group.get("localDisks"))}
    for index, entry in enumerate(as_list(group.get("hostPaths"))):
        mount = as_str(as_dict(entry).get("mountPath")).rstrip("/") or "/"
        where = f"{at}.hostPaths[{index}].mountPath"
        if mount in seen:
            v.errors.append(
                invalid(where, mount, f"duplicates hostPaths[{seen[mount]}].mountPath; mount each path once")
            )
        elif mount == INFINIBAND or mount.startswith(INFINIBAND + "/"):
            v.errors.append(
                forbidden(
                    where,
                    "a fabric's device plugin injects the granted device nodes under /dev/infiniband; mounting "
                    "the tree would expose adapters this member was not granted",
                )
            )
        elif mount in tier_paths:
            v.errors.append(
                invalid(where, mount, "is this group's localDisks path; mount it once, as the tier")
            )
        seen.setdefault(mount, index)


def _tier_path(path: Any) -> str | None:
    if not isinstance(path, str) or path != path.strip() or not path.startswith("/"):
        return "must be an absolute path without leading or trailing whitespace"
    if path.rstrip("/") == "":
        return "must not be / (the tier empties its directory on request)"
    if ".." in path.split("/"):
        return "must not contain a .. segment"
    if "." in path.split("/"):
        # "/." is the root itself, and the path is mounted exactly as written: a "." segment
        # names the same directory as another spelling the tier's identity would not match.
        return "must not contain a . segment; write the directory as its plain absolute path, e.g. /var/lib/kvcache"
    if path.rstrip("/") == INFINIBAND or path.startswith(INFINIBAND + "/") or INFINIBAND.startswith(path):
        return "must not overlap /dev/infiniband"
    return None


def _tier(group: dict[str, Any], at: str, v: Verdict) -> None:
    disks = as_list(group.get("localDisks"))
    for index, disk in enumerate(disks):
        disk = as_dict(disk)
        where = f"{at}.localDisks[{index}]"
        why = _tier_path(disk.get("path"))
        if why:
            v.errors.append(invalid(f"{where}.path", disk.get("path"), why))
        eviction = as_dict(disk.get("eviction"))
        watermark = as_dict(eviction.get("watermark"))
        if eviction.get("enabled") is False and (eviction.get("policy") or watermark):
            v.errors.append(
                invalid(
                    f"{where}.eviction", eviction, "policy and watermark need eviction enabled; drop them"
                )
            )
        if watermark and disk.get("capacity") is None:
            v.errors.append(
                required(
                    f"{where}.capacity", "a watermark is a fraction of the tier's capacity; set capacity"
                )
            )
        high, low = watermark.get("high"), watermark.get("low")
        if isinstance(high, int) and isinstance(low, int) and low >= high:
            v.errors.append(
                invalid(f"{where}.eviction.watermark.low", low, f"must be below high ({high}), e.g. 90/80")
            )
        capacity = quantity_bytes(disk.get("capacity")) if disk.get("capacity") is not None else None
        if capacity is not None and capacity < TIER_BUCKET_BYTES:
            v.errors.append(
                invalid(
                    f"{where}.capacity",
                    disk.get("capacity"),
                    f"must hold at least one {TIER_BUCKET} bucket (the unit the tier is written in); raise it",
                )
            )
        limit = disk.get("keyLimit")
        if isinstance(limit, int) and 0 < limit < TIER_BUCKET_KEYS:
            v.errors.append(
                invalid(
                    f"{where}.keyLimit",
                    limit,
                    f"must allow at least one bucket ({TIER_BUCKET_KEYS} keys); raise it or leave it unset",
                )
            )
    if disks:
        size = quantity_bytes(group.get("capacityPerMember"))
        if size is not None and size < TIER_BUCKET_BYTES:
            v.errors.append(
                invalid(
                    f"{at}.capacityPerMember",
                    group.get("capacityPerMember"),
                    f"a tiered group holds at least one {TIER_BUCKET} bucket in memory before it reaches the "
                    "disk; raise capacityPerMember",
                )
            )


def _effective_protocol(group: dict[str, Any], spec: dict[str, Any]) -> str:
    return as_str(dig(group, "transport", "protocol")) or as_str(dig(spec, "transport", "protocol")) or "Auto"


def _group(spec: dict[str, Any], group: dict[str, Any], at: str, v: Verdict) -> None:
    _member_args(group, at, v)
    rendered = MEMBER_RENDERED_ENV
    if group.get("medium") != "VRAM":
        rendered = rendered | frozenset(kv.VISIBILITY_VARIABLES)
    _env_collisions(
        group.get("extraEnv"),
        rendered,
        f"{at}.extraEnv",
        v,
        OFFLOAD_ENV_PREFIX if group.get("localDisks") else "",
    )
    _host_paths(group, at, v)
    _tier(group, at, v)
    protocol = _effective_protocol(group, spec)
    if group.get("fabricInterfaceCount") is not None and protocol not in FABRIC_PROTOCOLS:
        v.warnings.append(
            f"{at}.fabricInterfaceCount has no effect on protocol {protocol}: only RDMA and EFA members request "
            "fabric interfaces"
        )


def _moved(old: list[Any], new: list[Any], v: Verdict) -> None:
    """B9: an unchanged old group that left its position and reappears at another."""
    for j, group in enumerate(new):
        if j < len(old) and old[j] == group:
            continue
        for i, before in enumerate(old):
            if i != j and before == group and not (i < len(new) and new[i] == before):
                v.errors.append(
                    forbidden(
                        f"{MEMBERS}[{j}]",
                        f"the group at members[{i}] moved to members[{j}] unchanged: a group's position is its "
                        "identity (its DaemonSet, selector and HTTP port), so a move would rebuild members "
                        "against another group's spec; append groups at the end, remove only from the end, "
                        "or narrow a group's nodeSelector to take it out of service",
                    )
                )
                break


def _tier_changes(old: list[Any], new: list[Any], v: Verdict) -> None:
    """B8 and B10 by position: medium frozen; a tier is neither added, removed nor re-pathed."""
    for index in range(min(len(old), len(new))):
        before, after = as_dict(old[index]), as_dict(new[index])
        at = f"{MEMBERS}[{index}]"
        if before.get("medium") != after.get("medium"):
            v.errors.append(
                forbidden(
                    f"{at}.medium",
                    f"is immutable ({before.get('medium')} → {after.get('medium')}): a mounted segment cannot "
                    "change the memory under the data it holds; append a new group for the other medium",
                )
            )
        paths_before = [as_str(as_dict(d).get("path")) for d in as_list(before.get("localDisks"))]
        paths_after = [as_str(as_dict(d).get("path")) for d in as_list(after.get("localDisks"))]
        if paths_before != paths_after:
            v.errors.append(
                forbidden(
                    f"{at}.localDisks",
                    "a tier is declared with its group: adding, removing or re-pathing one on an existing group "
                    "is refused (capacity, keyLimit and eviction may change); only dropping the last group "
                    "removes a tier",
                )
            )


def _managed(
    spec: dict[str, Any], old_spec: dict[str, Any] | None, old_status: dict[str, Any], v: Verdict
) -> None:
    managed = as_dict(dig(spec, "connection", "managed"))
    leader = as_dict(managed.get("leader"))
    replicas = leader.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= 5:
        v.errors.append(invalid(f"{LEADER}.replicas", replicas, "must be between 1 and 5"))
    elif replicas > 1 and leader.get("electionBackend") == "None":
        v.errors.append(
            invalid(
                f"{LEADER}.replicas",
                replicas,
                "more than one leader needs electionBackend: Kubernetes; with None only one may run",
            )
        )
    _leader_args(leader, v)
    _env_collisions(leader.get("extraEnv"), LEADER_RENDERED_ENV, f"{LEADER}.extraEnv", v)
    members = managed.get("members")
    if not isinstance(members, list) or not members:
        v.errors.append(
            required(MEMBERS, "declare at least one member group (nodeSelector, medium, capacityPerMember)")
        )
        members = []
    tiered = [i for i, g in enumerate(members) if as_list(as_dict(g).get("localDisks"))]
    if len(tiered) > 1:
        v.errors.append(
            forbidden(
                f"{MEMBERS}[{tiered[1]}].localDisks",
                f"only one group may carry a tier; members[{tiered[0]}] has one",
            )
        )
    for index, group in enumerate(members):
        _group(spec, as_dict(group), f"{MEMBERS}[{index}]", v)
    old_managed = as_dict(dig(old_spec, "connection", "managed")) if old_spec is not None else {}
    if old_managed:
        old_members = as_list(old_managed.get("members"))
        _moved(old_members, members, v)
        _tier_changes(old_members, members, v)
        was = as_dict(old_managed.get("leader")).get("multiTenancy", True) is not False
        if was and leader.get("multiTenancy") is False:
            holders = [
                f"{r.get('kind')} {str(r.get('namespace')) + '/' if r.get('namespace') else ''}{r.get('name')}"
                for r in (as_dict(x) for x in as_list(old_status.get("usedBy")))
            ]
            if holders:
                v.errors.append(
                    forbidden(
                        f"{LEADER}.multiTenancy",
                        f"cannot turn off while the backend is claimed by {', '.join(holders)}: their tenants' "
                        "ledger entries would vanish; delete those consumers first",
                    )
                )


def _external(spec: dict[str, Any], v: Verdict) -> None:
    path = "spec.connection.external.endpoints"
    endpoints = as_list(dig(spec, "connection", "external", "endpoints"))
    names = [as_str(as_dict(e).get("name")) for e in endpoints]
    for wanted in ("Client", "Admin"):
        if wanted not in names:
            v.errors.append(
                required(
                    path,
                    f"an external backend declares both a Client (engines' RPC) and an Admin (HTTP) endpoint; "
                    f"{wanted} is missing",
                )
            )
    for index, endpoint in enumerate(endpoints):
        address = as_dict(endpoint).get("address")
        if host_port(address) is None:
            v.errors.append(
                invalid(
                    f"{path}[{index}].address",
                    address,
                    "must be host:port with a numeric port, e.g. mooncake.example:50051",
                )
            )


def judge(obj: dict[str, Any], old: dict[str, Any] | None, setting_image: str | None) -> Verdict:
    """Rules B1–B12 on ``obj`` (``old`` on UPDATE).  ``setting_image`` is the Setting's value when
    B2 applies (CREATE, or ``spec.image`` moved) and ``None`` otherwise."""
    v = Verdict()
    spec = as_dict(obj.get("spec"))
    old_spec = as_dict(old.get("spec")) if old is not None else None
    connection = as_dict(spec.get("connection"))
    has_managed, has_external = connection.get("managed") is not None, connection.get("external") is not None
    if has_managed == has_external:
        v.errors.append(
            invalid(
                "spec.connection",
                connection,
                "set exactly one of connection.managed (the operator runs the store) and "
                "connection.external (somebody else runs it)",
            )
        )
    if setting_image is not None and not as_str(spec.get("image")).strip() and not setting_image.strip():
        v.errors.append(
            required(
                "spec.image",
                f"no image to run: set spec.image, or the Setting {kv.SETTING_BACKEND_IMAGE} in the operator namespace",
            )
        )
    if has_managed and not has_external:
        _managed(spec, old_spec, as_dict((old or {}).get("status")), v)
    if has_external and not has_managed:
        _external(spec, v)
    return v


def needs_image_setting(obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """B2 applies on CREATE and on an UPDATE that moves ``spec.image``."""
    if old is None:
        return True
    return dig(obj, "spec", "image") != dig(old, "spec", "image")


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object or {}
    old = request.old_object if request.operation == "UPDATE" else None
    setting = await lookups.setting(kv.SETTING_BACKEND_IMAGE) if needs_image_setting(obj, old) else None
    verdict = judge(obj, old, setting)
    if verdict.errors:
        return reject(kv.KIND_BACKEND, request.display_name, verdict.errors, verdict.warnings)
    return allow(warnings=verdict.warnings)
