"""InstanceType defaulting and validation."""

from __future__ import annotations

import asyncio
import copy

import pytest

from tests.webhooks import objects
from tests.webhooks.reviews import review
from webhooks import instance_type, patch
from webhooks.lookups import FileLookups
from webhooks.review import request_from_review


def make(**spec):
    base = {
        "acceleratable": True,
        "acceleratorGroup": "nvidia-a10g",
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "12", "ram": "128Gi"},
        "localStorage": "100Gi",
    }
    base.update(spec)
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceType",
        "metadata": {"name": "a10g-12c128g"},
        "spec": {k: v for k, v in base.items() if v is not None},
    }


def run(handler, obj, *, old=None, operation="CREATE", cluster=()):
    req = request_from_review(
        review(
            obj,
            old=old,
            operation=operation,
            kind="InstanceType",
            group="worker.gpustack.ai",
            resource="instancetypes",
        )
    )
    return asyncio.run(handler(req, FileLookups(list(cluster))))


def paths(decision):
    return [cause.path for cause in decision.causes]


def test_defaults_generic_group_schedule_labels_and_entrance():
    obj = make()
    decision = run(instance_type.default, obj)
    out = patch.apply(obj, decision.patch)
    assert out["spec"]["generalGroup"] == "generic"
    labels = out["metadata"]["labels"]
    assert labels["feature.gpustack.ai/acceleratable"] == "true"
    assert labels["acceleratable.feature.gpustack.ai/nvidia-a10g"] == "true"
    assert labels["kubernetes.io/os"] == "linux" and labels["kubernetes.io/arch"] == "amd64"
    assert labels["schedule.gpustack.ai/queue-entrance"].startswith("gpustack-fnv64-")
    assert len(labels["schedule.gpustack.ai/queue-entrance"]) == 31
    assert not any(k.startswith("general.feature.gpustack.ai/") for k in labels)
    # Reinvocation changes nothing.
    assert run(instance_type.default, out).patch == []


def test_entrance_of_a_derived_name_matches_the_spec_check_value():
    obj = make()
    obj["metadata"]["name"] = "gpustack--nvidia-a10g-linux-amd64"
    out = patch.apply(obj, run(instance_type.default, obj).patch)
    assert (
        out["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"] == "gpustack-fnv64-c4680bb149644f1c"
    )


def test_cpu_awareness_adds_the_general_label():
    obj = make(generalGroup="amd-epyc-7763")
    aware = objects.setting("instance-type-aware-cpu-manufacturer", "true")
    out = patch.apply(obj, run(instance_type.default, obj, cluster=[aware]).patch)
    assert out["metadata"]["labels"]["general.feature.gpustack.ai/amd-epyc-7763"] == "true"


def test_complete_input_is_admitted():
    assert run(instance_type.validate, make()).allowed
    assert run(
        instance_type.validate,
        make(acceleratable=False, acceleratorGroup=None, unitResources={"cpu": "1", "ram": "2Gi"}),
    ).allowed


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"acceleratorGroup": None}, "spec.acceleratorGroup"),
        ({"acceleratable": False, "unitResources": {"cpu": "1", "ram": "2Gi"}}, "spec.acceleratorGroup"),
        ({"os": None}, "spec.os"),
        ({"arch": None}, "spec.arch"),
        ({"unitResources": {"ram": "64Gi"}}, "spec.unitResources.cpu"),
        ({"unitResources": {"cpu": "8"}}, "spec.unitResources.ram"),
        ({"unitResources": {"cpu": "8500m", "ram": "64Gi"}}, "spec.unitResources.cpu"),
        ({"unitResources": {"cpu": "0", "ram": "64Gi"}}, "spec.unitResources.cpu"),
        (
            {"acceleratable": False, "acceleratorGroup": None, "unitResources": {"cpu": "2", "ram": "2Gi"}},
            "spec.unitResources.cpu",
        ),
        ({"unitResources": {"cpu": "8", "ram": "lots"}}, "spec.unitResources.ram"),
        # RAM is sized in binary units: a decimal suffix or a bare byte count is refused.
        ({"unitResources": {"cpu": "8", "ram": "64G"}}, "spec.unitResources.ram"),
        ({"unitResources": {"cpu": "8", "ram": "68719476736"}}, "spec.unitResources.ram"),
        ({"unitResources": {"cpu": "8", "ram": "64gi"}}, "spec.unitResources.ram"),
        ({"unitResources": {"cpu": "8", "ram": "0Gi"}}, "spec.unitResources.ram"),
        ({"unitResources": {"cpu": "8", "ram": "64e3"}}, "spec.unitResources.ram"),
        ({"localStorage": None}, "spec.localStorage"),
        ({"localStorage": "100gi"}, "spec.localStorage"),
        ({"localStorage": "100G"}, "spec.localStorage"),
    ],
)
def test_incomplete_or_malformed_input_is_refused_at_its_field(spec, path):
    decision = run(instance_type.validate, make(**spec))
    assert not decision.allowed
    assert paths(decision) == [path]


def test_update_freezes_all_but_display_name_description_and_inactive():
    old = make(generalGroup="generic")
    new = copy.deepcopy(old)
    new["spec"]["displayName"] = "A10G"
    new["spec"]["inactive"] = True
    new["spec"]["description"] = "changed: documentation, as the reference allows"
    assert run(instance_type.validate, new, old=old, operation="UPDATE").allowed
    new["spec"]["unitResources"] = {"cpu": "16", "ram": "128Gi"}
    new["spec"]["os"] = "windows"
    decision = run(instance_type.validate, new, old=old, operation="UPDATE")
    assert sorted(paths(decision)) == ["spec.os", "spec.unitResources"]


def test_update_does_not_reapply_create_rules_to_legacy_objects():
    legacy = make(localStorage="100G")  # would be refused on create
    renamed = copy.deepcopy(legacy)
    renamed["spec"]["displayName"] = "legacy"
    assert run(instance_type.validate, renamed, old=legacy, operation="UPDATE").allowed


def test_finalizer_removal_on_a_deleting_type_passes():
    old = make()
    old["metadata"]["finalizers"] = ["gpustack.ai/controlled"]
    old["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    assert run(instance_type.validate, new, old=old, operation="UPDATE").allowed


@pytest.mark.parametrize("ram", ["64Gi", "512Mi", "1Ti", "1.5Gi", "+64Gi"])
def test_unit_ram_with_a_binary_suffix_is_admitted(ram):
    assert run(instance_type.validate, make(unitResources={"cpu": "8", "ram": ram})).allowed


def test_a_unit_ram_refusal_says_what_to_write():
    decision = run(instance_type.validate, make(unitResources={"cpu": "8", "ram": "64G"}))
    assert paths(decision) == ["spec.unitResources.ram"]
    assert "binary suffix" in decision.message and "64Gi" in decision.message


def test_null_labels_and_spec_read_as_absent():
    # The apiserver decodes a null map as an absent one; the defaulter stamps onto it the same way.
    obj = make()
    obj["metadata"]["labels"] = None
    out = patch.apply(obj, run(instance_type.default, obj).patch)
    assert out["metadata"]["labels"]["feature.gpustack.ai/acceleratable"] == "true"
    bare = make()
    bare["spec"] = None
    out = patch.apply(bare, run(instance_type.default, bare).patch)
    assert out["spec"] == {"generalGroup": "generic"}
