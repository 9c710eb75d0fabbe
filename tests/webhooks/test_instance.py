"""Instance defaulting and validation, from the spec's accepted and rejected examples."""

from __future__ import annotations

import asyncio
import copy

import pytest

from tests.webhooks import objects
from tests.webhooks.reviews import review
from webhooks import instance, patch
from webhooks.lookups import FileLookups
from webhooks.review import request_from_review

A10G = objects.A10G["metadata"]["name"]
MIG = objects.H100_MIG["metadata"]["name"]
GENERIC = objects.GENERIC["metadata"]["name"]


def make(type_: str = A10G, *, stop: bool = False, namespace: str = "team-a", **resources):
    spec = {
        "type": type_,
        "image": "ubuntu:24.04",
        "volume": {"ephemeral": {"capacity": "1Gi"}},
        "resources": resources,
    }
    if stop:
        spec["stop"] = True
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": "demo", "namespace": namespace},
        "spec": spec,
    }


def lookups(*extra):
    return FileLookups(objects.cluster(*extra))


def run(handler, obj, *, old=None, operation="CREATE", cluster=None):
    req = request_from_review(
        review(
            obj,
            old=old,
            operation=operation,
            kind="Instance",
            group="worker.gpustack.ai",
            resource="instances",
        )
    )
    return asyncio.run(handler(req, cluster or lookups()))


def defaulted(obj, **kwargs):
    decision = run(instance.default, obj, **kwargs)
    assert decision.allowed, decision.message
    return patch.apply(obj, decision.patch)


def paths(decision):
    return [cause.path for cause in decision.causes]


# --- Defaulting ----------------------------------------------------------------------------------


def test_slice_sizing_example_from_the_spec():
    # unit 8 CPU/64Gi + acceleratorSlicedMemoryPercentage: 20 → accelerator 1, cores% 20,
    # CPU 20 % of 8 cores in whole cores (1, never 1600m), RAM 20 % of 64Gi.
    out = defaulted(make(acceleratorSlicedMemoryPercentage=20))
    res = out["spec"]["resources"]
    assert res["accelerator"] == "1"
    assert res["acceleratorSlicedCoresPercentage"] == 20
    assert res["cpu"] == "1"
    assert res["ram"] == str(64 * 2**30 * 20 // 100)
    assert res["localStorage"] == "15Gi"
    assert out["spec"]["imagePullPolicy"] == "IfNotPresent" and out["spec"]["volumeMount"] == "/workspace"


def test_whole_card_sizing_scales_with_count():
    res = defaulted(make(accelerator="2"))["spec"]["resources"]
    assert (res["cpu"], res["ram"]) == ("16", "128Gi")


def test_partition_sizing_scales_with_profile_vram():
    res = defaulted(make(MIG, accelerator="1", acceleratorPartitionedProfile="3g.40gb"))["spec"]["resources"]
    # 40192 MiB of an 80 GiB card is 49 %: 12 cores × 0.49 = 5.88, whole cores 5; 128Gi × 0.49
    assert res["cpu"] == "5"
    assert res["ram"] == str(128 * 2**30 * 49 // 100)


@pytest.mark.parametrize(
    ("unit_cpu", "percent", "cpu"),
    [("8", 20, "1"), ("8", 5, "1"), ("8", 50, "4"), ("8", 100, "8"), ("12", 49, "5"), ("1500m", 60, "1")],
)
def test_a_share_of_one_card_sizes_whole_cores_at_least_one(unit_cpu, percent, cpu):
    # A slice or a partition takes its percentage of the unit's cores rounded down, never less than
    # one core; the unit counts as whole cores (1500m is 2). The validator admits what is sized.
    sliced = copy.deepcopy(objects.A10G)
    sliced["spec"]["unitResources"]["cpu"] = unit_cpu
    cluster = FileLookups([*objects.cluster(), sliced])
    obj = make(acceleratorSlicedMemoryPercentage=percent)
    res = defaulted(obj, cluster=cluster)["spec"]["resources"]
    assert res["cpu"] == cpu
    assert run(instance.validate, defaulted(obj, cluster=cluster), cluster=cluster).allowed


def test_a_small_partition_still_gets_one_core_and_is_admitted():
    # 1g.10gb of an 80 GiB card is 12 %: 12 cores × 0.12 = 1.44 → 1 core; a 1-core unit → 1 core.
    small = copy.deepcopy(objects.H100_MIG)
    small["spec"]["unitResources"]["cpu"] = "1"
    cluster = FileLookups([*objects.cluster(), small])
    obj = make(MIG, accelerator="1", acceleratorPartitionedProfile="1g.10gb")
    sized = defaulted(obj, cluster=cluster)
    assert sized["spec"]["resources"]["cpu"] == "1"
    assert run(instance.validate, sized, cluster=cluster).allowed


def test_general_type_defaults_one_core_and_scales_ram():
    res = defaulted(make(GENERIC))["spec"]["resources"]
    assert (res["cpu"], res["ram"]) == ("1", "2Gi")
    res = defaulted(make(GENERIC, cpu="4"))["spec"]["resources"]
    assert res["ram"] == "8Gi"


def test_defaulting_is_idempotent():
    once = defaulted(make(acceleratorSlicedMemoryPercentage=20))
    assert run(instance.default, once).patch == []


def test_stopped_or_typeless_instances_are_not_sized():
    out = defaulted(make("gone", stop=True))
    assert out["spec"]["resources"] == {}


def test_share_request_on_unobserved_type_is_retryable():
    obj = make(objects.UNOBSERVED["metadata"]["name"], acceleratorSlicedMemoryPercentage=20)
    decision = run(instance.default, obj)
    assert not decision.allowed and decision.code == 500 and "retry" in decision.message


def test_unknown_type_is_refused_at_spec_type():
    decision = run(instance.default, make("no-such-type"))
    assert not decision.allowed and paths(decision) == ["spec.type"]


def test_update_does_not_resize_a_running_instance():
    stored = defaulted(make(accelerator="1"))
    changed = copy.deepcopy(objects.A10G)
    changed["spec"]["unitResources"]["cpu"] = "16"
    decision = run(
        instance.default,
        stored,
        old=stored,
        operation="UPDATE",
        cluster=FileLookups([changed, objects.node()]),
    )
    assert decision.patch == []


# --- Validation: CREATE ---------------------------------------------------------------------------


def validate(obj, **kwargs):
    return run(
        instance.validate, defaulted(obj, **{k: v for k, v in kwargs.items() if k == "cluster"}), **kwargs
    )


def test_seed_example_is_admitted():
    decision = validate(
        make(accelerator="1", acceleratorSlicedMemoryPercentage=20, acceleratorSlicedCoresPercentage=100)
    )
    assert decision.allowed, decision.message


def test_system_namespace_is_refused():
    decision = run(instance.validate, make(namespace="gpustack-system", accelerator="1"))
    assert "metadata.namespace" in paths(decision)


def test_missing_type_is_admitted_when_created_stopped():
    assert run(instance.validate, make("gone", stop=True)).allowed
    assert paths(run(instance.validate, make("gone"))) == ["spec.type"]


def test_partition_rules():
    assert validate(make(MIG, accelerator="1", acceleratorPartitionedProfile="3g.40gb")).allowed
    both = run(
        instance.validate,
        make(
            MIG,
            accelerator="1",
            acceleratorPartitionedProfile="3g.40gb",
            acceleratorSlicedMemoryPercentage=20,
        ),
    )
    assert paths(both) == ["spec.resources.acceleratorPartitionedProfile"]
    unoffered = run(instance.validate, make(MIG, accelerator="1", acceleratorPartitionedProfile="2g.20gb"))
    assert paths(unoffered) == ["spec.resources.acceleratorPartitionedProfile"]
    assert "1g.10gb, 3g.40gb, 7g.80gb" in unoffered.message
    not_partitioned = run(
        instance.validate, make(A10G, accelerator="1", acceleratorPartitionedProfile="3g.40gb")
    )
    assert "partitioning mode" in not_partitioned.message
    milli = run(instance.validate, make(MIG, accelerator="1m", acceleratorPartitionedProfile="3g.40gb"))
    assert "spec.resources.accelerator" in paths(milli)


def test_partition_on_a_manufacturer_that_cannot_partition():
    ascend = objects.instance_type(
        "gpustack--ascend-910b-linux-amd64",
        group="ascend-910b",
        manufacturer="ascend",
        profiles=[{"name": "x", "count": 1, "memoryMib": 1}],
    )
    decision = run(
        instance.validate,
        make(ascend["metadata"]["name"], accelerator="1", acceleratorPartitionedProfile="x"),
        cluster=lookups(ascend),
    )
    assert paths(decision) == ["spec.resources.acceleratorPartitionedProfile"]
    assert "cannot partition" in decision.message


def test_slice_rules():
    two = run(instance.validate, make(accelerator="2", acceleratorSlicedMemoryPercentage=50))
    assert paths(two) == ["spec.resources.accelerator"]
    unsliceable = run(instance.validate, make(MIG, accelerator="1", acceleratorSlicedMemoryPercentage=50))
    assert paths(unsliceable) == ["spec.resources.acceleratorSlicedMemoryPercentage"]
    assert "acceleratorPartitionedProfile" in unsliceable.message
    over = run(instance.validate, make(accelerator="1", acceleratorSlicedMemoryPercentage=150))
    assert "spec.resources.acceleratorSlicedMemoryPercentage" in paths(over)


def test_whole_cards_bounded_by_pool_capacity_not_by_node():
    assert validate(make(accelerator="6")).allowed  # above one node's 4, within the pool's 8
    decision = run(instance.validate, make(accelerator="32"))
    assert paths(decision) == ["spec.resources.accelerator"] and "8 accelerators" in decision.message
    assert "spec.resources.accelerator" in paths(run(instance.validate, make(accelerator="1.5")))
    assert "spec.resources.accelerator" in paths(run(instance.validate, make(accelerator="-1")))


def test_general_type_with_accelerator_is_refused():
    decision = run(instance.validate, make(GENERIC, accelerator="1", cpu="1"))
    assert "spec.resources.accelerator" in paths(decision)


def test_caps_and_general_cpu_bound():
    assert "spec.resources.cpu" in paths(run(instance.validate, make(accelerator="1", cpu="9")))
    assert "spec.resources.ram" in paths(run(instance.validate, make(accelerator="1", ram="65Gi")))
    assert "spec.resources.localStorage" in paths(
        run(instance.validate, make(accelerator="1", localStorage="200Gi"))
    )
    big = run(instance.validate, make(GENERIC, cpu="64"))
    assert paths(big) == ["spec.resources.cpu"] and "48 cores" in big.message
    assert "spec.resources.cpu" in paths(run(instance.validate, make(GENERIC, cpu="-1")))


def test_node_name_must_exist_at_create():
    obj = make(accelerator="1")
    obj["spec"]["nodeName"] = "gpu-node-01"
    assert validate(obj).allowed
    obj["spec"]["nodeName"] = "nope"
    assert "spec.nodeName" in paths(run(instance.validate, obj))


@pytest.mark.parametrize(
    ("volume", "path"),
    [
        ({}, "spec.volume"),
        ({"ephemeral": {"capacity": "1Gi"}, "persistent": {"name": "x"}}, "spec.volume"),
        ({"ephemeral": {"capacity": "0"}}, "spec.volume.ephemeral.capacity"),
        ({"persistent": {}}, "spec.volume.persistent.name"),
    ],
)
def test_volume_rules(volume, path):
    obj = make(accelerator="1")
    obj["spec"]["volume"] = volume
    assert path in paths(run(instance.validate, obj))


def test_additional_volume_rules():
    obj = make(accelerator="1")
    obj["spec"]["additionalVolumes"] = [
        {"mountPath": "/data", "configMap": {"name": "a"}},
        {"mountPath": "/data", "secret": {"name": "b"}},
    ]
    assert paths(run(instance.validate, obj)) == ["spec.additionalVolumes[1].mountPath"]
    obj["spec"]["additionalVolumes"] = [
        {"mountPath": "/d", "subPath": "a/../b", "configMap": {"name": "a"}},
        {"mountPath": "/e"},
    ]
    assert set(paths(run(instance.validate, obj))) == {
        "spec.additionalVolumes[0].subPath",
        "spec.additionalVolumes[1]",
    }


def test_a_model_volume_takes_no_sub_path():
    # model-delivery: an Instance model volume "is always read-only and takes no subPath".
    obj = make(accelerator="1")
    obj["spec"]["additionalVolumes"] = [
        {"mountPath": "/models/qwen", "subPath": "weights", "model": {"artifactRef": {"name": "qwen"}}},
        {"mountPath": "/data", "subPath": "weights", "configMap": {"name": "a"}},
    ]
    decision = run(instance.validate, obj)
    assert not decision.allowed
    [cause] = decision.causes
    assert cause.path == "spec.additionalVolumes[0].subPath"
    assert cause.reason == "FieldValueForbidden"
    assert "remove it" in decision.message and "persistentVolumeClaim.path" in decision.message
    obj["spec"]["additionalVolumes"][0].pop("subPath")
    assert run(instance.validate, obj).allowed
    # An update that brings one in is refused the same way, even while stopped.
    old = copy.deepcopy(obj)
    old["spec"]["stop"] = True
    old["status"] = {"phase": "Stopped"}
    new = copy.deepcopy(old)
    new["spec"]["additionalVolumes"][0]["subPath"] = "weights"
    assert paths(run(instance.validate, new, old=old, operation="UPDATE")) == [
        "spec.additionalVolumes[0].subPath"
    ]


def test_grants_need_settings():
    obj = make(accelerator="1")
    obj["spec"]["privileged"] = True
    assert paths(run(instance.validate, obj)) == ["spec.privileged"]
    assert run(
        instance.validate, obj, cluster=lookups(objects.setting("instance-privileged-allowed", "true"))
    ).allowed
    obj["spec"]["privileged"] = False
    obj["spec"]["additionalVolumes"] = [{"mountPath": "/h", "hostPath": {"path": "/srv"}}]
    assert paths(run(instance.validate, obj)) == ["spec.additionalVolumes[0].hostPath"]


# --- Validation: UPDATE --------------------------------------------------------------------------


def stored(*, stop=False, phase="Ready", **resources):
    obj = defaulted(make(accelerator="1", **resources))
    obj["spec"]["stop"] = stop
    obj["status"] = {"phase": phase}
    return obj


def update(old, new, cluster=None):
    return run(instance.validate, new, old=old, operation="UPDATE", cluster=cluster)


def test_running_instance_freezes_its_template():
    old = stored()
    new = copy.deepcopy(old)
    new["spec"]["image"] = "ubuntu:26.04"
    assert paths(update(old, new)) == ["spec.image"]
    old_stopped = stored(stop=True, phase="Stopped")
    new = copy.deepcopy(old_stopped)
    new["spec"]["image"] = "ubuntu:26.04"
    assert update(old_stopped, new).allowed


def test_volume_is_frozen_even_while_stopped():
    old = stored(stop=True, phase="Stopped")
    new = copy.deepcopy(old)
    new["spec"]["volume"] = {"ephemeral": {"capacity": "2Gi"}}
    assert paths(update(old, new)) == ["spec.volume"]


def test_start_and_stop_transitions():
    old = stored(stop=True, phase="Stopping")
    new = copy.deepcopy(old)
    new["spec"]["stop"] = False
    assert paths(update(old, new)) == ["spec.stop"]
    old["status"]["phase"] = "Stopped"
    assert update(old, new).allowed
    running = stored(phase="Starting")
    stopping = copy.deepcopy(running)
    stopping["spec"]["stop"] = True
    assert paths(update(running, stopping)) == ["spec.stop"]
    running["status"]["phase"] = "Ready"
    assert update(running, stopping).allowed


def test_start_rechecks_resources_edited_while_stopped():
    old = stored(stop=True, phase="Stopped")
    new = copy.deepcopy(old)
    new["spec"]["stop"] = False
    new["spec"]["resources"]["accelerator"] = "64"
    assert paths(update(old, new)) == ["spec.resources.accelerator"]


def test_start_rechecks_the_additional_volumes():
    # An entry left unbuildable while stopped (here: no source) is refused when the Instance
    # starts, even though the update itself does not touch the list; a valid list starts.
    old = stored(stop=True, phase="Stopped")
    old["spec"]["additionalVolumes"] = [{"mountPath": "/data"}]
    new = copy.deepcopy(old)
    new["spec"]["stop"] = False
    assert paths(update(old, new)) == ["spec.additionalVolumes[0]"]
    still_stopped = copy.deepcopy(old)
    still_stopped["spec"]["image"] = "other"
    assert update(old, still_stopped).allowed  # not starting, list unchanged: not re-judged
    old["spec"]["additionalVolumes"] = [{"mountPath": "/data", "persistent": {"name": "dataset"}}]
    new = copy.deepcopy(old)
    new["spec"]["stop"] = False
    assert update(old, new).allowed


def test_held_privilege_survives_the_setting_going_off():
    old = stored(stop=True, phase="Stopped")
    old["spec"]["privileged"] = True
    new = copy.deepcopy(old)
    new["spec"]["image"] = "other"
    assert update(old, new).allowed


# --- Hardening (issue 11 item 5) -------------------------------------------------------------------


def test_ram_cap_applies_to_cpu_only_types():
    # GENERIC: unit 1 CPU / 2Gi, so 3 cores may have at most 6Gi.
    assert validate(make(GENERIC, cpu="3", ram="6Gi")).allowed
    refused = run(instance.validate, make(GENERIC, cpu="3", ram="7Gi"))
    assert paths(refused) == ["spec.resources.ram"] and "6Gi" in refused.message
    # Under one core still counts as one unit.
    assert paths(run(instance.validate, make(GENERIC, cpu="500m", ram="3Gi"))) == ["spec.resources.ram"]


def _mig_with(memory: str | None, profile_mib: int) -> dict:
    unsizeable = copy.deepcopy(objects.H100_MIG)
    detail = unsizeable["status"]["detail"]
    if memory is None:
        detail.pop("memory", None)
    for profile in detail["slicedDetail"]["physical"]["profiles"]:
        if profile["name"] == "3g.40gb":
            profile["memoryMib"] = profile_mib
    return unsizeable


@pytest.mark.parametrize(("memory", "profile_mib"), [("80Gi", 0), (None, 40192)])
def test_an_offered_but_unsizeable_partition_is_retried_never_admitted_unsized(memory, profile_mib):
    cluster = FileLookups([*objects.cluster(), _mig_with(memory, profile_mib)])  # the later one wins
    obj = make(MIG, accelerator="1", acceleratorPartitionedProfile="3g.40gb")
    sized = patch.apply(obj, run(instance.default, obj, cluster=cluster).patch)
    decision = run(instance.validate, sized, cluster=cluster)
    assert not decision.allowed and decision.code == 500, decision.message
    assert "3g.40gb" in decision.message


def _with_host_path(**entry):
    obj = make(accelerator="1")
    obj["spec"]["additionalVolumes"] = [{"mountPath": "/h", "hostPath": {"path": "/srv"}, **entry}]
    return obj


def test_a_held_host_path_is_compared_by_its_whole_entry():
    granted = lookups(objects.setting("instance-host-path-volume-allowed", "true"))
    old = defaulted(_with_host_path(readOnly=True), cluster=granted)
    old["spec"]["stop"], old["status"] = True, {"phase": "Stopped"}
    same = copy.deepcopy(old)
    same["spec"]["additionalVolumes"][0]["hostPath"]["type"] = ""  # "" and absent are the same
    assert update(old, same).allowed
    for change in (
        {"subPath": "inner"},  # narrower: a sub path of what it holds, still read-only
        {"mountPath": "/elsewhere"},  # the same node path, seen elsewhere in the container
    ):
        kept = copy.deepcopy(old)
        kept["spec"]["additionalVolumes"][0].update(change)
        assert update(old, kept).allowed, change
    for change in (
        {"readOnly": False},  # widening a read-only mount
        {"hostPath": {"path": "/etc"}},  # repointing at another node path
        {"hostPath": {"path": "/srv", "type": "Directory"}},  # another volume source
    ):
        widened = copy.deepcopy(old)
        widened["spec"]["additionalVolumes"][0].update(change)
        assert "spec.additionalVolumes[0].hostPath" in paths(update(old, widened)), change


@pytest.mark.parametrize(
    ("held", "wanted", "allowed"),
    [
        # Narrowing costs the Instance nothing it had.
        ({}, {"subPath": "sub", "readOnly": True}, True),
        ({}, {"readOnly": True}, True),
        ({"subPath": "safe"}, {"subPath": "safe/deeper"}, True),
        ({"subPath": "safe", "readOnly": True}, {"subPath": "safe/deeper", "readOnly": True}, True),
        # Reaching further is a new grant: a sibling, the whole volume, or writable.
        ({"subPath": "safe"}, {"subPath": "safer"}, False),
        ({"subPath": "safe", "readOnly": True}, {}, False),
        ({"subPath": "safe"}, {}, False),
        ({"readOnly": True}, {"subPath": "sub"}, False),
    ],
)
def test_a_held_host_path_may_narrow_but_not_widen(held, wanted, allowed):
    granted = lookups(objects.setting("instance-host-path-volume-allowed", "true"))
    old = defaulted(_with_host_path(**held), cluster=granted)
    old["spec"]["stop"], old["status"] = True, {"phase": "Stopped"}
    new = copy.deepcopy(old)
    entry = {"mountPath": "/h", "hostPath": {"path": "/srv"}, **wanted}
    new["spec"]["additionalVolumes"] = [entry]
    decision = update(old, new)
    assert decision.allowed is allowed, decision.message
    if not allowed:
        assert paths(decision) == ["spec.additionalVolumes[0].hostPath"]


@pytest.mark.parametrize(
    ("entry", "path"),
    [
        ({"configMap": {"name": "Not_A_Name"}}, "spec.additionalVolumes[0].configMap.name"),
        ({"secret": {"name": ""}}, "spec.additionalVolumes[0].secret.name"),
        ({"persistent": {"name": "a" * 254}}, "spec.additionalVolumes[0].persistent.name"),
        ({"hostPath": {"path": "relative/dir"}}, "spec.additionalVolumes[0].hostPath.path"),
        ({"hostPath": {"path": "/srv/../etc"}}, "spec.additionalVolumes[0].hostPath.path"),
    ],
)
def test_volume_sources_are_validated_as_the_reference_does(entry, path):
    obj = make(accelerator="1")
    obj["spec"]["additionalVolumes"] = [{"mountPath": "/v", **entry}]
    granted = lookups(objects.setting("instance-host-path-volume-allowed", "true"))
    assert path in paths(run(instance.validate, obj, cluster=granted))
