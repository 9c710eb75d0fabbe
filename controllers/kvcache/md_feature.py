"""The KV-cache feature of the ModelDeployment controller: the object its renderer calls
(``resolve`` once per pass, ``role`` per managed role), built on :mod:`controllers.kvcache.attach`.

It answers with plain objects carrying the attribute names the controller reads
(:class:`Resolution` ~ its ``CacheResolution``, :class:`RoleCache` ~ its ``RoleCache``, conditions
with ``type/status/reason/message``), so it plugs in without either package importing the other.
``kinds`` lists what it reads through the controller's caches.  The one write it needs, the
deployment's entry in the Binding's ``status.usedBy``, is returned as ``Resolution.used_by`` (a
server-side apply body under :func:`attach.used_by_manager`) for the controller to send.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api import constants
from api import kvcache as kv
from api.objects import Obj
from controllers.kvcache import attach
from controllers.kvcache.conditions import Verdict

Reader = Callable[[str, str, str], Obj | None]
HIERARCHICAL = "--enable-hierarchical-cache"
RETRACTION = "--disaggregation-decode-retraction-backup"


@dataclass
class Resolution:
    applicable: bool
    resolved: bool  # a connection resolved this pass (else outdated replicas are held)
    conditions: list[Verdict] = field(default_factory=list)
    status: Obj | None = None  # status.kvCache; None (absent) while unresolved
    data: Any = None
    used_by: Obj | None = None  # the status apply registering the deployment on its Binding
    used_by_manager: str = ""


@dataclass
class RoleCache:
    connector: Obj | None = None  # vLLM: the store member of --kv-transfer-config
    store_protocol: str | None = None
    args: list[str] = field(default_factory=list)
    env: list[Obj] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    volumes: list[Obj] = field(default_factory=list)
    mounts: list[Obj] = field(default_factory=list)
    ports: list[Obj] = field(default_factory=list)


def _dtype_owned(reader: Reader) -> bool:
    setting = reader("Setting", kv.SETTING_DTYPE_OWNED, constants.SYSTEM_NAMESPACE)
    value = ((setting or {}).get("spec") or {}).get("value")
    return value.strip().lower() not in ("false", "0", "f") if isinstance(value, str) else True


def _ascend(instance_type: Mapping[str, Any]) -> bool:
    detail = (instance_type.get("status") or {}).get("detail") or {}
    group = str((instance_type.get("spec") or {}).get("acceleratorGroup") or "")
    return detail.get("manufacturer") == "ascend" or group.startswith("ascend")


def _names_flag(extra_args: list[Any], flag: str) -> bool:
    return any(isinstance(a, str) and (a == flag or a.startswith(flag + "=")) for a in extra_args)


class KVCacheFeature:
    """``spec.kvCache`` for the ModelDeployment controller."""

    kinds = (kv.KIND_BINDING, kv.KIND_POOL, kv.KIND_BACKEND, "Setting")

    def resolve(self, md: Any, reader: Reader) -> Resolution:
        obj: Obj = md.obj
        name = attach.binding_name(obj)
        binding = reader(kv.KIND_BINDING, name, md.namespace) if name else None
        pool_name = ((binding or {}).get("spec") or {}).get("poolRef", {}).get("name") or ""
        pool = reader(kv.KIND_POOL, pool_name, "") if pool_name else None
        backends = ((pool or {}).get("spec") or {}).get("backends") or []
        backend = reader(kv.KIND_BACKEND, backends[0], "") if backends else None
        found = attach.resolve(obj, binding, pool, backend)
        entry = {"kind": kv.KIND_MODEL_DEPLOYMENT, "namespace": md.namespace, "name": md.name}
        listed = entry in (((binding or {}).get("status") or {}).get("usedBy") or [])
        ready = sum(
            int(r.get("ready") or 0)
            for r in ((obj.get("status") or {}).get("roles") or [])
            if isinstance(r, dict)
        )
        managed = sum(1 for role in md.roles if role.managed)
        conditions = [
            attach.domain_registered(found, in_used_by=listed),
            attach.cache_attached(obj, binding, managed_roles=managed, ready_replicas=ready),
        ]
        return Resolution(
            applicable=attach.has_cache(obj),
            resolved=found.attachment is not None or not attach.has_cache(obj),
            conditions=conditions,
            status=attach.kv_cache_status(found),
            data=(found, _dtype_owned(reader)),
            used_by=attach.used_by_apply(obj, name, registered=True) if found.register and binding else None,
            used_by_manager=attach.used_by_manager(obj),
        )

    def role(
        self, resolution: Resolution, md: Any, role: Any, instance_type: Mapping[str, Any]
    ) -> RoleCache | None:
        found, dtype_owned = resolution.data or (None, False)
        if found is None or found.attachment is None or not role.managed:
            return None
        target = found.attachment
        rendered = attach.role_connector(
            md.engine,
            target,
            ascend=_ascend(instance_type),
            kind=role.kind,
            dtype_owned=dtype_owned,
            paired=True,
        )
        args = list(rendered.args)
        if md.engine == "SGLang":
            # The host tier the storage backend hangs off; a decode half keeps its radix cache off.
            switch = [RETRACTION, "cpu_tensor"] if role.kind == "Decode" else [HIERARCHICAL]
            if not _names_flag(role.extra_args, switch[0]):
                args += switch
        return RoleCache(
            connector=rendered.store_connector,
            store_protocol=target.target.protocol,
            args=args,
            env=rendered.env,
            annotations=rendered.annotations,
            volumes=rendered.volumes,
            mounts=rendered.mounts,
        )

    @staticmethod
    def release(md_obj: Obj) -> tuple[Obj, str] | None:
        """The status apply dropping the deployment from its Binding's ``usedBy`` (on deletion)."""
        name = attach.binding_name(md_obj)
        if not name:
            return None
        return attach.used_by_apply(md_obj, name, registered=False), attach.used_by_manager(md_obj)
