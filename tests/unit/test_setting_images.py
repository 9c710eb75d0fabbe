"""Every image a Setting names runs under the ``container-namespace`` and ``container-registry``
Settings (api/images.py), as the chart's own images run under ``global.imageNamespace`` and
``global.imageRegistry``, which seed those two: the Instance sshd sidecar, the managed router and
its proxy, the routing sidecar, the engine-image override, the prefetch warm-up Pod and a KV cache
backend naming no image. Blank Settings change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from api import constants, images, kvcache
from api.delivery import SETTING_WARMUP_IMAGE
from api.engines import SETTING_ENGINE_IMAGE, SETTING_ROUTING_SIDECAR_IMAGE
from api.objects import Obj
from api.settings import definition
from controllers.delivery.prefetches import ModelPrefetchReconciler
from controllers.instance.facts import SSH_SERVER_IMAGE
from controllers.kvcache.backend import KVCacheBackendReconciler
from controllers.modeldeployment import fronts
from controllers.settings import SettingsReader
from kube.manager import Manager
from tests.unit.md_world import RecordingClient, controller_on

MIRROR = {
    images.SETTING_CONTAINER_REGISTRY: "registry.local:5000",
    images.SETTING_CONTAINER_NAMESPACE: "mirror",
}


def setting(name: str, value: str) -> Obj:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": constants.SYSTEM_NAMESPACE},
        "spec": {"value": value},
    }


class Stored:
    """A Setting watch cache holding ``values`` (a name absent: no object)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, name: str, namespace: str = "") -> Obj | None:
        return setting(name, self.values[name]) if name in self.values else None


def mirrored(name: str) -> str:
    """The default image of ``name`` under MIRROR."""
    return "registry.local:5000/mirror/" + definition(name).default.split("/", 1)[1]


@pytest.mark.parametrize(
    "name",
    [
        SSH_SERVER_IMAGE,
        fronts.SETTING_ROUTER_IMAGE,
        fronts.SETTING_ROUTER_PROXY_IMAGE,
        SETTING_ROUTING_SIDECAR_IMAGE,
        SETTING_WARMUP_IMAGE,
        kvcache.SETTING_BACKEND_IMAGE,
    ],
)
def test_an_image_setting_reads_under_the_container_settings(name: str) -> None:
    assert SettingsReader(Stored({})).image(name) == definition(name).default  # type: ignore[arg-type]
    assert SettingsReader(Stored(MIRROR)).image(name) == mirrored(name)  # type: ignore[arg-type]
    only_registry = {images.SETTING_CONTAINER_REGISTRY: "registry.local:5000"}
    assert SettingsReader(Stored(only_registry)).image(name) == (  # type: ignore[arg-type]
        "registry.local:5000/" + definition(name).default
    )


def test_a_blank_image_stays_blank_and_a_stored_bad_registry_is_not_used() -> None:
    reader = SettingsReader(Stored({**MIRROR, kvcache.SETTING_BACKEND_IMAGE: ""}))  # type: ignore[arg-type]
    assert reader.image(kvcache.SETTING_BACKEND_IMAGE) == ""  # blank restores the refusal (kv-cache §7)
    assert reader.image(SETTING_ENGINE_IMAGE) == ""  # no override: the runner formula
    bad = {images.SETTING_CONTAINER_REGISTRY: "https://registry.local"}  # the webhook refuses it
    assert SettingsReader(Stored(bad)).image(SSH_SERVER_IMAGE) == definition(SSH_SERVER_IMAGE).default  # type: ignore[arg-type]


def test_the_model_deployment_controller_runs_the_sidecar_and_engine_images_mirrored() -> None:
    controller = controller_on(RecordingClient())
    for name, value in {
        **MIRROR,
        SETTING_ENGINE_IMAGE: "gpustack/gpustack-operator-py-engine:v0.1.0",
    }.items():
        controller.settings.informer._store("ADDED", setting(name, value))
    facts = controller.facts()
    assert facts.routing_sidecar_image == mirrored(SETTING_ROUTING_SIDECAR_IMAGE)
    assert facts.engine_image == "registry.local:5000/mirror/gpustack-operator-py-engine:v0.1.0"


def test_the_router_and_its_proxy_run_mirrored(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def render(md: Any, owner: Any, **kwargs: Any) -> list[Obj]:
        seen.update(kwargs)
        return []

    monkeypatch.setattr(fronts.router, "render", render)
    front = fronts.Fronts(RecordingClient(), None, {}, SettingsReader(Stored(MIRROR)))  # type: ignore[arg-type]
    obj = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": "m", "uid": "u"},
    }
    front._apply_router(obj, None, target_port=8000)  # type: ignore[arg-type]
    assert seen["image"] == mirrored(fronts.SETTING_ROUTER_IMAGE)
    assert seen["proxy_image"] == mirrored(fronts.SETTING_ROUTER_PROXY_IMAGE)


def test_the_warm_up_pod_and_a_kv_backend_naming_no_image_run_mirrored() -> None:
    client = RecordingClient()
    manager = Manager(client, leader_election=False)  # type: ignore[arg-type]
    prefetches = manager.add(ModelPrefetchReconciler)
    backends = manager.add(KVCacheBackendReconciler)
    assert isinstance(prefetches, ModelPrefetchReconciler) and isinstance(backends, KVCacheBackendReconciler)
    for name, value in MIRROR.items():
        prefetches.settings.informer._store("ADDED", setting(name, value))
        backends.settings._store("ADDED", setting(name, value))
    prefetch = {"kind": "ModelPrefetch", "metadata": {"name": "p", "namespace": "team-a"}, "spec": {}}
    assert prefetches._facts(prefetch).image == mirrored(SETTING_WARMUP_IMAGE)
    assert backends._setting_image() == mirrored(kvcache.SETTING_BACKEND_IMAGE)


def test_a_changed_container_setting_wakes_the_prefetches() -> None:
    """A warm-up Pod created after the change runs the image under the new Settings."""
    manager = Manager(RecordingClient(), leader_election=False)  # type: ignore[arg-type]
    prefetches = manager.add(ModelPrefetchReconciler)
    assert isinstance(prefetches, ModelPrefetchReconciler)
    prefetches.prefetches._store(
        "ADDED", {"kind": "ModelPrefetch", "metadata": {"name": "p", "namespace": "team-a"}}
    )
    (on_setting,) = [w.mapper for w in prefetches.watches() if w.kind == "Setting"]
    for name in (*MIRROR, SETTING_WARMUP_IMAGE):
        assert ("team-a", "p") in on_setting("MODIFIED", setting(name, "x"), None), name
    assert not on_setting("MODIFIED", setting("model-store-peer-sync", "false"), None)
