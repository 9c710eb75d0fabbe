"""KVCachePool (P1–P4) and KVCachePoolBinding (K1–K5) admission (kv-cache spec §3.2–§3.3)."""

from __future__ import annotations

import copy

import pytest

from tests.webhooks.kvcache_objects import backend, binding, external, paths, pool, ready_pool, run, setting
from webhooks.kvcache import binding as binding_rules
from webhooks.kvcache import pool as pool_rules


# --- Pool -------------------------------------------------------------------------------------------
def test_p1_exactly_one_backend() -> None:
    assert run(pool_rules.validate, pool(), cluster=[backend()]).allowed
    for bad in (["a", "b"], [], "a", [""]):
        decision = run(pool_rules.validate, pool(backends=bad))
        assert paths(decision) == ["spec.backends"], bad
    assert "ledger" in run(pool_rules.validate, pool(backends=["a", "b"])).message


def test_p2_backends_are_immutable() -> None:
    old = pool()
    new = pool(total="900Gi")
    assert run(pool_rules.validate, new, old=old, operation="UPDATE").allowed
    decision = run(pool_rules.validate, pool(backends=("other",)), old=old, operation="UPDATE")
    assert paths(decision) == ["spec.backends"]


@pytest.mark.parametrize("total", ["0", 0, "-1Gi", "lots", None])
def test_p3_total_is_positive(total) -> None:
    assert paths(run(pool_rules.validate, pool(total=total))) == ["spec.quota.total"]


def test_p4_single_tenant_managed_backend_warns() -> None:
    single = backend()
    single["spec"]["connection"]["managed"]["leader"]["multiTenancy"] = False
    decision = run(pool_rules.validate, pool(), cluster=[single])
    assert decision.allowed and "multiTenancy: false" in decision.warnings[0]
    assert not run(pool_rules.validate, pool(backends=("mooncake-ext",)), cluster=[external()]).warnings
    assert not run(pool_rules.validate, pool(), cluster=[backend()]).warnings


# --- Binding ----------------------------------------------------------------------------------------
CLUSTER = [backend(), pool(), backend("other"), pool("other-pool", backends=("other",))]


def test_seed_binding_is_admitted() -> None:
    assert run(binding_rules.validate, binding(), cluster=CLUSTER).allowed


def test_k1_frozen_fields() -> None:
    old = binding()
    new = binding(ceiling="8Gi")
    assert run(binding_rules.validate, new, old=old, operation="UPDATE").allowed
    for change, path in (
        ({"dtype": "float16"}, "spec.domain.dtype"),
        ({"blockSize": 32}, "spec.domain.blockSize"),
        ({"domain_name": "other"}, "spec.domain.name"),
    ):
        decision = run(binding_rules.validate, binding(**change), old=old, operation="UPDATE")
        assert paths(decision) == [path]
    moved = binding(pool_name="other-pool")
    assert paths(run(binding_rules.validate, moved, old=old, operation="UPDATE")) == ["spec.poolRef"]


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        (binding(domain_name="Qwen_72B"), "spec.domain.name"),
        (binding(ceiling="0"), "spec.quota.ceiling"),
        (binding(blockSize=0), "spec.domain.blockSize"),
        (binding(blockSize="64"), "spec.domain.blockSize"),
        (binding(dtype=""), "spec.domain.dtype"),
    ],
)
def test_k2_shapes(obj, path) -> None:
    assert paths(run(binding_rules.validate, obj, cluster=CLUSTER)) == [path]
    assert run(binding_rules.validate, binding(domain_name="qwen-72b-v2"), cluster=CLUSTER).allowed


def test_k3_domain_unique_per_backend() -> None:
    holder = binding("qwen", "team-a", domain_name="qwen")
    decision = run(
        binding_rules.validate, binding("qwen", "team-b", domain_name="qwen"), cluster=[*CLUSTER, holder]
    )
    assert paths(decision) == ["spec.domain.name"]
    assert "team-a/qwen" in decision.message and "mooncake-dram" in decision.message
    elsewhere = binding("qwen", "team-b", pool_name="other-pool", domain_name="qwen")
    assert run(binding_rules.validate, elsewhere, cluster=[*CLUSTER, holder]).allowed


def test_k3_two_bindings_omitting_the_name_collide_on_default() -> None:
    first = binding("a", "team-a")
    del first["spec"]["domain"]["name"]
    second = copy.deepcopy(first)
    second["metadata"] = {"name": "b", "namespace": "team-b"}
    decision = run(binding_rules.validate, second, cluster=[*CLUSTER, first])
    assert "default" in decision.message and not decision.allowed


def test_k4_second_domain_on_a_single_tenant_master() -> None:
    holder = binding("a", "team-a", domain_name="alpha")
    newcomer = binding("b", "team-b", domain_name="beta")
    decision = run(binding_rules.validate, newcomer, cluster=[*CLUSTER, holder])
    assert decision.allowed and "tenant id" in decision.warnings[0]
    disabled = ready_pool(ledger=("False", "MultiTenancyDisabled"))
    decision = run(binding_rules.validate, newcomer, cluster=[backend(), disabled, holder])
    assert paths(decision) == ["spec.domain.name"]
    single = backend()
    single["spec"]["connection"]["managed"]["leader"]["multiTenancy"] = False
    assert not run(binding_rules.validate, newcomer, cluster=[single, pool(), holder]).allowed
    assert run(
        binding_rules.validate, binding("b", "team-b", domain_name="alpha"), cluster=[single, pool()]
    ).allowed


def test_k5_auto_dtype() -> None:
    decision = run(binding_rules.validate, binding(dtype="auto"), cluster=CLUSTER)
    assert paths(decision) == ["spec.domain.dtype"]
    off = [*CLUSTER, setting("model-deployment-kv-cache-dtype-owned", "false")]
    assert run(binding_rules.validate, binding(dtype="auto"), cluster=off).allowed
    stored = binding(dtype="auto")
    assert run(
        binding_rules.validate, binding(dtype="auto", **{}), old=stored, operation="UPDATE", cluster=CLUSTER
    ).allowed
    assert run(binding_rules.validate, binding(dtype="bfloat16"), cluster=CLUSTER).allowed


def test_a_binding_naming_a_missing_pool_is_admitted_for_its_status_to_report() -> None:
    assert run(binding_rules.validate, binding(pool_name="nope"), cluster=CLUSTER).allowed
