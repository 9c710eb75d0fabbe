"""Operator-owned keys on a ModelDeployment's roles (model-deployment.md §3, §5 #14–#16, #23).

Owned args are read in ``extraArgs`` only, and only on managed roles (beside ``command`` they are
inert); owned env is refused on every role, take-over roles included.  Every flag a role may not
name is passed to the compiled reader as ONE candidate set (the connector keys, the conditional
``--kv-cache-dtype``, the artifact-owned args), so an abbreviation shared by two of them stays
unresolved, as the engine's own parser leaves it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from api import engines
from api.fielderrors import FieldError, forbidden
from fastpath import argv
from readmodels.modeldeployment import Deployment, Role

DtypeReader = Callable[[], Awaitable[str | None]]


def _as_spelled(spelled: str, key: str, engine: str) -> str:
    return key if spelled == key else f"{spelled} (which {engine} reads as {key})"


def _take_over(role: Role) -> str:
    return f"or take the whole command line over with {role.path}.command"


def _owned_arg(role: Role, engine: str, spelled: str, key: str) -> str:
    row = engines.owned_key(engine, key)
    why = row.why if row else "the operator renders it"
    return (
        f"{_as_spelled(spelled, key, engine)} is owned by the operator on {engine}: {why}, and two "
        f"values for one key cannot be told apart; remove it from extraArgs, {_take_over(role)}"
    )


def _owned_env(role: Role, engine: str, name: str) -> str:
    row = engines.owned_key(engine, name)
    why = row.why if row else "the operator renders it"
    if row is not None and row.reason == engines.REASON_SECURITY:
        scope = (
            "; a workload able to set it could write into another Binding's reuse domain, a second "
            "path to a value the API already refuses"
        )
    elif name in engines.RANK_ENV:
        scope = (
            "; it is reserved at every size, size 1 included, so that widening an instance later "
            "cannot turn an accepted deployment into a refused one"
        )
    else:
        scope = ""
    return (
        f"{name} is owned by the operator on {engine}: it selects operator-rendered configuration "
        f"({why}){scope}. Remove it from env: it is refused even on a role with a command; a program "
        f"you run through {role.path}.command may set it for itself"
    )


def _dtype(role: Role, spelled: str, dtype: str | None) -> str:
    carried = f"the Binding's dtype {dtype!r}" if dtype else "the KVCachePoolBinding's dtype"
    return (
        f"{_as_spelled(spelled, engines.KV_CACHE_DTYPE_FLAG, role.engine)} is owned while spec.kvCache "
        f"is set: the operator renders {carried} there, and engines writing two dtypes into one reuse "
        f"domain read each other's blocks wrong. Remove it and attach a KVCachePoolBinding declaring "
        f"the dtype you want, {_take_over(role)}"
    )


def _artifact_arg(role: Role, artifact: str, spelled: str, key: str) -> str:
    return (
        f"{_as_spelled(spelled, key, role.engine)} would override the weights spec.model.artifactRef "
        f"({artifact}) delivers; remove it from extraArgs, {_take_over(role)}"
    )


def _artifact_env(role: Role, artifact: str, name: str) -> str:
    return (
        f"{name} would redirect where the engine fetches the weights spec.model.artifactRef "
        f"({artifact}) delivers; remove it from env (a program run through {role.path}.command may "
        f"set it for itself)"
    )


async def owned_key_errors(md: Deployment, *, dtype_owned: bool, read_dtype: DtypeReader) -> list[FieldError]:
    """#14 owned args, #15 owned env, #16 ``--kv-cache-dtype``, #23 artifact-owned keys, per role.

    ``dtype_owned`` is the Setting ``model-deployment-kv-cache-dtype-owned``; the caller passes False
    for a deployment being deleted (a stored flag never blocks the finalizer-clearing update).
    """
    engine = md.engine
    if engine not in engines.ENGINES:
        return []
    artifact = md.artifact_ref
    artifact_args = engines.ARTIFACT_OWNED_ARGS.get(engine, frozenset()) if artifact else frozenset()
    errors: list[FieldError] = []
    dtype_cache: list[str | None] = []
    for role in md.roles:
        if role.managed and role.extra_args:
            candidates = (
                engines.owned_args(engine, kv_cache_dtype_owned=dtype_owned and md.kv_cache is not None)
                | artifact_args
            )
            for index, spelled, key in argv.find_owned_args(engine, role.extra_args, candidates):
                path = f"{role.path}.extraArgs[{index}]"
                if key == engines.KV_CACHE_DTYPE_FLAG:
                    if not dtype_cache:
                        dtype_cache.append(await read_dtype())
                    errors.append(forbidden(path, _dtype(role, spelled, dtype_cache[0])))
                elif key in artifact_args and engines.owned_key(engine, key) is None:
                    errors.append(forbidden(path, _artifact_arg(role, artifact, spelled, key)))
                else:
                    errors.append(forbidden(path, _owned_arg(role, engine, spelled, key)))
        owned = engines.owned_env(engine)
        for index, name in role.env_names():
            if name in owned:
                errors.append(forbidden(f"{role.path}.env[{index}]", _owned_env(role, engine, name)))
            elif artifact and name in engines.ARTIFACT_OWNED_ENV:
                errors.append(forbidden(f"{role.path}.env[{index}]", _artifact_env(role, artifact, name)))
    return errors
