"""Pod KV-cache injection (kv-cache spec §3.4–§4): mutating, CREATE only, fails closed.

A Pod labelled ``kvcache.gpustack.ai/inject: "true"`` names a Binding in its namespace and its
engine; the webhook resolves Binding → pool → backend and writes the engine's client configuration
into one container.  Every check runs before any mutation: a Pod is either fully injected or refused.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from api import constants
from api import kvcache as kv
from api import kvcache_client as client
from api import kvcache_offer as offer
from api.fielderrors import not_supported
from api.objects import Obj, as_dict, as_list, as_str
from fastpath import argv
from webhooks import patch as jsonpatch
from webhooks.decision import Decision, FieldError, allow, forbidden, invalid, not_found, reject, required
from webhooks.kvcache.launch import Launch, Refused, analyse
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

OWNED_ARGS = {
    "vLLM": frozenset({kv.ARG_KV_TRANSFER_CONFIG}),
    "SGLang": frozenset({kv.ARG_HICACHE_STORAGE_BACKEND, kv.ARG_HICACHE_EXTRA_CONFIG}),
}
OWNED_ENV = {"vLLM": frozenset({kv.ENV_CONFIG_PATH}), "SGLang": frozenset({kv.ENV_SGLANG_CONFIG_PATH})}


def annotation_path(key: str) -> str:
    return f"metadata.annotations[{key}]"


@dataclass(frozen=True, slots=True)
class Contract:
    """The Pod's request, read from its annotations (rules 1–3 passed)."""

    binding: str
    engine: str  # vLLM | SGLang
    ascend: bool
    role: str  # "" | Prefill | Decode (vLLM family only)
    container: str
    forwarding: bool

    @property
    def record_engine(self) -> str:
        if self.engine == "SGLang":
            return "sglang"
        return "vllm-ascend" if self.ascend else "vllm"


def read_contract(pod: Obj) -> tuple[Contract | None, list[FieldError]]:
    """Rules 1–3: the annotation vocabulary, the binding name, engine, manufacturer and role."""
    notes = as_dict(as_dict(pod.get("metadata")).get("annotations"))
    errors: list[FieldError] = []
    for key in sorted(k for k in notes if isinstance(k, str) and k.startswith(constants.KVCACHE_PREFIX)):
        if key in kv.POD_WRITTEN_ANNOTATIONS:
            errors.append(
                forbidden(
                    annotation_path(key),
                    "is written by the injection webhook as the record of what it decided; a submitted value would "
                    "record a decision nobody made: remove it",
                )
            )
        elif key not in kv.POD_INPUT_ANNOTATIONS:
            hint = (
                " (the reuse domain comes from the Binding, never from the Pod)"
                if key.endswith("/domain")
                else ""
            )
            errors.append(
                forbidden(
                    annotation_path(key),
                    f"is not a kvcache.gpustack.ai annotation{hint}; the keys are binding, engine, manufacturer, role, "
                    "container and launch-args-forwarded: fix the key",
                )
            )
    binding = notes.get(constants.ANNOTATION_KVCACHE_BINDING)
    if not isinstance(binding, str) or not binding:
        errors.append(
            required(
                annotation_path(constants.ANNOTATION_KVCACHE_BINDING),
                "name a KVCachePoolBinding in this namespace",
            )
        )
    elif "/" in binding:
        errors.append(
            invalid(
                annotation_path(constants.ANNOTATION_KVCACHE_BINDING),
                binding,
                "a Binding is resolved in the Pod's own namespace; there is no cross-namespace form: use a plain name",
            )
        )
    engine = notes.get(constants.ANNOTATION_KVCACHE_ENGINE)
    if engine not in kv.ENGINES:
        errors.append(not_supported(annotation_path(constants.ANNOTATION_KVCACHE_ENGINE), engine, kv.ENGINES))
    manufacturer = notes.get(constants.ANNOTATION_KVCACHE_MANUFACTURER)
    if manufacturer is not None and (manufacturer != kv.MANUFACTURER_ASCEND or engine == "SGLang"):
        errors.append(
            invalid(
                annotation_path(constants.ANNOTATION_KVCACHE_MANUFACTURER),
                manufacturer,
                "the only value is ascend, with engine: vLLM (it selects vLLM-Ascend); drop it otherwise",
            )
        )
    role = notes.get(constants.ANNOTATION_KVCACHE_ROLE)
    if role is not None and role not in kv.POD_ROLES:
        errors.append(
            invalid(
                annotation_path(constants.ANNOTATION_KVCACHE_ROLE),
                role,
                "must be Prefill or Decode; leave it out for a plain server (Server is a ModelDeployment kind, "
                "not a value here)",
            )
        )
    if errors:
        return None, errors
    return (
        Contract(
            binding=str(binding),
            engine=str(engine),
            ascend=manufacturer == kv.MANUFACTURER_ASCEND,
            role=role if engine == "vLLM" and isinstance(role, str) else "",
            container=as_str(notes.get(constants.ANNOTATION_KVCACHE_CONTAINER)),
            forwarding=notes.get(constants.ANNOTATION_KVCACHE_LAUNCH_ARGS_FORWARDED) == "true",
        ),
        [],
    )


def transport_error(contract: Contract, offered: list[str]) -> str | None:
    """Rule 8: one effective protocol across the pool's groups; ``ascend`` for vLLM-Ascend."""
    if len(offered) > 1:
        return (
            f"the pool's member groups offer several transports ({', '.join(offered)}) and an engine installs one; "
            "make the groups use one protocol, or use another pool"
        )
    if contract.ascend and offered != ["ascend"]:
        return (
            f"vLLM-Ascend accepts the store transport ascend, and this pool offers {', '.join(offered)}: set the "
            "backend's (or one member group's) transport.protocol to CANN, or use a pool that offers it"
        )
    return None


def resolution_error(
    contract: Contract, namespace: str, binding: Obj | None, pool: Obj | None, backend: Obj | None
) -> FieldError | None:
    """Rules 4–8, in order, at the binding annotation's path."""
    path = annotation_path(constants.ANNOTATION_KVCACHE_BINDING)
    if binding is None:
        return not_found(
            path,
            contract.binding,
            f"no KVCachePoolBinding {contract.binding!r} in namespace {namespace!r}; create it, or fix the name",
        )
    if offer.terminating(binding):
        return forbidden(
            path,
            f"KVCachePoolBinding {namespace}/{contract.binding} is being deleted and its domain withdrawn from the "
            "ledger, so every write would fail with TENANT_NOT_REGISTERED; name a Binding that is not terminating",
        )
    if pool is None:
        return invalid(
            path,
            contract.binding,
            f"its KVCachePool {offer.pool_name(binding)!r} does not exist; fix the Binding's poolRef or create the pool",
        )
    if backend is None:
        return invalid(
            path,
            contract.binding,
            f"the KVCacheBackend {offer.backend_name(pool)!r} of KVCachePool {offer.pool_name(binding)!r} does not exist",
        )
    ledger = offer.ledger(pool)
    if not ledger.usable:
        said = f"False/{ledger.reason}: {ledger.message}" if ledger.reason else ledger.message
        return invalid(
            path,
            contract.binding,
            f"KVCachePool {offer.pool_name(binding)!r} reports QuotaLedgerAvailable {said}; restore the master, or wait for the pool to report",
        )
    if not offer.client_endpoint(pool):
        return invalid(
            path,
            contract.binding,
            f"KVCachePool {offer.pool_name(binding)!r} has published no client endpoint yet; wait for status.clientEndpoint",
        )
    why = transport_error(contract, offer.offered_protocols(backend))
    return invalid(path, contract.binding, why) if why else None


def target_container(pod: Obj, contract: Contract) -> tuple[int, FieldError | None]:
    """Rule 9: the one app container to inject (never the first by default, never an init container)."""
    spec = as_dict(pod.get("spec"))
    containers = [as_dict(x) for x in as_list(spec.get("containers"))]
    names = [as_str(x.get("name")) for x in containers]
    path = annotation_path(constants.ANNOTATION_KVCACHE_CONTAINER)
    if not containers:
        return -1, required("spec.containers", "the Pod has no container to configure")
    if not contract.container:
        if len(containers) == 1:
            return 0, None
        return -1, required(
            path, f"the Pod has {len(containers)} containers ({', '.join(names)}); name the engine's"
        )
    if contract.container in names:
        return names.index(contract.container), None
    inits = {as_str(as_dict(x).get("name")) for x in as_list(spec.get("initContainers"))}
    if contract.container in inits:
        return -1, invalid(
            path,
            contract.container,
            "is an init container, which finishes before the engine starts; name an app container",
        )
    return -1, not_found(
        path, contract.container, f"no such container; the app containers are {', '.join(names)}"
    )


def _owned_arg_errors(
    engine: str, container: Obj, at: str, owned: frozenset[str], why: str
) -> list[FieldError]:
    errors = []
    for field in ("command", "args"):
        tokens = as_list(container.get(field))
        for index, spelled, key in argv.find_owned_args(engine, tokens, owned):
            shown = spelled if spelled == key else f"{spelled} (read as {key})"
            errors.append(forbidden(f"{at}.{field}[{index}]", f"{shown} {why}"))
    return errors


def container_errors(pod: Obj, index: int, contract: Contract, *, dtype_owned: bool) -> list[FieldError]:
    """Rules 10–12 on the target container and the Pod's volumes."""
    container = as_dict(as_list(as_dict(pod.get("spec")).get("containers"))[index])
    at = f"spec.containers[{index}]"
    errors = _owned_arg_errors(
        contract.engine,
        container,
        at,
        OWNED_ARGS[contract.engine],
        f"already configures {contract.engine}'s KV cache, and two sources for one setting cannot be told apart; "
        "remove it, or drop the inject label",
    )
    for j, entry in enumerate(as_list(container.get("env"))):
        name = as_dict(entry).get("name")
        if name in OWNED_ENV[contract.engine]:
            errors.append(
                forbidden(
                    f"{at}.env[{j}].name",
                    f"{name} selects where {contract.engine} reads its store configuration from, leaving the injected "
                    "configuration unread; remove it, or drop the inject label",
                )
            )
    if dtype_owned:
        errors += _owned_arg_errors(
            contract.engine,
            container,
            at,
            frozenset({kv.ARG_KV_CACHE_DTYPE}),
            "is rendered from the Binding's domain dtype: engines writing two dtypes into one domain read each "
            f"other's blocks wrong; remove it and name a Binding declaring the dtype you want (or turn off "
            f"the Setting {kv.SETTING_DTYPE_OWNED})",
        )
    if contract.engine == "vLLM":
        for j, volume in enumerate(as_list(as_dict(pod.get("spec")).get("volumes"))):
            if as_dict(volume).get("name") == kv.CONFIG_VOLUME:
                errors.append(
                    invalid(
                        f"spec.volumes[{j}].name",
                        kv.CONFIG_VOLUME,
                        "is the injected client file's volume; rename yours",
                    )
                )
        for j, mount in enumerate(as_list(container.get("volumeMounts"))):
            mount = as_dict(mount)
            where = as_str(mount.get("mountPath")).rstrip("/")
            if mount.get("name") == kv.CONFIG_VOLUME:
                errors.append(
                    invalid(
                        f"{at}.volumeMounts[{j}].name",
                        kv.CONFIG_VOLUME,
                        "is the injected client file's volume; rename yours",
                    )
                )
            elif where == kv.CONFIG_MOUNT or where.startswith(kv.CONFIG_MOUNT + "/"):
                errors.append(
                    invalid(
                        f"{at}.volumeMounts[{j}].mountPath",
                        mount.get("mountPath"),
                        f"{kv.CONFIG_MOUNT} is where the client file is mounted; mount yours elsewhere",
                    )
                )
    return errors


def _has_flag(engine: str, container: Obj, flag: str) -> bool:
    tokens = as_list(container.get("command")) + as_list(container.get("args"))
    return bool(argv.find_owned_args(engine, tokens, frozenset({flag})))


def render(
    pod: Obj,
    index: int,
    contract: Contract,
    launch: Launch,
    target: client.ClientTarget,
    domain: str,
    dtype: str | None,
) -> Obj:
    """The injected Pod (a copy): env, args, and for the vLLM family the projected file."""
    out = copy.deepcopy(pod)
    container = out["spec"]["containers"][index]
    user_env = list(as_list(container.get("env")))
    if contract.engine == "vLLM":
        injected = client.vllm_env()
        args = [
            kv.ARG_KV_TRANSFER_CONFIG,
            client.vllm_transfer_config(ascend=contract.ascend, role=contract.role),
        ]
        vehicle = kv.VEHICLE_FILE
    else:
        injected = client.sglang_env(target)
        args = [kv.ARG_HICACHE_STORAGE_BACKEND, "mooncake"]
        if not _has_flag("SGLang", container, kv.ARG_ENABLE_HIERARCHICAL_CACHE):
            args.append(kv.ARG_ENABLE_HIERARCHICAL_CACHE)
        vehicle = kv.VEHICLE_ENVIRONMENT
    if dtype is not None:
        args += [kv.ARG_KV_CACHE_DTYPE, dtype]
    container["env"] = client.merge_env(user_env, injected)
    container["args"] = [*as_list(container.get("args")), *args]
    meta = out.setdefault("metadata", {})
    notes = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    meta["annotations"] = notes
    if vehicle == kv.VEHICLE_FILE:
        notes[constants.ANNOTATION_KVCACHE_CLIENT_CONFIG] = client.client_config_annotation(target)
        out["spec"]["volumes"] = [*as_list(out["spec"].get("volumes")), client.config_volume()]
        container["volumeMounts"] = [*as_list(container.get("volumeMounts")), client.config_mount()]
    notes[constants.ANNOTATION_KVCACHE_INJECTED] = client.record(
        binding=contract.binding,
        engine=contract.record_engine,
        vehicle=vehicle,
        domain=domain,
        tenant_injected=bool(target.tenant),
        program=launch.program,
        forwarded=launch.forwarded,
    )
    return out


async def mutate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    pod = request.object or {}
    name = request.display_name
    if (
        as_dict(as_dict(pod.get("metadata")).get("labels")).get(constants.LABEL_KVCACHE_INJECT)
        != kv.INJECT_TRUE
    ):
        return allow()  # the objectSelector already filters; a widened selector must stay a no-op
    contract, errors = read_contract(pod)
    if contract is None:
        return reject("Pod", name, errors)
    namespace = request.namespace or as_str(as_dict(pod.get("metadata")).get("namespace"))
    binding = await lookups.get(kv.KIND_BINDING, contract.binding, namespace, fresh=True)
    pool = (
        await lookups.get(kv.KIND_POOL, offer.pool_name(binding), fresh=True)
        if binding and offer.pool_name(binding)
        else None
    )
    backend = (
        await lookups.get(kv.KIND_BACKEND, offer.backend_name(pool), fresh=True)
        if pool and offer.backend_name(pool)
        else None
    )
    failed = resolution_error(contract, namespace, binding, pool, backend)
    if failed is not None:
        return reject("Pod", name, [failed])
    assert binding is not None and pool is not None and backend is not None
    index, failed = target_container(pod, contract)
    if failed is not None:
        return reject("Pod", name, [failed])
    dtype_owned = await lookups.setting_enabled(kv.SETTING_DTYPE_OWNED)
    errors = container_errors(pod, index, contract, dtype_owned=dtype_owned)
    container = as_dict(as_list(as_dict(pod.get("spec")).get("containers"))[index])
    try:
        launch = analyse(
            contract.engine, container.get("command"), container.get("args"), forwarding=contract.forwarding
        )
    except Refused as refused:
        errors.append(
            invalid(
                f"spec.containers[{index}].{refused.field}", container.get(refused.field), refused.message
            )
        )
    if errors:
        return reject("Pod", name, errors)
    domain = offer.domain(binding)
    ledger = offer.ledger(pool)
    target = client.ClientTarget(
        offer.client_endpoint(pool),
        offer.offered_protocols(backend)[0],
        domain["name"] if ledger.tenant else "",
    )
    injected = render(
        pod, index, contract, launch, target, domain["name"], domain["dtype"] if dtype_owned else None
    )
    return allow(jsonpatch.diff(pod, injected))
