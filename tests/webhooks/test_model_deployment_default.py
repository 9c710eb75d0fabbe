"""ModelDeployment defaulting (§6): a role's accelerator count from its InstanceType, the connector,
nothing for a deployment being deleted; a minimal, idempotent JSON patch."""

from __future__ import annotations

import asyncio

import pytest

from tests.webhooks.model_deployments import (
    A10G,
    GENERIC,
    T4,
    cluster,
    deleting,
    kv_cache,
    md,
    paths,
    request,
    role,
    run,
)
from webhooks import modeldeployment
from webhooks import patch as jsonpatch
from webhooks.lookups import FileLookups, LookupFailed

default = modeldeployment.default


def test_accelerator_defaults_to_one_on_an_acceleratable_type():
    obj = md(
        role("a", resources=None),
        role("b", resources={"interface": "1"}),
        role("c", instanceType=T4, resources={}),
    )
    decision = run(default, obj)
    assert decision.allowed
    assert decision.patch == [
        {"op": "add", "path": "/spec/roles/0/resources", "value": {"accelerator": "1"}},
        {"op": "add", "path": "/spec/roles/1/resources/accelerator", "value": "1"},
        {"op": "add", "path": "/spec/roles/2/resources/accelerator", "value": "1"},
    ]
    out = jsonpatch.apply(obj, decision.patch)
    assert out["spec"]["roles"][1]["resources"] == {"interface": "1", "accelerator": "1"}
    # Idempotent: the defaulted object needs nothing more.
    assert run(default, out).patch == []


def test_explicit_values_are_kept_and_general_types_left_unset():
    obj = md(
        role("zero", resources={"accelerator": "0"}),
        role("two", resources={"accelerator": 2}),
        role("cpu", instanceType=GENERIC, resources=None),
    )
    decision = run(default, obj)
    assert decision.allowed and decision.patch == []


def test_a_null_accelerator_is_unset():
    obj = md(role(resources={"accelerator": None}))
    assert run(default, obj).patch == [
        {"op": "replace", "path": "/spec/roles/0/resources/accelerator", "value": "1"}
    ]


def test_missing_instance_type_is_a_not_found_naming_it():
    obj = md(role("a", resources=None), role("b", instanceType="nope", resources=None))
    decision = run(default, obj)
    assert not decision.allowed and decision.code == 422
    assert paths(decision) == ["spec.roles[1].instanceType"]
    assert '"nope"' in decision.causes[0].message and decision.causes[0].reason == "FieldValueNotFound"
    # A role that states its count reads no type at all.
    assert run(default, md(role(instanceType="nope"))).allowed
    # An empty name is skipped (the schema refuses it).
    assert run(default, md(role(instanceType="", resources=None))).allowed


def test_other_read_errors_propagate_for_the_server_to_answer_as_internal_errors():
    class Failing(FileLookups):
        async def get(self, kind, name, namespace="", *, fresh=False):
            raise LookupFailed("the apiserver did not answer")

    with pytest.raises(LookupFailed):
        asyncio.run(default(request(md(role(resources=None))), Failing()))


def test_instance_types_are_read_uncached_once_per_name():
    reads = []

    class Recording(FileLookups):
        async def get(self, kind, name, namespace="", *, fresh=False):
            reads.append((kind, name, fresh))
            return await super().get(kind, name, namespace, fresh=fresh)

    obj = md(*(role(f"r{i}", resources=None) for i in range(4)))
    decision = asyncio.run(default(request(obj), Recording(cluster())))
    assert len(decision.patch) == 4
    assert reads == [("InstanceType", A10G, True)]


def test_connector_defaults_to_mooncake():
    obj = md(role(), kvCache={"poolRef": {"name": "qwen-cache"}})
    decision = run(default, obj)
    assert decision.patch == [{"op": "add", "path": "/spec/kvCache/connector", "value": "Mooncake"}]
    assert run(default, md(role(), kvCache=kv_cache())).patch == []
    assert run(default, md(role())).patch == []


def test_defaults_apply_on_update_too():
    old = md(role())
    new = md(role(resources=None))
    assert run(default, new, old=old).patch == [
        {"op": "add", "path": "/spec/roles/0/resources", "value": {"accelerator": "1"}}
    ]


def test_a_deployment_being_deleted_is_returned_unchanged():
    obj = deleting(md(role(instanceType="gone", resources=None), kvCache={"poolRef": {"name": "x"}}))
    decision = run(default, obj, old=obj)
    assert decision.allowed and decision.patch == []


def test_malformed_shapes_never_raise():
    for spec in ({"roles": "x"}, {"roles": [1, None, {"instanceType": 3}]}, {"kvCache": []}, None):
        obj = md(role())
        obj["spec"] = spec
        assert run(default, obj).allowed
