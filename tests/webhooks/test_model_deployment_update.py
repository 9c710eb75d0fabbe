"""ModelDeployment updates: the identity rule (§2.3, §5 #38–#40) as a whole object, as what
``kubectl patch --type=merge`` sends and as a JSON patch result; and updates during deletion (§9.6)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from tests.webhooks.model_deployments import (
    A10G,
    BIG,
    H100,
    cause,
    cluster,
    deleting,
    kv_cache,
    md,
    merge_patch,
    paths,
    role,
    run,
)
from webhooks import chain, modeldeployment
from webhooks import patch as jsonpatch
from webhooks.lookups import FileLookups

validate = modeldeployment.validate
IDENTITY = "a different value is a different deployment"


def stored():
    """A stored (defaulted) deployment: two roles, a cache, a take-over command on one role."""
    obj = md(
        role("server", kind="Server", replicas=2, size=1, resources={"accelerator": "1"}),
        role(
            "batch",
            kind="Server",
            replicas=1,
            size=1,
            resources={"accelerator": "1"},
            command=["vllm", "serve", "m", "--max-model-len", "8192"],
        ),
        kvCache=kv_cache(),
    )
    obj["metadata"]["finalizers"] = ["worker.gpustack.ai/model-deployment-protection"]
    return obj


def test_38_editable_fields_pass():
    new = stored()
    spec = new["spec"]
    spec["roles"][0].update(
        replicas=4,
        image="vllm/vllm-openai:v0.29.0",
        extraArgs=["--max-model-len", "4096"],
        env=[{"name": "HF_TOKEN", "value": "x"}],
        ports=[{"port": 8000}],
        topology={"requiredLevel": "topology.kubernetes.io/zone"},
        terminationGracePeriodSeconds=60,
    )
    spec["engine"]["version"] = "0.30.0"
    spec["kvTransfer"] = {"protocol": "TCP"}
    new["metadata"]["labels"] = {"team": "a"}
    assert run(validate, new, old=stored()).allowed


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("instanceType", BIG, "spec.roles[0].instanceType"),
        ("kind", "Prefill", "spec.roles[0].kind"),
        ("resources", {"accelerator": "2"}, "spec.roles[0].resources"),
        ("resources", {"accelerator": "1", "interface": "1"}, "spec.roles[0].resources"),
        ("command", ["vllm", "serve", "m"], "spec.roles[0].command"),
    ],
)
def test_38_role_identity_edits(field, value, path):
    new = stored()
    new["spec"]["roles"][0][field] = value
    message = cause(run(validate, new, old=stored()), path)
    assert IDENTITY in message and "created" in message


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda s: s["model"].__setitem__("name", "other/model"), "spec.model"),
        (lambda s: s["model"].__setitem__("artifactRef", {"name": "a"}), "spec.model"),
        (lambda s: s["engine"].__setitem__("name", "SGLang"), "spec.engine.name"),
        (lambda s: s.__setitem__("kvCache", kv_cache("other")), "spec.kvCache"),
        (lambda s: s.pop("kvCache"), "spec.kvCache"),
    ],
)
def test_38_deployment_identity_edits(mutate, path):
    new = stored()
    mutate(new["spec"])
    assert IDENTITY in cause(run(validate, new, old=stored()), path)


def test_38_role_set_is_frozen_and_matched_by_name():
    new = stored()
    new["spec"]["roles"].reverse()  # reordered, unchanged: matched by name, not index
    assert run(validate, new, old=stored()).allowed
    new = stored()
    new["spec"]["roles"].append(role("extra"))
    assert "'extra'" in cause(run(validate, new, old=stored()), "spec.roles[2].name")
    new = stored()
    del new["spec"]["roles"][1]
    assert "'batch'" in cause(run(validate, new, old=stored()), "spec.roles")
    new = stored()
    new["spec"]["roles"][1]["name"] = "renamed"
    assert set(paths(run(validate, new, old=stored()))) == {"spec.roles[1].name", "spec.roles"}


def test_38_values_compare_as_stored_and_defaulted():
    new = stored()
    new["spec"]["roles"][0]["resources"] = {"accelerator": 1, "acceleratorSlicedMemoryPercentage": 0}
    new["spec"]["roles"][0].pop("kind")  # absent kind is Server
    new["spec"]["kvCache"].pop("connector")  # absent connector is Mooncake
    assert run(validate, new, old=stored()).allowed
    # An explicit zero is a value, not an absence.
    new["spec"]["roles"][0]["resources"] = {"accelerator": "0"}
    assert "spec.roles[0].resources" in paths(run(validate, new, old=stored()))


def test_39_size_has_its_own_message():
    new = stored()
    new["spec"]["roles"][0]["size"] = 2
    message = cause(run(validate, new, old=stored()), "spec.roles[0].size")
    assert "fixed at creation" in message and "replicas" in message


def test_40_router_name_in_place():
    routed = stored()
    routed["spec"]["router"] = {"name": "llm-d-router"}
    # Adding and removing the block is allowed.
    assert run(validate, routed, old=stored()).allowed
    assert run(validate, stored(), old=routed).allowed
    swapped = copy.deepcopy(routed)
    swapped["spec"]["router"]["name"] = "vllm-router"
    message = cause(run(validate, swapped, old=routed), "spec.router.name")
    assert "immutable" in message and "remove spec.router" in message


# --- What each client actually sends ---------------------------------------------------------------------


def _merge_restating_roles():
    """``kubectl patch --type=merge -p '{"spec":{"roles":[...]}}'`` restating the roles to scale one:
    the list is replaced wholesale, so the restated role without command sets it to null."""
    return {
        "spec": {
            "roles": [
                {"name": "server", "instanceType": A10G, "replicas": 5, "resources": {"accelerator": "1"}},
                {"name": "batch", "instanceType": A10G, "replicas": 3, "resources": {"accelerator": "1"}},
            ]
        }
    }


def test_merge_patch_restating_a_role_without_its_command_is_refused_naming_command():
    new = merge_patch(stored(), _merge_restating_roles())
    decision = run(validate, new, old=stored())
    assert paths(decision) == ["spec.roles[1].command"]
    assert "merge patch" in decision.causes[0].message
    # The chain (schema defaults, then both webhooks) refuses the same edit the same way.
    outcome = asyncio.run(chain.run(new, FileLookups(cluster()), operation="UPDATE", old=stored()))
    assert not outcome.allowed and [c.path for c in outcome.causes] == ["spec.roles[1].command"]


def test_merge_patch_nulling_a_frozen_field_is_an_edit_to_it():
    new = merge_patch(stored(), {"spec": {"kvCache": None}})
    assert paths(run(validate, new, old=stored())) == ["spec.kvCache"]
    new = merge_patch(stored(), {"spec": {"model": {"artifactRef": {"name": "qwen-7b"}}}})
    assert paths(run(validate, new, old=stored())) == ["spec.model"]
    new = merge_patch(stored(), {"spec": {"engine": {"version": "0.30.0"}}})
    assert run(validate, new, old=stored()).allowed


def test_json_patch_changes_one_field():
    scaled = jsonpatch.apply(stored(), [{"op": "replace", "path": "/spec/roles/1/replicas", "value": 4}])
    assert run(validate, scaled, old=stored()).allowed
    outcome = asyncio.run(chain.run(scaled, FileLookups(cluster()), operation="UPDATE", old=stored()))
    assert outcome.allowed, outcome.message
    moved = jsonpatch.apply(
        stored(), [{"op": "replace", "path": "/spec/roles/0/instanceType", "value": H100}]
    )
    assert paths(run(validate, moved, old=stored())) == ["spec.roles[0].instanceType"]
    dropped = jsonpatch.apply(stored(), [{"op": "remove", "path": "/spec/roles/1/command"}])
    assert paths(run(validate, dropped, old=stored())) == ["spec.roles[1].command"]


# --- Deletion ---------------------------------------------------------------------------------------------


def _without_types(*names):
    return [o for o in cluster() if not (o["kind"] == "InstanceType" and o["metadata"]["name"] in names)]


def test_finalizer_clearing_update_passes_when_the_instance_type_is_gone():
    old = deleting(stored())
    new = deleting(stored())
    new["metadata"]["finalizers"] = []
    gone = _without_types(A10G)
    assert run(modeldeployment.validate, new, old=old, objects_=gone).allowed
    decision = run(modeldeployment.default, new, old=old, objects_=gone)
    assert decision.allowed and decision.patch == []
    outcome = asyncio.run(chain.run(new, FileLookups(gone), operation="UPDATE", old=old))
    assert outcome.allowed, outcome.message
    # Not deleting, the same missing type is a NotFound (joined with the rest).
    live = copy.deepcopy(stored())
    decision = run(modeldeployment.validate, live, old=stored(), objects_=gone)
    assert paths(decision) == ["spec.roles[0].instanceType", "spec.roles[1].instanceType"]
    assert decision.causes[0].reason == "FieldValueNotFound"


def test_deleting_declines_lookup_rules_but_keeps_object_rules():
    old = deleting(stored())
    # A mode the type does not offer, on a deleted type: admitted during deletion (the named price).
    new = deleting(stored())
    assert run(validate, new, old=old, objects_=_without_types(A10G)).allowed
    # An owned env entry is an object rule: still refused.
    new["spec"]["roles"][0]["env"] = [{"name": "GPUSTACK_MEMBER_INDEX", "value": "0"}]
    assert paths(run(validate, new, old=old)) == ["spec.roles[0].env[0]"]
    # So is an identity edit.
    moved = deleting(stored())
    moved["spec"]["roles"][0]["instanceType"] = H100
    assert paths(run(validate, moved, old=old)) == ["spec.roles[0].instanceType"]
