"""The runner image formula (model-deployment.md §8).

A role naming ``image`` runs it; a deployment naming ``spec.engine.image`` runs that on every role
that names none; otherwise the image is assembled from the engine and the role's InstanceType::

    gpustack/runner:<backend><runtimeVersion>[-<variant>]-<engine><version>
    gpustack/runner:cuda12.9-vllm0.29.0        gpustack/runner:cann9.0-910b-sglang0.5.18

The inputs are ``spec.engine.version`` and the InstanceType's observed ``status.detail``
(``manufacturer``, ``family``, ``runtimeVersion``/``runtimeVersions``).  The runtime version is the
pool's **lowest** (an image is fixed before admission picks a node, and only the lowest runs on every
node); a pool reporting several is a skew the controller reports as ``RuntimeVersionSkew``.

Failures are checked in the spec's order and each says whether it can resolve on its own
(``transient``: the InstanceType has not observed that fact yet) or never will (``permanent``: the
role must name an image).  Admission checks none of this: an InstanceType's status may lag.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api import engines
from api.versions import ordered

REPOSITORY = "gpustack/runner"

BACKENDS: Mapping[str, str] = {
    "nvidia": "cuda",
    "ascend": "cann",
    "amd": "rocm",
    "metax": "maca",
    "mthreads": "musa",
    "iluvatar": "corex",
    "hygon": "dtk",
    "thead": "hggc",
}
"""Manufacturer -> runner backend.  ``cambricon`` (and any other) has none: the role names an image."""

ASCEND_VARIANTS: Mapping[str, str] = {"310P": "310p", "910B": "910b", "910C": "a3", "950": "950"}
"""Ascend family -> runner variant (a table, not lower-casing); ``910`` and ``310B`` publish none."""

ENGINE_TAGS: Mapping[str, str] = {engines.ENGINE_VLLM: "vllm", engines.ENGINE_SGLANG: "sglang"}


class ImageError(Exception):
    """The image cannot be assembled; ``transient`` when a later observation can resolve it."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient


@dataclass(frozen=True, slots=True)
class RuntimeVersions:
    """The runtime version the image takes (the lowest) and every one the pool reports."""

    taken: str
    reported: tuple[str, ...]

    @property
    def skewed(self) -> bool:
        return len(self.reported) > 1


def runtime_versions(detail: Mapping[str, Any]) -> RuntimeVersions | None:
    """The pool's runtime versions from ``status.detail``, or None when none is observed."""
    reported = {v for v in detail.get("runtimeVersions") or () if isinstance(v, str) and v}
    single = detail.get("runtimeVersion")
    if isinstance(single, str) and single:
        reported.add(single)
    if not reported:
        return None
    lowest_first = tuple(ordered(reported))
    return RuntimeVersions(lowest_first[0], lowest_first)


def synthesize(engine: str, version: str, instance_type: Mapping[str, Any], role: str) -> str:
    """The runner image for ``role`` on ``instance_type``, or :class:`ImageError`."""
    type_name = (instance_type.get("metadata") or {}).get("name", "")
    if not version:
        raise ImageError(
            f"role {role} names no image and spec.engine.version is empty: set a version or an image",
            transient=False,
        )
    detail = (instance_type.get("status") or {}).get("detail") or {}
    manufacturer = detail.get("manufacturer") or ""
    if not manufacturer:
        raise ImageError(
            f"InstanceType {type_name} has not observed its manufacturer yet, so role {role}'s runner "
            "image cannot be assembled; it resolves once the pool's nodes report (transient)",
            transient=True,
        )
    backend = BACKENDS.get(manufacturer)
    if backend is None:
        raise ImageError(
            f"no runner image is published for manufacturer {manufacturer!r} (InstanceType {type_name}); "
            f"role {role} must name its image in spec.roles[].image (permanent)",
            transient=False,
        )
    variant = ""
    if manufacturer == "ascend":
        family = detail.get("family") or ""
        variant = ASCEND_VARIANTS.get(family, "")
        if not variant:
            raise ImageError(
                f"no runner image is published for Ascend family {family or '(none)'!r} (InstanceType "
                f"{type_name}); role {role} must name its image in spec.roles[].image (permanent)",
                transient=False,
            )
    versions = runtime_versions(detail)
    if versions is None:
        raise ImageError(
            f"InstanceType {type_name} has not observed a runtime version yet, so role {role}'s runner "
            "image cannot be assembled; it resolves once the pool's nodes report one (transient)",
            transient=True,
        )
    tag = f"{backend}{versions.taken}" + (f"-{variant}" if variant else "")
    return f"{REPOSITORY}:{tag}-{ENGINE_TAGS.get(engine, engine.lower())}{version}"


def image_for(
    role_image: str, engine_image: str, engine: str, version: str, instance_type: Mapping[str, Any], role: str
) -> str:
    """A stated image wins (the role's, then the deployment's); else the formula."""
    if role_image:
        return role_image
    if engine_image:
        return engine_image
    return synthesize(engine, version, instance_type, role)
