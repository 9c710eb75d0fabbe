"""The plugin's configuration: its own ``NodeModelStore.spec`` and the CA ConfigMap it names,
re-validated by the plugin (spec §4.5: an invalid one is ``Ready=False/InvalidConfiguration`` — no
download starts and nothing is collected; published content still mounts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api.manifest import DIGEST_PATTERN
from modelhub.connection import HubConnection


@dataclass(frozen=True)
class PluginConfig:
    generation: int
    high: int
    low: int
    concurrency: int
    bytes_per_second: int
    connection: HubConnection
    kubelet: Mapping[str, Any] | None = None
    pinned: frozenset[str] = field(default_factory=frozenset)
    peer_sync: bool = True  # spec.peerSync (the Setting model-store-peer-sync); absent reads as true


def _int(value: Any, path: str, low: int, high: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{path} must be an integer")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{path} must be {bound}, not {value}")
    return value


def _str(value: Any, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{path} must be a string")
    return value


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_config(nms: Mapping[str, Any], ca_bundle: str | None) -> PluginConfig:
    """The configuration ``nms`` (a NodeModelStore) states. ``ca_bundle``: the named ConfigMap's
    ``ca.crt``, None when the spec names one that could not be read. Raises ValueError naming the
    field that fails."""
    spec = nms.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("spec is missing")
    marks = _mapping(spec.get("watermarks"))
    high = _int(marks.get("highPercent"), "spec.watermarks.highPercent", 2, 95)
    low = _int(marks.get("lowPercent"), "spec.watermarks.lowPercent", 1, 94)
    if low >= high:
        raise ValueError(f"spec.watermarks.lowPercent ({low}) must be below highPercent ({high})")
    download = _mapping(spec.get("download"))
    concurrency = _int(download.get("concurrency"), "spec.download.concurrency", 1, 64)
    rate = download.get("bytesPerSecond", 0)
    rate = _int(0 if rate is None else rate, "spec.download.bytesPerSecond", 0, None)
    hub = _mapping(spec.get("hub"))
    ca_name = _str(hub.get("caBundleConfigMap"), "spec.hub.caBundleConfigMap")
    if ca_name and ca_bundle is None:
        raise ValueError(f"spec.hub.caBundleConfigMap: ConfigMap {ca_name} with key ca.crt could not be read")
    connection = HubConnection(
        _str(hub.get("huggingFaceEndpoint"), "spec.hub.huggingFaceEndpoint"),
        _str(hub.get("httpsProxy"), "spec.hub.httpsProxy"),
        _str(hub.get("noProxy"), "spec.hub.noProxy"),
        (ca_bundle or "") if ca_name else "",
    )
    problem = connection.problem()
    if problem:
        raise ValueError(f"spec.hub: {problem}")
    pinned = spec.get("pinned") or []
    if not isinstance(pinned, list) or not all(
        isinstance(p, str) and DIGEST_PATTERN.fullmatch(p) for p in pinned
    ):
        raise ValueError("spec.pinned must be a list of sha256 digests")
    peer_sync = spec.get("peerSync", True)
    if peer_sync is None:
        peer_sync = True
    if not isinstance(peer_sync, bool):
        raise ValueError("spec.peerSync must be true or false")
    kubelet = spec.get("kubelet")
    generation = (nms.get("metadata") or {}).get("generation") or 0
    return PluginConfig(
        generation=int(generation),
        high=high,
        low=low,
        concurrency=concurrency,
        bytes_per_second=rate,
        connection=connection,
        kubelet=kubelet if isinstance(kubelet, Mapping) else None,
        pinned=frozenset(pinned),
        peer_sync=peer_sync,
    )
