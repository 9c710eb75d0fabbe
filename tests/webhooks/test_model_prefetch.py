"""Admission of the pool and warming kinds (model-delivery spec §2.3, §3.5): ModelStore,
ModelStoreBinding and ModelPrefetch, from the spec's accepted and rejected examples, each refusal
checked for its field path; and over HTTP through the registry's routes.

Nodes, flavors and InstanceTypes are the operator's own renderings (``controllers.pools.render``)
of simulated nodes, so the target sets are expanded from the same objects a cluster holds."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from starlette.testclient import TestClient

from api import delivery as d
from api import prefetch as pf
from controllers.pools import render
from tests.unit.pools_fixtures import A10G, H100, node
from tests.webhooks.reviews import review
from webhooks import modelprefetch, modelstore, modelstorebinding, registry, server
from webhooks.decision import Decision
from webhooks.lookups import FileLookups
from webhooks.review import request_from_review

GROUP = "worker.gpustack.ai"
NS = "team-a"
DIGEST = "sha256:" + "ab" * 32
GiB = 1 << 30
A10G_POOL = "gpustack--nvidia-a10g-linux-amd64"
H100_POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"


def pool_label(value: str) -> dict[str, str]:
    return {"pool.example.com/name": value}


NODES = [
    node("a10g-1", A10G, 4, labels=pool_label("a10g")),
    node("a10g-2", A10G, 4, labels=pool_label("a10g")),
    node("h100-1", H100, 8, labels=pool_label("h100")),
]
FLAVORS = [render.render_flavor(group) for group in render.flavor_groups(NODES).values()]
INSTANCE_TYPES = [
    render.derived_instance_type(p, aware_cpu=False)
    for p in render.derived_pools(FLAVORS, aware_cpu=False).values()
]


def store(name: str, selector: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"nodeSelector": selector} if selector is not None else {}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ModelStore",
        "metadata": {"name": name},
        "spec": {**body, **spec},
    }


def binding(
    name: str = "grant", stores: tuple[str, ...] = ("a10g",), quota: Any = "100Gi", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ModelStoreBinding",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"storeRefs": [{"name": s} for s in stores], "quota": {"bytes": quota}, **spec},
    }


def artifact(
    name: str = "qwen", size: int = 10 * GiB, digest: str = DIGEST, resolved: bool = True
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": "Resolved", "status": "True" if resolved else "False", "reason": "Resolved"}]
    }
    if resolved:
        status["resolved"] = {"revision": "c" * 40, "manifestDigest": digest, "sizeBytes": size}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ModelArtifact",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"source": {"huggingFace": {"repository": f"org/{name}", "revision": "main"}}},
        "status": status,
    }


def prefetch(
    name: str = "warm", artifact_name: str = "qwen", grant: str = "grant", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ModelPrefetch",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"artifactRef": {"name": artifact_name}, "bindingRef": {"name": grant}, **spec},
    }


def deployment(name: str, artifact_name: str, instance_type: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "model": {"name": name, "artifactRef": {"name": artifact_name}},
            "roles": [{"name": "worker", "instanceType": instance_type}],
        },
    }


STORES = [
    store("a10g", {"matchLabels": pool_label("a10g")}),
    store("h100", {"matchLabels": pool_label("h100")}),
]


def cluster(*extra: dict[str, Any]) -> FileLookups:
    return FileLookups([*NODES, *FLAVORS, *INSTANCE_TYPES, *STORES, binding(), artifact(), *extra])


def run(handler, obj, *, old=None, operation="CREATE", lookups=None) -> Decision:
    kind = obj["kind"] if obj else old["kind"]
    body = review(
        obj,
        old=old,
        operation=operation,
        kind=kind,
        group=GROUP,
        resource={"ModelStore": "modelstores", "ModelStoreBinding": "modelstorebindings"}.get(
            kind, "modelprefetches"
        ),
    )
    return asyncio.run(handler(request_from_review(body), lookups or cluster()))


def paths(decision: Decision) -> list[str]:
    return [cause.path for cause in decision.causes]


# --- the shared expansion ---------------------------------------------------------------------------


def test_instance_types_expand_to_the_nodes_carrying_their_flavors() -> None:
    its = {pf.name_of(i): i for i in INSTANCE_TYPES}
    targets = pf.target_nodes(
        prefetch(placement={"instanceTypes": [A10G_POOL]}),
        instance_types=its,
        flavors=FLAVORS,
        nodes=NODES,
        deployments=[],
        aware_cpu=False,
    )
    assert targets.nodes == ("a10g-1", "a10g-2")
    both = pf.target_nodes(
        prefetch(placement={"instanceTypes": [A10G_POOL, H100_POOL, "nope"]}),
        instance_types=its,
        flavors=FLAVORS,
        nodes=NODES,
        deployments=[],
        aware_cpu=False,
    )
    assert both == pf.Targets(("a10g-1", "a10g-2", "h100-1"), ("nope",))


def test_no_placement_derives_the_targets_from_the_namespaces_deployments_of_the_artifact() -> None:
    its = {pf.name_of(i): i for i in INSTANCE_TYPES}
    deployments = [deployment("uses-it", "qwen", H100_POOL), deployment("other", "llama", A10G_POOL)]
    targets = pf.target_nodes(
        prefetch(), instance_types=its, flavors=FLAVORS, nodes=NODES, deployments=deployments, aware_cpu=False
    )
    assert targets.nodes == ("h100-1",)
    assert (
        pf.target_nodes(
            prefetch(), instance_types=its, flavors=FLAVORS, nodes=NODES, deployments=[], aware_cpu=False
        ).nodes
        == ()
    )


def test_the_pool_layer_winner_is_alphabetically_first_and_both_overlap() -> None:
    wide = store("all", {})
    layer = pf.pool_layer(NODES[0], [*STORES, wide])
    assert layer == pf.PoolLayer("a10g", ("a10g", "all")) and layer.overlap
    assert pf.pool_layer(NODES[2], STORES) == pf.PoolLayer("h100", ("h100",))
    broken = store("zz", {"matchExpressions": [{"key": "x", "operator": "Near"}]})
    assert not pf.store_selects(broken, NODES[0])


def test_projection_counts_each_digest_once_at_its_widest_and_unresolved_as_zero() -> None:
    a, b = artifact("a", size=10), artifact("b", size=10)  # the same digest: one tree per node
    c = artifact("c", size=7, digest="sha256:" + "cd" * 32)
    assert pf.projection([(a, 2), (b, 3), (c, 1), (artifact("u", resolved=False), 50), (None, 9)]) == 37


# --- ModelStore -------------------------------------------------------------------------------------


def test_a_store_with_overrides_is_admitted() -> None:
    obj = store(
        "a10g",
        {"matchLabels": pool_label("a10g")},
        watermarks={"highPercent": 90, "lowPercent": 60},
        download={"bytesPerSecond": 0},
    )
    assert run(modelstore.validate, obj, lookups=FileLookups(NODES)).allowed


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({}, "spec.nodeSelector"),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            "spec.nodeSelector.matchExpressions[0].operator",
        ),
        (
            {"nodeSelector": {}, "watermarks": {"highPercent": 70, "lowPercent": 80}},
            "spec.watermarks.lowPercent",
        ),
        (
            {"nodeSelector": {}, "watermarks": {"highPercent": 99, "lowPercent": 80}},
            "spec.watermarks.highPercent",
        ),
        ({"nodeSelector": {}, "download": {"concurrency": 0}}, "spec.download.concurrency"),
        ({"nodeSelector": {}, "download": {"bytesPerSecond": -1}}, "spec.download.bytesPerSecond"),
    ],
)
def test_store_refusals_name_their_field(spec: dict[str, Any], path: str) -> None:
    obj = store("s", None, **spec)
    decision = run(modelstore.validate, obj)
    assert not decision.allowed and paths(decision) == [path]


def test_a_store_sharing_nodes_with_another_is_admitted_with_a_warning() -> None:
    decision = run(modelstore.validate, store("all", {}), lookups=FileLookups([*NODES, *STORES]))
    assert decision.allowed
    assert len(decision.warnings) == 2 and "SelectorOverlap" in decision.warnings[0]
    assert "ModelStore a10g" in decision.warnings[0] and "2 node(s)" in decision.warnings[0]
    assert not run(modelstore.validate, STORES[0], lookups=FileLookups([*NODES, *STORES])).warnings


# --- ModelStoreBinding (§3.5 rule 1) ------------------------------------------------------------------


def test_quota_may_grow_and_allow_pinned_may_turn_on() -> None:
    old = binding(quota="100Gi")
    assert run(modelstorebinding.validate, binding(quota="200Gi"), old=old, operation="UPDATE").allowed
    assert run(modelstorebinding.validate, binding(allowPinned=True), old=old, operation="UPDATE").allowed


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        (binding(quota="200Gi"), binding(quota="100Gi"), "spec.quota.bytes"),
        (binding(), binding(stores=("a10g", "h100")), "spec.storeRefs"),
        (binding(allowPinned=True), binding(allowPinned=False), "spec.allowPinned"),
        (binding(allowPinned=True), binding(), "spec.allowPinned"),
    ],
)
def test_binding_updates_that_would_strand_admitted_prefetches_are_refused(old, new, path) -> None:
    decision = run(modelstorebinding.validate, new, old=old, operation="UPDATE")
    assert not decision.allowed and paths(decision) == [path]
    assert "create another ModelStoreBinding" in decision.message


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        (binding(stores=()), "spec.storeRefs"),
        (binding(stores=("a10g", "a10g")), "spec.storeRefs[1].name"),
        (binding(quota="lots"), "spec.quota.bytes"),
        (binding(quota=None), "spec.quota.bytes"),
    ],
)
def test_binding_shapes(obj, path) -> None:
    decision = run(modelstorebinding.validate, obj)
    assert not decision.allowed and paths(decision) == [path]


def test_a_binding_may_name_stores_that_do_not_exist_yet() -> None:
    assert run(modelstorebinding.validate, binding(stores=("later",)), lookups=FileLookups()).allowed


# --- ModelPrefetch (§3.5 rule 2) ----------------------------------------------------------------------


def test_a_prefetch_inside_its_grant_and_budget_is_admitted() -> None:
    obj = prefetch(placement={"instanceTypes": [A10G_POOL]}, minReady=1, retention={"ttlAfterLastUse": "72h"})
    decision = run(modelprefetch.validate, obj)
    assert decision.allowed, decision.message


def test_pinning_needs_the_bindings_permission() -> None:
    obj = prefetch(placement={"instanceTypes": [A10G_POOL]}, retention={"pinned": True})
    decision = run(modelprefetch.validate, obj)
    assert paths(decision) == ["spec.retention.pinned"] and "allowPinned" in decision.message
    allowed = cluster(binding(allowPinned=True))
    assert run(modelprefetch.validate, obj, lookups=allowed).allowed


def test_a_missing_artifact_or_binding_is_refused() -> None:
    decision = run(modelprefetch.validate, prefetch(artifact_name="nope", grant="none"))
    assert paths(decision) == ["spec.artifactRef.name", "spec.bindingRef.name"]
    assert "Not found" in decision.message


def test_both_placement_kinds_are_refused() -> None:
    obj = prefetch(
        placement={"instanceTypes": [A10G_POOL], "nodeSelector": {"matchLabels": pool_label("a10g")}}
    )
    decision = run(modelprefetch.validate, obj)
    assert paths(decision) == ["spec.placement"] and "give one" in decision.message


def test_a_target_outside_every_granted_store_is_refused_by_name() -> None:
    obj = prefetch(
        placement={
            "nodeSelector": {"matchExpressions": [{"key": "pool.example.com/name", "operator": "Exists"}]}
        }
    )
    decision = run(modelprefetch.validate, obj)
    assert paths(decision) == ["spec.placement"]
    assert "h100-1" in decision.message and "a10g-1" not in decision.message and "(a10g)" in decision.message
    wider = cluster(binding(stores=("a10g", "h100")))
    assert run(modelprefetch.validate, obj, lookups=wider).allowed


def test_derived_targets_are_judged_like_stated_ones() -> None:
    on_h100 = cluster(deployment("md", "qwen", H100_POOL))
    decision = run(modelprefetch.validate, prefetch(), lookups=on_h100)
    assert paths(decision) == ["spec.placement"] and "h100-1" in decision.message
    assert run(
        modelprefetch.validate, prefetch(), lookups=cluster(deployment("md", "qwen", A10G_POOL))
    ).allowed


def test_a_projection_past_the_budget_is_refused() -> None:
    # 10 GiB on two A10G nodes is 20 GiB; a 15 GiB grant cannot hold it.
    small = cluster(binding(quota="15Gi"))
    obj = prefetch(placement={"instanceTypes": [A10G_POOL]})
    decision = run(modelprefetch.validate, obj, lookups=small)
    assert paths(decision) == ["spec.bindingRef.name"]
    assert "20.0Gi" in decision.message and "15.0Gi" in decision.message
    one = prefetch(placement={"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": "a10g-1"}}})
    assert run(modelprefetch.validate, one, lookups=small).allowed


def test_the_binding_s_other_prefetches_count_at_their_widest() -> None:
    # Another prefetch of the same digest on one node: the widest ask (2 nodes) counts, not the sum.
    other = prefetch(
        "other", placement={"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": "a10g-1"}}}
    )
    lookups = cluster(binding(quota="20Gi"), other)
    assert run(
        modelprefetch.validate, prefetch(placement={"instanceTypes": [A10G_POOL]}), lookups=lookups
    ).allowed
    # Another digest counts on top.
    llama = artifact("llama", size=5 * GiB, digest="sha256:" + "ef" * 32)
    lookups = cluster(
        binding(quota="20Gi"),
        llama,
        prefetch("other", artifact_name="llama", placement={"instanceTypes": [A10G_POOL]}),
    )
    decision = run(
        modelprefetch.validate, prefetch(placement={"instanceTypes": [A10G_POOL]}), lookups=lookups
    )
    assert paths(decision) == ["spec.bindingRef.name"] and "30.0Gi" in decision.message


def test_an_unresolved_artifact_projects_nothing() -> None:
    lookups = cluster(binding(quota="1Gi"), artifact(resolved=False))
    assert run(
        modelprefetch.validate, prefetch(placement={"instanceTypes": [A10G_POOL]}), lookups=lookups
    ).allowed


def test_an_update_is_judged_again() -> None:
    old = prefetch(placement={"instanceTypes": [A10G_POOL]})
    new = prefetch(placement={"instanceTypes": [A10G_POOL]}, retention={"pinned": True})
    decision = run(modelprefetch.validate, new, old=old, operation="UPDATE")
    assert paths(decision) == ["spec.retention.pinned"]


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"artifactRef": {"name": ""}}, "spec.artifactRef.name"),
        ({"retention": {"ttlAfterLastUse": "soon"}}, "spec.retention.ttlAfterLastUse"),
        ({"retention": {"ttlAfterLastUse": "0s"}}, "spec.retention.ttlAfterLastUse"),
        (
            {"placement": {"nodeSelector": {"matchLabels": {"bad key!": "x"}}}},
            "spec.placement.nodeSelector.matchLabels[bad key!]",
        ),
        ({"placement": {"instanceTypes": []}}, "spec.placement.instanceTypes"),
    ],
)
def test_prefetch_shapes(spec: dict[str, Any], path: str) -> None:
    obj = prefetch()
    obj["spec"].update(copy.deepcopy(spec))
    decision = run(modelprefetch.validate, obj)
    assert not decision.allowed and paths(decision)[0] == path


def test_an_unknown_instance_type_warms_nothing_and_is_a_warning() -> None:
    decision = run(
        modelprefetch.validate, prefetch(placement={"instanceTypes": ["gpustack--nope-linux-amd64"]})
    )
    assert decision.allowed and "gpustack--nope-linux-amd64 does not exist" in decision.warnings[0]


# --- over HTTP --------------------------------------------------------------------------------------


def test_the_three_kinds_are_served_on_their_registry_routes() -> None:
    hooks = {
        w.kind: w for w in registry.WEBHOOKS if w.kind in (d.KIND_STORE, d.KIND_BINDING, d.KIND_PREFETCH)
    }
    assert set(hooks) == {d.KIND_STORE, d.KIND_BINDING, d.KIND_PREFETCH}
    assert hooks[d.KIND_STORE].scope == "Cluster" and hooks[d.KIND_PREFETCH].scope == "Namespaced"
    with TestClient(server.create_app(cluster())) as client:
        body = review(
            binding(quota="100Gi"),
            old=binding(quota="200Gi"),
            operation="UPDATE",
            kind="ModelStoreBinding",
            group=GROUP,
            resource="modelstorebindings",
        )
        answer = client.post(hooks[d.KIND_BINDING].path, json=body).json()["response"]
        assert (
            answer["allowed"] is False
            and answer["status"]["details"]["causes"][0]["field"] == "spec.quota.bytes"
        )
        body = review(
            prefetch(placement={"instanceTypes": [A10G_POOL]}),
            kind="ModelPrefetch",
            group=GROUP,
            resource="modelprefetches",
        )
        assert client.post(hooks[d.KIND_PREFETCH].path, json=body).json()["response"]["allowed"] is True
