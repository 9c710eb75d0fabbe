"""controllers.topology: hierarchies, snapshots and node profiles, purely (topology spec B.3, B.4)."""

from __future__ import annotations

import json

import pytest

from api import constants
from api.naming import fnv1a64, topology_profile
from api.topology import normalized_levels, writable, write_prefix_problem
from controllers.topology import hierarchy, profiles, snapshot

REGION, ZONE = "topology.kubernetes.io/region", "topology.kubernetes.io/zone"
G_REGION, G_ZONE, G_RACK = (
    "topology.gpustack.ai/region",
    "topology.gpustack.ai/zone",
    "topology.gpustack.ai/rack",
)
HOST = constants.LABEL_HOSTNAME
TIER1, TIER2, TIER3 = (f"fabric.topograph.run/tier-{n}" for n in (1, 2, 3))


# --- the profile --------------------------------------------------------------------------------


def test_the_profile_is_fnv1a_64_over_nul_joined_keys() -> None:
    keys = [ZONE, G_RACK, HOST]
    expected = "fnv64-" + fnv1a64(b"\x00".join(k.encode() for k in keys))
    assert hierarchy.profile_of(keys) == topology_profile(keys) == expected
    assert len(expected) == len("fnv64-") + 16 and expected[6:] == expected[6:].lower()
    assert "fnv64-" + fnv1a64(HOST) == hierarchy.HOSTNAME_PROFILE
    # The key list, not the values: two racks of one shape share a profile.
    assert hierarchy.ordered_keys([ZONE, G_RACK], {ZONE: "a", G_RACK: "r1"})[0] == keys
    assert hierarchy.ordered_keys([ZONE, G_RACK], {ZONE: "b", G_RACK: "r9"})[0] == keys


def test_ordered_keys_are_the_longest_populated_prefix_then_the_hostname() -> None:
    levels = [REGION, ZONE, G_RACK]
    assert hierarchy.ordered_keys(levels, {REGION: "r", ZONE: "z"}) == ([REGION, ZONE, HOST], None)
    assert hierarchy.ordered_keys(levels, {}) == ([HOST], None)
    keys, fault = hierarchy.ordered_keys(levels, {REGION: "r", G_RACK: "x"})
    assert keys == [HOST] and fault is not None and fault.key == G_RACK and ZONE in fault.message


def test_topograph_tiers_are_normalised_coarsest_first() -> None:
    assert normalized_levels([REGION, TIER1, TIER3, TIER2, G_RACK, TIER1]) == [
        REGION,
        TIER3,
        TIER2,
        TIER1,
        G_RACK,
        TIER1,
    ]
    labels = {TIER1: "leaf-1", TIER2: "spine-1"}
    assert hierarchy.ordered_keys([TIER1, TIER2], labels)[0] == [TIER2, TIER1, HOST]


def test_faults_name_the_node_and_the_key() -> None:
    nodes = {
        "n1": {ZONE: "a", G_RACK: "r1"},
        "n2": {ZONE: "b", G_RACK: "r1"},  # r1 under two zones
        "n3": {G_RACK: "r2"},  # a rack without its zone
        "n4": {ZONE: "a"},  # a missing finer level is fine
    }
    found = hierarchy.faults([ZONE, G_RACK], nodes)
    assert [(f.node, f.key) for f in found] == [("n2", G_RACK), ("n3", G_RACK)]
    assert "n1" in found[0].message and "zone=a" in found[0].message.replace(ZONE, "zone")
    assert hierarchy.faults([ZONE, G_RACK], {"n1": nodes["n1"], "n4": nodes["n4"]}) == []


# --- the write prefix and writable keys ----------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "verdict"),
    [
        ("topology.example.com/", None),
        ("rack.topology.gpustack.ai/", "forbidden"),
        ("example.com/racks/", "invalid"),
        ("example.com", "invalid"),
        ("Example.com/", "invalid"),
        ("k8s.io/", "forbidden"),
        ("accelerator.topograph.run/", "forbidden"),
    ],
)
def test_the_write_prefix(prefix: str, verdict: str | None) -> None:
    problem = write_prefix_problem(prefix)
    assert (problem[0] if problem else None) == verdict


def test_writable_keys() -> None:
    assert writable(G_RACK) and writable("topology.example.com/rack", "topology.example.com/")
    assert not writable(constants.LABEL_TOPOLOGY_PROFILE)
    assert not writable(ZONE) and not writable(TIER1) and not writable("example.com/rack")
    assert not writable("topology.example.com/rack")  # no prefix delegated


# --- snapshots ------------------------------------------------------------------------------------


def doc(nodes: dict, revision: str = "inventory-42") -> str:
    return json.dumps({"apiVersion": "topology.gpustack.ai/v1alpha1", "revision": revision, "nodes": nodes})


SELECTED = {
    "worker-a": {ZONE: "zone-a", HOST: "worker-a"},
    "worker-b": {ZONE: "zone-a", HOST: "worker-b"},
    "worker-c": {HOST: "worker-c"},
}
KNOWN = {*SELECTED, "other"}


def judge(nodes: dict, levels: list[str], prefix: str = "") -> snapshot.Verdict:
    return snapshot.judge(snapshot.parse(doc(nodes)), levels, prefix, SELECTED, KNOWN)


def test_a_yaml_snapshot_parses_and_yields_only_writable_labels() -> None:
    text = f"""
apiVersion: topology.gpustack.ai/v1alpha1
revision: inventory-42
nodes:
  worker-a: {{{ZONE}: zone-a, {G_RACK}: rack-01}}
  worker-b: {{{G_RACK}: rack-02}}
"""
    parsed = snapshot.parse(text)
    assert parsed.revision == "inventory-42"
    verdict = snapshot.judge(parsed, [ZONE, G_RACK], "", SELECTED, KNOWN)
    assert verdict.valid
    # The standard zone is a read-only parent: checked, never written.
    assert verdict.labels == {"worker-a": {G_RACK: "rack-01"}, "worker-b": {G_RACK: "rack-02"}}


@pytest.mark.parametrize(
    ("nodes", "levels", "node", "key", "words"),
    [
        ({"ghost": {G_RACK: "r"}}, [G_RACK], "ghost", "", "no such Node"),
        ({"other": {G_RACK: "r"}}, [G_RACK], "other", "", "not selected"),
        ({"worker-a": {G_ZONE: "z"}}, [G_RACK], "worker-a", G_ZONE, "not one of spec.levels"),
        ({"worker-a": {G_RACK: "not a value"}}, [G_RACK], "worker-a", G_RACK, "label value"),
        ({"worker-a": {G_RACK: ""}}, [G_RACK], "worker-a", G_RACK, "label value"),
        ({"worker-a": {G_RACK: "r"}}, [G_ZONE, G_RACK], "worker-a", G_RACK, "parent level"),
        (
            {"worker-a": {G_ZONE: "z1", G_RACK: "r"}, "worker-b": {G_ZONE: "z2", G_RACK: "r"}},
            [G_ZONE, G_RACK],
            "worker-b",
            G_RACK,
            "one child value belongs to one parent",
        ),
        ({"worker-a": {ZONE: "zone-b", G_RACK: "r"}}, [ZONE, G_RACK], "worker-a", ZONE, "read-only parent"),
        ({"worker-c": {ZONE: "zone-c", G_RACK: "r"}}, [ZONE, G_RACK], "worker-c", ZONE, "read-only parent"),
        ({"worker-a": {TIER1: "leaf"}}, [TIER1], "worker-a", TIER1, "not writable"),
        (
            {"worker-a": {"topology.example.com/rack": "r"}},
            ["topology.example.com/rack"],
            "worker-a",
            "",
            "not writable",
        ),
    ],
)
def test_a_fault_rejects_the_whole_snapshot(nodes, levels, node, key, words) -> None:
    healthy = (
        {"worker-b": {G_RACK: "fine"}}
        if G_RACK in levels and G_ZONE not in levels and ZONE not in levels
        else {}
    )
    verdict = judge({**healthy, **nodes}, levels)
    assert not verdict.valid and verdict.labels == {}  # atomic: nothing of the snapshot survives
    hits = [f for f in verdict.faults if f.node == node and (not key or f.key == key)]
    assert hits and words in hits[0].message, verdict.faults


def test_a_delegated_prefix_is_writable() -> None:
    verdict = judge(
        {"worker-a": {"topology.example.com/rack": "r"}},
        ["topology.example.com/rack"],
        "topology.example.com/",
    )
    assert verdict.valid and verdict.labels == {"worker-a": {"topology.example.com/rack": "r"}}


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("[]", "mapping"),
        (json.dumps({"apiVersion": "v1", "revision": "r", "nodes": {}}), "apiVersion"),
        (
            json.dumps({"apiVersion": "topology.gpustack.ai/v1alpha1", "revision": "", "nodes": {}}),
            "revision",
        ),
        (json.dumps({"apiVersion": "topology.gpustack.ai/v1alpha1", "revision": 7, "nodes": {}}), "revision"),
        (json.dumps({"apiVersion": "topology.gpustack.ai/v1alpha1", "revision": "r", "nodes": []}), "nodes"),
        (
            json.dumps(
                {"apiVersion": "topology.gpustack.ai/v1alpha1", "revision": "r", "nodes": {"a": {"k": 1}}}
            ),
            "string",
        ),
        ("key: [unclosed", "neither JSON nor YAML"),
        ("x" * (1024 * 1024 + 1), "at most"),
    ],
)
def test_a_document_that_is_no_snapshot(raw: str, words: str) -> None:
    with pytest.raises(snapshot.SnapshotError) as caught:
        snapshot.parse(raw)
    assert words in str(caught.value)


# --- profiles -------------------------------------------------------------------------------------


def source(name: str, levels: list[str], *, ready: bool = True, selector: dict | None = None) -> dict:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"nodeSelector": selector or {}, "levels": levels, "nodeLabels": {}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": {HOST: name, **labels}}}


def test_exactly_one_ready_source_describes_a_node() -> None:
    zones = source("zones", [ZONE, G_RACK])
    chosen = profiles.node_profile(node("n", **{ZONE: "a", G_RACK: "r"}), [zones])
    assert chosen.keys == (ZONE, G_RACK, HOST) and chosen.source == "zones"
    assert chosen.profile == topology_profile([ZONE, G_RACK, HOST])
    # Not Ready, or not selecting: hostname-only, with no reason to report.
    assert profiles.node_profile(node("n", **{ZONE: "a"}), [source("z", [ZONE], ready=False)]).keys == (HOST,)
    picky = source("z", [ZONE], selector={"matchLabels": {"pool": "x"}})
    assert profiles.node_profile(node("n", **{ZONE: "a"}), [picky]) == profiles.NodeProfile(
        (HOST,), hierarchy.HOSTNAME_PROFILE
    )
    # Two Ready sources: hostname-only, never a merge.
    both = profiles.node_profile(node("n", **{ZONE: "a"}), [zones, source("racks", [G_RACK])])
    assert both.keys == (HOST,) and "racks" in both.reason and "zones" in both.reason
    # A child without its parent: hostname-only, and why.
    broken = profiles.node_profile(node("n", **{G_RACK: "r"}), [zones])
    assert broken.keys == (HOST,) and G_RACK in broken.reason
