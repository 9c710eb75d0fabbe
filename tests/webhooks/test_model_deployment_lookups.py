"""ModelDeployment rules that read other objects (§5 #30–#37): InstanceTypes, the barrier Setting,
and the KVCachePoolBinding → KVCachePool → KVCacheBackend chain, all read uncached."""

from __future__ import annotations

import asyncio
import copy

import pytest

from tests.webhooks import objects
from tests.webhooks.model_deployments import (
    A10G,
    A10G_ARM,
    BIG,
    GENERIC,
    H100,
    T4,
    backend,
    cause,
    cluster,
    deleting,
    kv_cache,
    md,
    paths,
    pd,
    request,
    role,
    run,
)
from webhooks import modeldeployment
from webhooks.lookups import FileLookups, LookupFailed

validate = modeldeployment.validate


def accepted(obj, **kwargs):
    decision = run(validate, obj, **kwargs)
    assert decision.allowed, decision.message


def refused(obj, path, *words, **kwargs):
    message = cause(run(validate, obj, **kwargs), path)
    for word in words:
        assert word in message, (word, message)


def _res(**resources):
    return {"accelerator": "1", **resources}


# --- #30 modes the type does not offer, #31 capacity ---------------------------------------------------


def test_30_slice_on_a_type_that_does_not_slice():
    accepted(md(role(resources=_res(acceleratorSlicedMemoryPercentage=50))))
    refused(
        md(role(instanceType=H100, resources=_res(acceleratorSlicedMemoryPercentage=50))),
        "spec.roles[0].resources.acceleratorSlicedMemoryPercentage",
        H100,
        "logical slices",
        "3g.40gb",
    )
    refused(
        md(role(instanceType=GENERIC, resources={"acceleratorSlicedCoresPercentage": 50})),
        "spec.roles[0].resources.acceleratorSlicedCoresPercentage",
        "no accelerators",
    )


def test_30_partition_profiles():
    accepted(md(role(instanceType=H100, resources=_res(acceleratorPartitionedProfile="3g.40gb"))))
    refused(
        md(role(resources=_res(acceleratorPartitionedProfile="3g.40gb"))),
        "spec.roles[0].resources.acceleratorPartitionedProfile",
        A10G,
        "does not partition",
    )
    refused(
        md(role(instanceType=H100, resources=_res(acceleratorPartitionedProfile="2g.20gb"))),
        "spec.roles[0].resources.acceleratorPartitionedProfile",
        "1g.10gb, 3g.40gb, 7g.80gb",
    )


def test_30_a_share_is_one_accelerator():
    refused(
        md(role(resources={"accelerator": "2", "acceleratorSlicedMemoryPercentage": 50})),
        "spec.roles[0].resources.accelerator",
        "set accelerator to 1",
    )


def test_30_an_unobserved_detail_is_a_retry_unless_something_else_is_refused():
    decision = run(validate, md(role(instanceType=T4, resources=_res(acceleratorSlicedMemoryPercentage=50))))
    assert not decision.allowed and decision.code == 500 and decision.retryable
    assert T4 in decision.message and "not ready yet; retry" in decision.message
    assert decision.message.count("retry") == 1
    # Whole cards need no detail.
    accepted(md(role(instanceType=T4)))
    # A definite refusal elsewhere wins over the retry.
    obj = md(role(instanceType=T4, resources=_res(acceleratorSlicedMemoryPercentage=50)), version=None)
    assert run(validate, obj).code == 422


def test_31_whole_cards_over_the_pool_capacity():
    accepted(md(role(instanceType=BIG, resources={"accelerator": "8"})))
    refused(
        md(role(instanceType=BIG, resources={"accelerator": "32"})),
        "spec.roles[0].resources.accelerator",
        "16 accelerators in all",
    )
    refused(
        md(role(instanceType=GENERIC, resources={"accelerator": "1"})), "spec.roles[0].resources.accelerator"
    )
    accepted(md(role(instanceType=GENERIC, resources={})))


def test_32_explicit_zero_on_a_shared_acceleratable_type():
    accepted(md(role("a", resources={"accelerator": "0"})))
    accepted(md(role("a"), role("b", instanceType=GENERIC, resources={})))
    refused(
        md(role("a"), role("b", resources={"accelerator": "0"})),
        "spec.roles[1].resources.accelerator",
        A10G,
        "at least one accelerator",
        "non-acceleratable",
    )


def test_33_prefill_and_decode_slices_of_one_accelerator_group():
    accepted(pd(router=None))
    sliced = _res(acceleratorSlicedMemoryPercentage=50)
    obj = md(role("p", kind="Prefill", resources=sliced), role("d", kind="Decode", resources=sliced))
    message = cause(run(validate, obj), "spec.roles[1].resources.acceleratorSlicedMemoryPercentage")
    assert "'p'" in message and "'d'" in message and "nvidia-a10g" in message
    # Two types of one accelerator group are one group.
    obj = md(
        role("p", kind="Prefill", resources=sliced),
        role("d", kind="Decode", resources=sliced, instanceType=A10G_ARM),
    )
    refused(obj, "spec.roles[1].resources.acceleratorSlicedMemoryPercentage")
    # Whole cards on one side, or two Servers, are fine.
    accepted(md(role("p", kind="Prefill", resources=sliced), role("d", kind="Decode")))
    accepted(md(role("a", resources=sliced), role("b", resources=sliced)))


# --- #34 the barrier, #35 missing types --------------------------------------------------------------


def test_34_two_instance_types_need_derived_queues():
    off = cluster(objects.setting("instance-type-derived-from-node", "false"))
    two = md(role("a"), role("b", instanceType=BIG))
    accepted(md(role("a"), role("b")), objects_=off)
    accepted(two)
    decision = run(validate, two, objects_=off)
    assert paths(decision) == ["spec.roles"] and decision.causes[0].reason == "FieldValueForbidden"
    assert "joint admission check" in decision.causes[0].message


def test_35_a_missing_instance_type_is_a_not_found_joined_with_the_rest():
    accepted(md(role()))
    obj = md(role(instanceType="gpustack--nvidia-a10g-linux-amd46", env=[{"name": "GPUSTACK_REPLICA_SIZE"}]))
    decision = run(validate, obj)
    assert paths(decision) == ["spec.roles[0].env[0]", "spec.roles[0].instanceType"]
    assert decision.causes[1].reason == "FieldValueNotFound"
    assert "gpustack--nvidia-a10g-linux-amd46" in decision.causes[1].message


class Counting(FileLookups):
    """FileLookups that records every read, or fails reads of one kind."""

    def __init__(self, objs, fail: str = "") -> None:
        super().__init__(objs)
        self.reads: list[tuple[str, str, bool]] = []
        self.fail = fail

    async def get(self, kind, name, namespace="", *, fresh=False):
        if kind == self.fail:
            raise LookupFailed("the apiserver did not answer")
        self.reads.append((kind, name, fresh))
        return await super().get(kind, name, namespace, fresh=fresh)


def test_lookups_are_uncached_and_memoised_by_name():
    lookups = Counting(cluster())
    obj = md(role("a"), role("b"), role("c"), kvCache=kv_cache())
    decision = asyncio.run(validate(_request(obj), lookups))
    assert decision.allowed, decision.message
    reads = [r for r in lookups.reads if r[0] != "Setting"]
    assert reads.count(("InstanceType", A10G, True)) == 1
    for kind in ("KVCachePoolBinding", "KVCachePool", "KVCacheBackend"):
        assert [r for r in reads if r[0] == kind] and all(r[2] for r in reads if r[0] == kind)


@pytest.mark.parametrize("kind", ["InstanceType", "KVCachePoolBinding"])
def test_a_failed_read_propagates_for_the_server_to_retry(kind):
    obj = md(role(), kvCache=kv_cache())
    with pytest.raises(LookupFailed):
        asyncio.run(validate(_request(obj), Counting(cluster(), fail=kind)))


def _request(obj, old=None):
    return request(obj, old=old)


# --- #36 interfaces ---------------------------------------------------------------------------------------


def _iface(count="1", **spec):
    return md(role(resources=_res(interface=count)), **spec)


def test_36_interfaces_need_a_managed_rdma_or_efa_leg():
    accepted(_iface(kvCache=kv_cache()), objects_=cluster(kv_groups=("RDMA",)))
    accepted(_iface(kvCache=kv_cache()), objects_=cluster(kv_groups=("EFA", "EFA")))
    refused(
        _iface(kvCache=kv_cache()), "spec.roles[0].resources.interface", "tcp", "no managed RDMA or EFA leg"
    )
    refused(_iface(), "spec.roles[0].resources.interface", "no KV cache and no direct")
    accepted(_iface("0"))


def test_36_the_backend_protocol_is_inherited_by_groups():
    rdma_backend = [o for o in cluster() if o["kind"] != "KVCacheBackend"]
    rdma_backend.append(backend("mooncake-dram", None, None, protocol="RDMA"))
    accepted(_iface(kvCache=kv_cache()), objects_=rdma_backend)


def test_36_mixed_groups_and_mixed_fabrics():
    refused(
        _iface(kvCache=kv_cache()),
        "spec.roles[0].resources.interface",
        "rdma, tcp",
        objects_=cluster(kv_groups=("RDMA", "TCP")),
    )
    obj = pd(kvCache=kv_cache(), kvTransfer={"protocol": "RDMA"})
    obj["spec"]["roles"][0]["resources"] = _res(interface="1")
    refused(
        obj, "spec.roles[0].resources.interface", "mix RDMA and EFA", objects_=cluster(kv_groups=("EFA",))
    )
    accepted(obj, objects_=cluster(kv_groups=("RDMA",)))


def test_36_the_direct_leg():
    obj = pd(kvTransfer={"protocol": "RDMA"})
    obj["spec"]["roles"][1]["resources"] = _res(interface="2")
    accepted(obj)
    obj["spec"]["kvTransfer"] = {"protocol": "TCP"}
    refused(obj, "spec.roles[1].resources.interface", "direct prefill/decode leg is tcp")
    # Without a router nothing pairs the roles: no direct leg.
    unrouted = pd(router=None, kvTransfer={"protocol": "RDMA"})
    unrouted["spec"]["roles"][1]["resources"] = _res(interface="2")
    refused(unrouted, "spec.roles[1].resources.interface", "no managed RDMA or EFA leg")
    # A take-over role gets no managed leg.
    obj = pd(kvTransfer={"protocol": "RDMA"})
    obj["spec"]["roles"][1].update(resources=_res(interface="1"), command=["vllm", "serve", "m"])
    refused(obj, "spec.roles[1].resources.interface", "own command")


def test_36_an_unresolved_cache_must_resolve_first():
    for missing in ("KVCachePoolBinding", "KVCachePool", "KVCacheBackend"):
        objs = [o for o in cluster(kv_groups=("RDMA",)) if o["kind"] != missing]
        refused(
            _iface(kvCache=kv_cache()),
            "spec.roles[0].resources.interface",
            "must resolve",
            missing,
            objects_=objs,
        )


def test_36_runs_on_create_and_on_updates_changing_the_legs_only():
    stored = pd(kvTransfer={"protocol": "RDMA"})
    stored["spec"]["roles"][1]["resources"] = _res(interface="1")
    # A stored deployment whose legs would not pass today is not re-judged by an unrelated edit; an
    # edit of kvTransfer (or router) is.
    tcp_stored = copy.deepcopy(stored)
    tcp_stored["spec"]["kvTransfer"] = {"protocol": "TCP"}
    tcp_scaled = copy.deepcopy(tcp_stored)
    tcp_scaled["spec"]["roles"][1]["replicas"] = 3
    accepted(tcp_scaled, old=tcp_stored)
    refused(tcp_stored, "spec.roles[1].resources.interface", old=stored)


def test_36_only_when_nothing_else_was_refused():
    obj = _iface(version=None)
    assert paths(run(validate, obj)) == ["spec.engine.version"]


# --- #37 a new binding's transports -------------------------------------------------------------------


def test_37_a_new_binding_to_a_mixed_pool():
    accepted(md(role(), kvCache=kv_cache()))
    decision = run(validate, md(role(), kvCache=kv_cache()), objects_=cluster(kv_groups=("RDMA", None)))
    message = cause(decision, "spec.kvCache.poolRef.name")
    assert "rdma, tcp" in message and "shared-dram" in message and "one protocol" in message
    assert (
        run(
            validate,
            md(role(), kvCache=kv_cache(), engine="SGLang"),
            objects_=cluster(kv_groups=("RDMA", None)),
        ).code
        == 422
    )


def test_37_missing_objects_are_not_refused():
    accepted(md(role(), kvCache=kv_cache("absent")))
    objs = [o for o in cluster() if o["kind"] != "KVCacheBackend"]
    accepted(md(role(), kvCache=kv_cache()), objects_=objs)


def test_37_an_unchanged_binding_stays_editable_and_deletion_declines():
    mixed = cluster(kv_groups=("RDMA", None))
    stored = md(role(), kvCache=kv_cache())
    scaled = md(role(replicas=3), kvCache=kv_cache())
    accepted(scaled, old=stored, objects_=mixed)
    accepted(deleting(stored), old=deleting(stored), objects_=mixed)


def test_37_only_when_nothing_else_was_refused():
    obj = md(role(env=[{"name": "GPUSTACK_REPLICA_SIZE", "value": "1"}]), kvCache=kv_cache())
    assert paths(run(validate, obj, objects_=cluster(kv_groups=("RDMA", None)))) == ["spec.roles[0].env[0]"]


def test_37_not_after_36_refused():
    obj = md(role(resources=_res(interface="1")), kvCache=kv_cache())
    decision = run(validate, obj, objects_=cluster(kv_groups=("RDMA", "TCP")))
    assert paths(decision) == ["spec.roles[0].resources.interface"]
