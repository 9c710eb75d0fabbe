"""controllers.pools.render: flavors, topologies, derived InstanceTypes and LocalQueues from labelled
nodes (devices spec §5, §8; topology spec B.4)."""

from __future__ import annotations

import json

from api import constants
from api.naming import local_queue_name, topology_profile
from controllers.pools import render
from tests.unit.pools_fixtures import A10G, H100, HOSTNAME, T4, M, node

A10G_POOL = "gpustack--nvidia-a10g-linux-amd64"


def cluster() -> list[dict]:
    return [node("h100-b", H100, 8), node("h100-a", H100, 8), node("a10g-a", A10G, 4)]


def test_check_value_of_the_entrance_hash() -> None:
    # §8: FNV-1a-64 of the A10G pool's name is c4680bb149644f1c; entrances are always 31 characters.
    assert local_queue_name(A10G_POOL) == "gpustack-fnv64-c4680bb149644f1c"
    assert len(local_queue_name(A10G_POOL)) == 31


def test_flavor_groups_by_hardware_os_arch_count_and_profile() -> None:
    groups = render.flavor_groups(cluster())
    assert sorted(groups) == [
        "gpustack--generic--nvidia-a10g-linux-amd64-4d",
        "gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d",
        "gpustack--generic-linux-amd64-64c",
    ]
    h100 = groups["gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d"]
    assert h100.nodes == ["h100-a", "h100-b"] and h100.capacity == 16
    assert h100.first.name == "h100-a"  # identity from the first contributor by name
    assert groups["gpustack--generic-linux-amd64-64c"].nodes == ["a10g-a", "h100-a", "h100-b"]


def test_accelerated_flavor_shape() -> None:
    group = render.flavor_groups(cluster())["gpustack--generic--nvidia-a10g-linux-amd64-4d"]
    flavor = render.render_flavor(group)
    assert flavor["apiVersion"] == "kueue.x-k8s.io/v1beta2" and flavor["kind"] == "ResourceFlavor"
    key = "acceleratable.feature.gpustack.ai/nvidia-a10g"
    assert flavor["metadata"]["labels"] == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.gpustack.ai/acceleratable": "true",
        "general.feature.gpustack.ai/generic": "true",
        key: "true",
        f"{key}.count": "4",
        f"{key}.capacity": "4",
        "resource.gpustack.ai/type": "nodes",
        "topology.gpustack.ai/profile": HOSTNAME,
    }
    assert flavor["spec"] == {
        "nodeLabels": {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "gpustack.ai/managed": "true",
            "general.feature.gpustack.ai/generic": "true",
            key: "true",
            f"{key}.count": "4",
            "topology.gpustack.ai/profile": HOSTNAME,
        },
        "tolerations": [{"operator": "Exists"}],
        "topologyName": f"gpustack-{HOSTNAME}",
    }
    notes = flavor["metadata"]["annotations"]
    assert notes["note.gpustack.ai/manufacturer"] == "nvidia"
    assert notes["note.gpustack.ai/product"] == "nvidia-a10g"
    assert notes["note.gpustack.ai/memory"] == "24Gi"
    assert notes["note.gpustack.ai/family"] == "ampere"
    assert all(k.startswith("note.gpustack.ai/") for k in notes)
    assert constants.ANNOTATION_CPU_DETAIL not in notes  # only when aware


def test_cpu_flavor_carries_the_cpu_detail_and_cores() -> None:
    annotations = {
        "feature.gpustack.ai/cpu-name": "AMD EPYC 7763",
        "feature.gpustack.ai/cpu-stepping": "@unknown",
    }
    nodes = [node("cpu-1", cores=32, annotations=annotations)]
    flavor = render.render_flavor(render.flavor_groups(nodes)["gpustack--generic-linux-amd64-32c"])
    assert flavor["metadata"]["labels"]["feature.gpustack.ai/acceleratable"] == "false"
    assert flavor["metadata"]["labels"]["general.feature.gpustack.ai/generic.capacity"] == "32"
    assert flavor["spec"]["nodeLabels"]["general.feature.gpustack.ai/generic.count"] == "32"
    assert json.loads(flavor["metadata"]["annotations"][constants.ANNOTATION_CPU_DETAIL]) == {
        "name": "AMD EPYC 7763"
    }
    assert constants.LABEL_CPU_ONLY not in flavor["spec"]["nodeLabels"]


def test_mixed_on_node_off_keeps_accelerated_nodes_out_of_cpu_flavors() -> None:
    nodes = [
        *cluster(),
        node("cpu-1", cores=32, labels={constants.LABEL_CPU_ONLY: "true"}),
        node("cpu-2", cores=16),
    ]
    groups = render.flavor_groups(nodes, mixed_on_node=False)
    assert sorted(n for n in groups if n.endswith("c")) == ["gpustack--generic-linux-amd64-32c"]
    flavor = render.render_flavor(groups["gpustack--generic-linux-amd64-32c"], mixed_on_node=False)
    assert flavor["spec"]["nodeLabels"][constants.LABEL_CPU_ONLY] == "true"


def test_nodes_that_serve_no_pool() -> None:
    unmanaged = node("u", A10G, 4, drop=(constants.LABEL_MANAGED,))
    unprofiled = node("p", A10G, 4, drop=(constants.LABEL_TOPOLOGY_PROFILE,))
    assert render.flavor_groups([unmanaged, unprofiled]) == {}


def test_a_manufacturer_label_is_not_an_accelerator_group() -> None:
    facts = render.node_facts(node("a", A10G, 4))
    assert facts.accelerators == (("nvidia-a10g", 4),)  # not acceleratable.../nvidia (no .count)
    assert facts.general_group == "generic" and facts.cores == 64


def test_pool_of_five_t4_cards_across_two_nodes() -> None:
    # §5: 1 + 4 T4 cards → two flavors (per-node count 1 and 4); nominal 8,000,000 in all.
    groups = render.flavor_groups([node("t4-one", T4, 1), node("t4-four", T4, 4)])
    flavors = [render.render_flavor(g) for g in groups.values() if g.key.acceleratable]
    assert sorted(render.flavor_count(f) for f in flavors) == [1, 4]
    pool = render.pool_of_flavor(flavors[0], aware_cpu=False)
    assert sum(render.nominal_quota(pool, render.flavor_capacity(f)) for f in flavors) == 8_000_000 == 5 * M


def test_a_profile_other_than_hostname_is_part_of_the_flavor_name_and_topology() -> None:
    levels = ["topology.kubernetes.io/zone", "topology.gpustack.ai/rack", constants.LABEL_HOSTNAME]
    profile = topology_profile(levels)
    zoned = node("z", A10G, 4, labels={constants.LABEL_TOPOLOGY_PROFILE: profile})
    (name,) = [n for n in render.flavor_groups([zoned]) if "a10g" in n]
    assert name == f"gpustack--generic--nvidia-a10g-linux-amd64-4d-{profile}"
    source = {"spec": {"levels": ["topology.kubernetes.io/zone", "topology.gpustack.ai/rack", "x/y"]}}
    assert render.topology_levels(profile, [source]) == levels
    assert render.topology_levels(profile, []) is None
    assert render.topology_levels(HOSTNAME, []) == [constants.LABEL_HOSTNAME]
    topology = render.render_topology(profile, levels)
    assert topology["metadata"]["name"] == f"gpustack-{profile}"
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == levels


def test_flavor_drift_is_only_about_immutable_fields() -> None:
    flavor = render.render_flavor(
        render.flavor_groups(cluster())["gpustack--generic--nvidia-a10g-linux-amd64-4d"]
    )
    current = json.loads(json.dumps(flavor))
    assert render.flavor_spec_drift(flavor, current) == []
    current["spec"]["topologyName"] = "gpustack-other"
    current["spec"]["nodeLabels"]["extra"] = "1"
    assert render.flavor_spec_drift(flavor, current) == ["nodeLabels", "topologyName"]


def test_derived_instance_types_take_the_unit_preset_of_their_tier() -> None:
    flavors = [render.render_flavor(g) for g in render.flavor_groups(cluster()).values()]
    derived = render.derived_pools(flavors, aware_cpu=False)
    assert sorted(derived) == [
        "gpustack--generic-linux-amd64",
        A10G_POOL,
        "gpustack--nvidia-h100-80gb-hbm3-linux-amd64",
    ]
    a10g = render.derived_instance_type(derived[A10G_POOL], aware_cpu=False)
    assert a10g["metadata"]["labels"] == {
        "feature.gpustack.ai/acceleratable": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        "schedule.gpustack.ai/queue-entrance": "gpustack-fnv64-c4680bb149644f1c",
        "schedule.gpustack.ai/derived-from-node": "true",
    }
    assert a10g["spec"] == {
        "acceleratable": True,
        "acceleratorGroup": "nvidia-a10g",
        "generalGroup": "generic",
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "8", "ram": "64Gi"},
        "localStorage": "100Gi",
    }
    h100 = render.derived_instance_type(
        derived["gpustack--nvidia-h100-80gb-hbm3-linux-amd64"], aware_cpu=False
    )
    assert h100["spec"]["unitResources"] == {"cpu": "12", "ram": "192Gi"}
    cpu = render.derived_instance_type(derived["gpustack--generic-linux-amd64"], aware_cpu=False)
    assert (
        cpu["spec"]["unitResources"] == {"cpu": "1", "ram": "2Gi"} and "acceleratorGroup" not in cpu["spec"]
    )


def test_awareness_splits_pools_by_cpu_key() -> None:
    amd = {
        "general.feature.gpustack.ai/amd-epyc-7763": "true",
        "general.feature.gpustack.ai/amd-epyc-7763.count": "96",
    }
    nodes = [
        node(
            "a",
            A10G,
            4,
            labels=amd,
            drop=("general.feature.gpustack.ai/generic", "general.feature.gpustack.ai/generic.count"),
        )
    ]
    flavors = [render.render_flavor(g, aware_cpu=True) for g in render.flavor_groups(nodes).values()]
    assert sorted(render.name_of(f) for f in flavors) == [
        "gpustack--amd-epyc-7763--nvidia-a10g-linux-amd64-4d",
        "gpustack--amd-epyc-7763-linux-amd64-96c",
    ]
    assert sorted(render.derived_pools(flavors, aware_cpu=True)) == [
        "gpustack--amd-epyc-7763--nvidia-a10g-linux-amd64",
        "gpustack--amd-epyc-7763-linux-amd64",
    ]
    assert sorted(render.derived_pools(flavors, aware_cpu=False)) == [
        "gpustack--generic-linux-amd64",
        A10G_POOL,
    ]


def test_admin_instance_types_match_flavors_by_schedule_labels() -> None:
    flavors = [render.render_flavor(g) for g in render.flavor_groups(cluster()).values()]
    admin = {
        "metadata": {"name": "a10g-12c128g"},
        "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-a10g", "os": "linux", "arch": "amd64"},
    }
    assert [render.name_of(f) for f in render.pool_flavors(admin, flavors, aware_cpu=False)] == [
        "gpustack--generic--nvidia-a10g-linux-amd64-4d"
    ]
    generic = {"metadata": {"name": "cpu"}, "spec": {"acceleratable": False, "os": "linux", "arch": "amd64"}}
    assert [render.name_of(f) for f in render.pool_flavors(generic, flavors, aware_cpu=False)] == [
        "gpustack--generic-linux-amd64-64c"
    ]
    other = {
        "metadata": {"name": "x"},
        "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-l4", "os": "linux", "arch": "amd64"},
    }
    assert render.pool_flavors(other, flavors, aware_cpu=False) == []


def test_local_queues_in_tenant_namespaces_only() -> None:
    queues = [A10G_POOL, "gpustack--generic-linux-amd64"]
    team = {"metadata": {"name": "team-a"}, "status": {"phase": "Active"}}
    apply, delete = render.local_queue_plan(queues, team, [])
    assert [b["metadata"]["name"] for b in apply] == sorted(local_queue_name(q) for q in queues)
    a10g = next(b for b in apply if b["spec"]["clusterQueue"] == A10G_POOL)
    assert a10g["metadata"]["name"] == "gpustack-fnv64-c4680bb149644f1c"
    assert a10g["metadata"]["annotations"] == {"schedule.gpustack.ai/queue": A10G_POOL}
    assert delete == []
    for system in ("kube-system", "kube-public", "kube-node-lease", "gpustack-system", "kueue-system"):
        assert render.local_queue_plan(queues, {"metadata": {"name": system}}, []) == ([], [])
    terminating = {"metadata": {"name": "t"}, "status": {"phase": "Terminating"}}
    assert render.local_queue_plan(queues, terminating, [])[0] == []
    # An up-to-date queue is left alone; ours for a gone ClusterQueue is deleted; others' are not ours.
    stale = render.render_local_queue("gpustack--gone-linux-amd64", "team-a")
    foreign = {"metadata": {"name": "mine", "namespace": "team-a"}}
    apply, delete = render.local_queue_plan(queues, team, [a10g, stale, foreign])
    assert [b["spec"]["clusterQueue"] for b in apply] == ["gpustack--generic-linux-amd64"]
    assert delete == [stale["metadata"]["name"]]


def test_held_by_kueue_and_when_a_nudge_is_due() -> None:
    from controllers.pools import render as pools_render

    topo = {
        "metadata": {"name": "t", "deletionTimestamp": "x", "finalizers": [constants.KUEUE_RESOURCE_IN_USE]}
    }
    assert pools_render.held_by_kueue(topo, set()) and not pools_render.held_by_kueue(topo, {"t"})
    assert not pools_render.held_by_kueue(
        {"metadata": {"name": "t", "finalizers": ["kueue.x-k8s.io/resource-in-use"]}}, set()
    )
    assert not pools_render.held_by_kueue({"metadata": {"name": "t", "deletionTimestamp": "x"}}, set())
    assert pools_render.nudge_due(topo, 1000.0)
    nudged = {"metadata": {**topo["metadata"], **pools_render.nudge_patch(1000.0)["metadata"]}}
    assert not pools_render.nudge_due(nudged, 1000.0 + pools_render.KUEUE_NUDGE_SECONDS - 1)
    assert pools_render.nudge_due(nudged, 1000.0 + pools_render.KUEUE_NUDGE_SECONDS)


def _versioned(nodes: list[dict], version: str = "1") -> list[dict]:
    for n in nodes:
        n.setdefault("metadata", {})["resourceVersion"] = version
    return nodes


def _shape(groups: dict) -> dict:
    return {name: (g.key, g.first, list(g.nodes)) for name, g in groups.items()}


def test_the_facts_memo_groups_as_flavor_groups_does_and_reuses_what_did_not_change() -> None:
    memo = render.NodeFactsMemo()
    nodes = _versioned(cluster())
    first = memo.groups(nodes)
    assert _shape(first) == _shape(render.flavor_groups(nodes))
    assert memo.groups(nodes) is first  # nothing moved: the same groups, not rebuilt

    # A new resourceVersion with the same facts (a status write): still the same groups.
    assert memo.groups(_versioned(cluster(), "2")) is first

    # A node relabelled, one added, one gone, the other setting: each rebuilt, as flavor_groups says.
    relabelled = _versioned([node("h100-b", H100, 8), node("h100-a", H100, 4), node("a10g-a", A10G, 4)], "3")
    for changed in (
        relabelled,
        [*relabelled, *_versioned([node("t4-a", T4, 1)], "4")],
        relabelled[:2],
    ):
        for mixed in (True, False):
            got = memo.groups(changed, mixed_on_node=mixed)
            assert _shape(got) == _shape(render.flavor_groups(changed, mixed_on_node=mixed))
    assert sorted(memo._facts) == ["h100-a", "h100-b"]  # the removed nodes are forgotten


def test_the_facts_memo_reads_again_a_node_without_a_resource_version() -> None:
    memo = render.NodeFactsMemo()
    plain = node("a10g-a", A10G, 4)
    plain["metadata"].pop("resourceVersion", None)
    assert memo.facts(plain) == render.node_facts(plain)
    relabelled = node("a10g-a", A10G, 2)
    relabelled["metadata"].pop("resourceVersion", None)
    assert memo.facts(relabelled) == render.node_facts(relabelled)
