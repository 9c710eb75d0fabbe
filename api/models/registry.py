"""The kind registry and the manifest codec: ``parse`` a document into its model, ``dump`` it back.

``parse`` reports every refusal at once as a :class:`ManifestError` whose ``errors`` are
``(field_path, message)`` pairs with Kubernetes-style paths (``spec.roles[0].resources.accelerator``)
and apiserver wording, so the same manifest reads the same refusals here and from the cluster.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from api import fielderrors
from api.fielderrors import FieldError
from api.models.base import Resource, alias_of, dump_model, is_model, iter_list_maps, list_map_key, unwrap
from api.models.devices import Devices
from api.models.instance import (
    Instance,
    InstanceImagePullSecret,
    InstancePersistentVolume,
    InstanceSSHPublicKey,
)
from api.models.instance_type import InstanceType, InstanceTypeFlavor
from api.models.kv_cache_backend import KVCacheBackend
from api.models.kv_cache_pool import KVCachePool, KVCachePoolBinding
from api.models.model_artifact import ModelArtifact
from api.models.model_deployment import ModelDeployment
from api.models.model_store import ModelPrefetch, ModelStore, ModelStoreBinding, NodeModelStore
from api.models.setting import Setting
from api.models.topology import TopologySource

RESOURCES: tuple[type[Resource], ...] = (
    Devices,
    InstanceType,
    InstanceTypeFlavor,
    Instance,
    InstanceSSHPublicKey,
    InstanceImagePullSecret,
    InstancePersistentVolume,
    ModelDeployment,
    ModelArtifact,
    ModelStore,
    ModelStoreBinding,
    NodeModelStore,
    ModelPrefetch,
    KVCacheBackend,
    KVCachePool,
    KVCachePoolBinding,
    TopologySource,
    Setting,
)

KINDS: dict[tuple[str, str], type[Resource]] = {
    (cls.__crd__.api_version, cls.__crd__.kind): cls for cls in RESOURCES
}
"""``(apiVersion, kind)`` -> model class, for every kind this operator serves."""


class ManifestError(ValueError):
    """A manifest the API refuses; ``errors`` lists ``(field_path, message)``, ``causes`` the details."""

    def __init__(
        self, causes: Sequence[FieldError], *, kind: str | None = None, name: str | None = None
    ) -> None:
        self.causes: list[FieldError] = list(causes)
        self.errors: list[tuple[str, str]] = [(c.path, c.message) for c in self.causes]
        self.kind = kind
        self.name = name
        subject = f'{kind} "{name}"' if kind and name else (kind or "manifest")
        super().__init__(f"{subject} is invalid: " + "; ".join(str(c) for c in self.causes))


def parse(document: Mapping[str, Any]) -> Resource:
    """Validate a manifest (a dict, as YAML or JSON decodes) into its kind's model."""
    if not isinstance(document, Mapping):
        raise ManifestError([fielderrors.wrong_type("", document, "object")])
    api_version, kind = document.get("apiVersion"), document.get("kind")
    name = (
        (document.get("metadata") or {}).get("name")
        if isinstance(document.get("metadata"), Mapping)
        else None
    )
    cls = KINDS.get((api_version, kind))  # type: ignore[arg-type]
    if cls is None:
        raise ManifestError(
            _unknown_kind(api_version, kind), kind=kind if isinstance(kind, str) else None, name=name
        )
    try:
        model = cls.model_validate(dict(document))
    except ValidationError as exc:
        raise ManifestError(_translate(cls, exc), kind=kind, name=name) from None
    duplicates = list(_duplicate_keys(model))
    if duplicates:
        raise ManifestError(duplicates, kind=kind, name=name)
    return model


def dump(model: BaseModel) -> dict[str, Any]:
    """The manifest of a model, as the Go types would serialise it (see ``api.models.base``)."""
    return dump_model(model)


def _unknown_kind(api_version: Any, kind: Any) -> list[FieldError]:
    errors: list[FieldError] = []
    if not api_version:
        errors.append(fielderrors.required("apiVersion"))
    if not kind:
        errors.append(fielderrors.required("kind"))
    versions = sorted(v for v, k in KINDS if k == kind)
    if not errors and versions:
        errors.append(fielderrors.not_supported("apiVersion", api_version, versions))
    if not errors:
        served = sorted(f"{k} ({v})" for v, k in KINDS)
        errors.append(
            fielderrors.invalid(
                "kind", kind, f"no such kind served at {api_version}; served kinds: {', '.join(served)}"
            )
        )
    return errors


# --- pydantic errors -> field errors -----------------------------------------------------------------


def _walk(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, Any]:
    """The Kubernetes path of a pydantic ``loc`` and the annotation found at its end."""
    parts: list[str | int] = []
    current: Any = root
    for element in loc:
        core, _, _ = unwrap(current) if current is not None else (None, [], False)
        origin = typing.get_origin(core)
        if is_model(core) and isinstance(element, str):
            parts.append(element)
            current = None
            for name, info in core.model_fields.items():
                if element in (alias_of(name, info), name):
                    current = info.annotation
                    break
        elif origin is list and isinstance(element, int):
            parts.append(element)
            current = typing.get_args(core)[0]
        elif origin is dict:
            parts.append(f"[{element}]")
            current = typing.get_args(core)[1]
        else:
            parts.append(element if isinstance(element, int) else str(element))
            current = None
    return fielderrors.format_path(parts), current


def _type_name(annotation: Any) -> str:
    core, _, _ = unwrap(annotation)
    origin = typing.get_origin(core)
    if core is bool:
        return "boolean"
    if core is int:
        return "integer"
    if core is str:
        return "string"
    if origin is list:
        return "array"
    if origin is dict or is_model(core):
        return "object"
    return "string"


def _literal_values(annotation: Any) -> tuple[Any, ...]:
    core, _, _ = unwrap(annotation)
    if typing.get_origin(core) is Literal:
        return typing.get_args(core)
    return ()


def _translate(root: type[BaseModel], exc: ValidationError) -> list[FieldError]:
    out: list[FieldError] = []
    for err in exc.errors(include_url=False):
        path, annotation = _walk(root, tuple(err["loc"]))
        kind = err["type"]
        value = err.get("input")
        ctx = err.get("ctx") or {}
        if kind == "missing":
            out.append(fielderrors.required(path))
        elif kind == "extra_forbidden":
            out.append(fielderrors.unknown(path))
        elif kind == "literal_error":
            out.append(fielderrors.not_supported(path, value, _literal_values(annotation)))
        elif kind.endswith("_type") and kind not in ("quantity_type",):
            out.append(fielderrors.wrong_type(path, value, _type_name(annotation)))
        elif kind in ("greater_than_equal", "greater_than"):
            bound = ctx.get("ge", ctx.get("gt"))
            out.append(fielderrors.below_minimum(path, value, bound, exclusive=kind == "greater_than"))
        elif kind in ("less_than_equal", "less_than"):
            bound = ctx.get("le", ctx.get("lt"))
            out.append(fielderrors.above_maximum(path, value, bound, exclusive=kind == "less_than"))
        elif kind == "string_too_long":
            out.append(fielderrors.too_long(path, ctx["max_length"]))
        elif kind == "string_too_short":
            out.append(fielderrors.too_short(path, value, ctx["min_length"]))
        elif kind == "too_long":
            out.append(
                fielderrors.too_many(path, ctx.get("actual_length", len(value or ())), ctx["max_length"])
            )
        elif kind == "too_short":
            out.append(
                fielderrors.too_few(path, ctx.get("actual_length", len(value or ())), ctx["min_length"])
            )
        elif kind == "string_pattern_mismatch":
            out.append(fielderrors.mismatch(path, value, ctx["pattern"]))
        else:
            message = str(err["msg"]).removeprefix("Value error, ")
            out.append(fielderrors.invalid(path, value, message))
    return out


def _duplicate_keys(model: Resource) -> list[FieldError]:
    out: list[FieldError] = []
    for path, items, meta in iter_list_maps(model):
        seen: set[tuple[Any, ...]] = set()
        for index, item in enumerate(items):
            key = list_map_key(item, meta.map_keys)
            marker = tuple(key.values())
            if marker in seen:
                out.append(fielderrors.duplicate(fielderrors.format_path((*path, index)), key))
            seen.add(marker)
    return out
