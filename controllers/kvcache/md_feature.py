"""The KV-cache feature of the ModelDeployment controller: the object its renderer calls
(``resolve`` once per pass, ``role`` per managed role), built on :mod:`controllers.kvcache.attach`,
and installed by :func:`controllers.registry.model_deployment_extensions`.

It answers in the types of the controller's plug-in interface (:mod:`controllers.modeldeployment.
extensions`: ``CacheResolution``, ``RoleCache``, ``Condition``).  ``kinds`` lists what it reads
through the controller's caches, and :meth:`KVCacheFeature.wakes` which deployments a change of
one of them concerns.  The one write it needs, the deployment's entry in the Binding's
``status.usedBy``, is returned as ``CacheResolution.used_by`` (a server-side apply body under
:func:`attach.used_by_manager`, only while the Binding does not list the deployment yet) for the
controller to send, and :meth:`KVCacheFeature.release` is the apply that drops it on deletion.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api import constants
from api import kvcache as kv
from api.objects import Obj
from controllers.conditions import Verdict
from controllers.kvcache import attach
from controllers.modeldeployment.extensions import CacheResolution, Condition, Reader, RoleCache
from kube import changes
from readmodels.modeldeployment import Deployment, Role

HIERARCHICAL = "--enable-hierarchical-cache"
RETRACTION = "--disaggregation-decode-retraction-backup"
# What a deployment's render and status read of each kind: a change elsewhere wakes nobody.
_READ = {
    kv.KIND_BINDING: (
        ("spec",),
        ("metadata", "deletionTimestamp"),
        ("status", "usedBy"),
        ("status", "usage"),
        ("status", "conditions"),
    ),
    kv.KIND_POOL: (("spec",), ("status", "clientEndpoint"), ("status", "conditions")),
    kv.KIND_BACKEND: (("spec",), ("status", "endpoints")),
}


def _condition(verdict: Verdict) -> Condition:
    return Condition(verdict.type, verdict.status, verdict.reason, verdict.message)


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

    def resolve(self, md: Deployment, reader: Reader) -> CacheResolution:
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
            _condition(attach.domain_registered(found, in_used_by=listed)),
            _condition(attach.cache_attached(obj, binding, managed_roles=managed, ready_replicas=ready)),
        ]
        register = found.register and binding is not None and not listed
        return CacheResolution(
            applicable=attach.has_cache(obj),
            resolved=found.attachment is not None or not attach.has_cache(obj),
            conditions=conditions,
            status=attach.kv_cache_status(found),
            data=(found, _dtype_owned(reader), binding),
            used_by=attach.used_by_apply(obj, name, registered=True) if register else None,
            used_by_manager=attach.used_by_manager(obj),
        )

    def role(
        self, resolution: CacheResolution, md: Deployment, role: Role, instance_type: Mapping[str, Any]
    ) -> RoleCache | None:
        found, dtype_owned, _ = resolution.data or (None, False, None)
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

    def observe(self, resolution: CacheResolution, md: Deployment, ready_replicas: int) -> list[Condition]:
        """The conditions with ``CacheAttached`` judged on the replicas this pass found ready (the
        stored status ``resolve`` read may be a pass behind)."""
        _, _, binding = resolution.data or (None, False, None)
        managed = sum(1 for role in md.roles if role.managed)
        attached = attach.cache_attached(
            md.obj, binding, managed_roles=managed, ready_replicas=ready_replicas
        )
        return [
            _condition(attached) if cond.type == kv.COND_CACHE_ATTACHED else cond
            for cond in resolution.conditions
        ]

    def release(self, md: Deployment) -> tuple[Obj, str] | None:
        """The status apply dropping the deployment from its Binding's ``usedBy`` (on deletion)."""
        name = attach.binding_name(md.obj)
        if not name:
            return None
        return attach.used_by_apply(md.obj, name, registered=False), attach.used_by_manager(md.obj)

    def wakes(
        self, kind: str, event: str, obj: Obj, old: Obj | None, deployments: list[Obj], reader: Reader
    ) -> list[Obj]:
        """The deployments a change of a Binding, pool or backend concerns: the Binding's own (by
        name in its namespace), and those whose Binding is on the pool, or on a pool of the backend."""
        fields = _READ.get(kind)
        if fields is None or not changes.moved(event, obj, old, *fields):
            return []
        name = changes.name_of(obj)
        out = []
        for md in deployments:
            binding_name = attach.binding_name(md)
            if not binding_name:
                continue
            namespace = changes.namespace_of(md)
            if kind == kv.KIND_BINDING:
                if binding_name == name and changes.namespace_of(obj) == namespace:
                    out.append(md)
                continue
            binding = reader(kv.KIND_BINDING, binding_name, namespace)
            pool_name = (((binding or {}).get("spec") or {}).get("poolRef") or {}).get("name") or ""
            if kind == kv.KIND_POOL:
                if pool_name == name:
                    out.append(md)
                continue
            pool = reader(kv.KIND_POOL, pool_name, "") if pool_name else None
            if name in (((pool or {}).get("spec") or {}).get("backends") or []):
                out.append(md)
        return out
