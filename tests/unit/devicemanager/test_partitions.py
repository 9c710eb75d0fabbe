"""Partitions behind partitioned grants (§6.5, the reference's MIG facts): NVML's GPU and compute
instances through pynvml's real wrappers on the simulated library, ownership markers on disk,
materialisation at Allocate, reuse on a retry and after a restart, the sidecar's liveness-checked
view, and reclaim — IN_USE retried with bounds, never blocking other cards."""

from __future__ import annotations

import json

import pytest

from nodeplugins.devicemanager import devices
from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.allocator import Allocator, Refusal
from nodeplugins.devicemanager.backends.mig import NvmlMig
from nodeplugins.devicemanager.backends.nvidia import NvidiaBackend
from nodeplugins.devicemanager.backends.simulated import inventory_of
from nodeplugins.devicemanager.partitions import (
    RETRY_ATTEMPTS,
    InUse,
    Markers,
    PartitionError,
    Partitions,
)
from nodeplugins.devicemanager.simulation import fakenvml
from nodeplugins.devicemanager.simulation import profile as profiles
from tests.unit.devicemanager.conftest import NODE, pod

BASE = "nvidia.com/gpu"
R = {r.family: r for r in tk.resources("nvidia")}
MIG_3G = {
    f"{BASE}.partitioned": 1,
    f"{BASE}.partitioned.mig-3g.40gb": 1,
    f"{BASE}.partitioned.units": 785_000,
}
MIG_7G = {
    f"{BASE}.partitioned": 1,
    f"{BASE}.partitioned.mig-7g.80gb": 1,
    f"{BASE}.partitioned.units": 1_600_000,
}
CARDS = [
    {"product": "NVIDIA H100 80GB HBM3", "count": 2},
    {"product": "NVIDIA H100 80GB HBM3", "count": 2, "partitioned": True},
]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Node:
    """One simulated node's hardware (its NVML state file) and its agent's state directory; an
    agent (allocator + partitions) can be started afresh on them, as a restart does."""

    def __init__(self, tmp_path) -> None:
        self.profile = profiles.parse({"manufacturer": "nvidia", "cards": CARDS}, node=NODE)
        self.state = tmp_path / "instances.json"
        self.markers = tmp_path / "state" / "partitions"
        self.clock = Clock()
        self.start()

    def start(self) -> Allocator:
        self.library = fakenvml.FakeNvml(self.profile, state=self.state)
        self.partitions = Partitions(NvmlMig(self.library), Markers(self.markers), clock=self.clock)
        inventory = inventory_of(self.profile)
        self.allocator = Allocator(NODE, "nvidia", env={}, partitions=self.partitions)
        self.allocator.set_inventory(inventory, devices.spec_groups(inventory, {}))
        return self.allocator

    def card(self, index: int) -> str:
        return self.profile.cards[index].uuid

    def token(self, card: int, n: int = 0) -> str:
        return tk.token_id(self.allocator.groups[0]["id"], self.card(card), n)

    def instances(self, card: int):
        return self.library.gpu_instances(self.card(card))

    def reclaim(self) -> None:
        self.partitions.run_due()


@pytest.fixture
def node(tmp_path) -> Node:
    return Node(tmp_path)


def recorded(allocator: Allocator, held) -> dict:
    """The Pod as it is after the agent wrote its record (what the API then serves)."""
    from api import allocation

    p = allocator.pods[held.uid]
    return {
        **p,
        "metadata": {
            **p["metadata"],
            "annotations": {allocation.ANNOTATION: allocation.encode(allocator.record_for(held.uid))},
        },
    }


# --- the simulated library, through pynvml ------------------------------------------------------------------


def test_the_simulated_library_enforces_placements_and_in_use(node):
    mig = NvmlMig(node.library)
    card = node.card(2)
    first = mig.create(card, "3g.40gb", 4, 4)
    assert first.device.startswith("MIG-") and first.compute_instance == 0
    assert [(i.start, i.length, i.profile) for i in mig.instances(card)] == [(4, 4, "3g.40gb")]
    with pytest.raises(PartitionError, match="Insufficient resources"):
        mig.create(card, "1g.10gb", 5, 1)  # overlaps the live instance
    with pytest.raises(PartitionError, match="Invalid Argument"):
        mig.create(card, "3g.40gb", 2, 4)  # not a legal placement of the profile
    with pytest.raises(PartitionError, match="does not offer"):
        mig.create(node.card(0), "3g.40gb", 0, 4)  # not in MIG mode: no profile
    node.library.run_process(first.device)
    with pytest.raises(InUse):
        mig.destroy(first)
    assert mig.alive(first)
    node.library.run_process(first.device, running=False)
    assert mig.destroy(first) and not mig.alive(first) and mig.instances(card) == []
    again = mig.create(card, "3g.40gb", 4, 4)
    assert again.gpu_instance == first.gpu_instance and again.device != first.device  # id reused, UUID new
    assert not mig.alive(first)  # the recorded UUID is gone even though the id exists again
    assert not mig.destroy(first)  # and the new instance is not destroyed in its name


def test_instances_outlive_the_library_object_like_hardware(node):
    made = NvmlMig(node.library).create(node.card(3), "7g.80gb", 0, 8)
    later = NvmlMig(fakenvml.FakeNvml(node.profile, state=node.state))
    assert later.alive(made) and [i.device for i in later.instances(node.card(3))] == [made.device]


# --- materialisation -------------------------------------------------------------------------------------


def test_a_partitioned_grant_gets_its_own_mig_device_and_an_ownership_marker(node):
    a = node.allocator
    a.pod_event("ADDED", pod("p1", MIG_3G))
    held = a.allocate(R["partitioned"], [node.token(2)])
    grant = held.grants[0]
    [gi] = node.instances(grant.card.index)
    assert (gi.start, gi.size) == (grant.start, grant.length) and grant.length == 4
    [ci] = gi.computes.values()
    assert ci.slices == gi.slices == 3  # one compute instance covering the whole GPU instance
    assert grant.device == ci.uuid
    env = NvidiaBackend().inject("partitioned", held.grants, {}).envs
    assert env["NVIDIA_VISIBLE_DEVICES"] == ci.uuid and env["CUDA_VISIBLE_DEVICES"] == "0"
    marker = json.loads((node.markers / "uid-p1.main.json").read_text())
    assert marker["owner"] == {"uid": "uid-p1", "namespace": "team-a", "pod": "p1", "container": "main"}
    assert marker["card"] == grant.card.id and marker["device"] == ci.uuid and marker["state"] == "ready"
    a.pod_event("ADDED", pod("p2", MIG_3G))
    second = a.allocate(R["partitioned"], [node.token(3)])
    assert second.grants[0].card.id == grant.card.id  # packed, at the other placement
    assert {second.grants[0].start, grant.start} == {0, 4}
    assert len(node.instances(grant.card.index)) == 2


def test_a_retried_allocate_gets_the_same_instance_and_so_does_one_after_a_restart(node):
    waiting = {("team-a", "p1", "main")}
    a = node.allocator
    a.pod_resources = lambda _r, skip=(): waiting  # the kubelet never got the first response
    p1 = pod("p1", MIG_3G)
    a.pod_event("ADDED", p1)
    first = a.allocate(R["partitioned"], [node.token(2)])
    again = a.allocate(R["partitioned"], [node.token(3, 1)])  # partition tokens are fungible
    assert again is first and again.grants[0].device == first.grants[0].device
    assert len(node.instances(2)) == 1
    pod_now = recorded(a, first)
    # The agent restarts: a new process, the same hardware and state directory.
    fresh = node.start()
    fresh.pod_resources = lambda _r, skip=(): waiting
    fresh.replace_pods([pod_now])
    retried = fresh.allocate(R["partitioned"], [node.token(2)])
    assert retried.grants[0].device == first.grants[0].device
    assert len(node.instances(2)) == 1
    node.reclaim()  # the restarted agent reclaims nothing its Pods still hold
    assert len(node.instances(2)) == 1


def test_a_failed_creation_gives_the_reservation_back(node):
    a = node.allocator
    hand_carved = NvmlMig(node.library).create(node.card(2), "1g.10gb", 0, 1)
    a.pod_event("ADDED", pod("p1", MIG_7G))
    with pytest.raises(Refusal, match=r"GPU instance \(id 1\) this device manager did not create"):
        a.allocate(R["partitioned"], [node.token(2)])
    assert not list(node.markers.glob("*.json"))
    row = a.row_index()[(a.groups[0]["id"], node.card(2))]
    assert row["allocatedProfiles"] == [] and row["mode"] == 0  # nothing stays charged
    assert [i.device for i in NvmlMig(node.library).instances(node.card(2))] == [hand_carved.device]


# --- the sidecar ------------------------------------------------------------------------------------------


def _with_sidecar(name: str, limits: dict) -> dict:
    p = pod(name, limits)
    p["spec"]["containers"].append(
        {"name": "sshd", "resources": {"limits": {"device.gpustack.ai/nvidia.visibility": 1}}}
    )
    return p


def test_the_sidecar_sees_the_instance_main_holds_and_fails_closed_without_it(node):
    a = node.allocator
    a.pod_event("ADDED", _with_sidecar("ssh", MIG_3G))
    main = a.allocate(R["partitioned"], [node.token(2)])
    sidecar = a.allocate(R["visibility"], [node.token(0)])
    assert [g.device for g in sidecar.grants] == [main.grants[0].device]
    env = NvidiaBackend().inject("visibility", sidecar.grants, {}).envs
    assert env["NVIDIA_VISIBLE_DEVICES"] == main.grants[0].device  # the MIG device, never the card
    # The instance is destroyed behind the agent's back, and another made at the same place:
    mig = NvmlMig(node.library)
    [instance] = mig.instances(node.card(2))
    assert mig.destroy(instance)
    mig.create(node.card(2), "3g.40gb", instance.start, 4)
    with pytest.raises(Refusal, match="gone or was recreated"):
        a.allocate(R["visibility"], [node.token(0, 1)])  # the sidecar's Allocate again
    # A Pod whose marker is missing:
    a.pod_event("ADDED", _with_sidecar("ssh-b", MIG_3G))
    a.allocate(R["partitioned"], [node.token(2)])
    (node.markers / "uid-ssh-b.main.json").unlink()
    with pytest.raises(Refusal, match="no ownership marker"):
        a.allocate(R["visibility"], [node.token(0, 2)])


# --- reclaim --------------------------------------------------------------------------------------------------


def test_a_deleted_pod_has_its_instance_destroyed_and_an_ended_one_too(node):
    a = node.allocator
    a.replace_pods([])
    a.pod_event("ADDED", pod("gone", MIG_3G))
    a.pod_event("ADDED", pod("done", MIG_7G))
    gone = a.allocate(R["partitioned"], [node.token(2)])
    done = a.allocate(R["partitioned"], [node.token(3)])
    assert {g.card.index for g in (*gone.grants, *done.grants)} == {2, 3}
    a.pod_event("DELETED", a.pods[gone.uid])
    finished = recorded(a, done) | {"status": {"phase": "Succeeded"}}
    a.pod_event("MODIFIED", finished)
    node.reclaim()
    assert node.instances(2) == [] and node.instances(3) == []
    assert not list(node.markers.glob("*.json"))
    row = a.row_index()[(a.groups[0]["id"], node.card(3))]
    assert row["allocatedProfiles"] == [{"name": "7g.80gb", "count": 1}]  # charged until deleted (§6.5)


def test_an_instance_in_use_is_retried_with_bounds_without_blocking_other_cards(node):
    a = node.allocator
    a.replace_pods([])
    a.pod_event("ADDED", pod("busy", MIG_7G))
    busy = a.allocate(R["partitioned"], [node.token(2)])
    node.library.run_process(busy.grants[0].device)
    a.pod_event("DELETED", a.pods[busy.uid])
    node.reclaim()
    assert len(node.instances(busy.grants[0].card.index)) == 1
    assert node.partitions.pending() == [f"{busy.uid}.main"]
    # Meanwhile the other partitioned card serves a new Pod at once.
    a.pod_event("ADDED", pod("next", MIG_7G))
    nxt = a.allocate(R["partitioned"], [node.token(3)])
    assert nxt.grants[0].card.index != busy.grants[0].card.index and nxt.grants[0].device
    for _ in range(RETRY_ATTEMPTS + 2):  # past the bound: a straggler, re-checked every sweep
        node.clock.now += node.partitions.sweep_period
        node.reclaim()
    assert len(node.instances(busy.grants[0].card.index)) == 1
    node.library.run_process(busy.grants[0].device, running=False)
    node.clock.now += node.partitions.sweep_period
    node.reclaim()
    assert node.instances(busy.grants[0].card.index) == [] and node.partitions.pending() == []


def test_a_placement_left_by_a_deleted_pod_is_reclaimed_by_the_next_allocation(node):
    a = node.allocator
    a.replace_pods([])
    a.pod_event("ADDED", pod("old", MIG_7G))
    old = a.allocate(R["partitioned"], [node.token(2)])
    a.pod_event("ADDED", pod("other", MIG_7G))
    a.allocate(R["partitioned"], [node.token(3)])
    node.partitions.release = lambda _key: None  # the reclaimer has not run yet
    a.pod_event("DELETED", a.pods[old.uid])
    a.pod_event("ADDED", pod("new", MIG_7G))
    new = a.allocate(R["partitioned"], [node.token(2)])
    assert new.grants[0].card.id == old.grants[0].card.id
    [gi] = node.instances(new.grants[0].card.index)
    assert [ci.uuid for ci in gi.computes.values()] == [new.grants[0].device] != [old.grants[0].device]


def test_a_restarted_agent_reclaims_what_pods_deleted_meanwhile_held(node):
    a = node.allocator
    a.pod_event("ADDED", pod("stays", MIG_3G))
    a.pod_event("ADDED", pod("goes", MIG_3G))
    stays = a.allocate(R["partitioned"], [node.token(2)])
    goes = a.allocate(R["partitioned"], [node.token(2, 1)])
    pods = [recorded(a, stays)]
    fresh = node.start()
    node.reclaim()  # before the first list of Pods nothing is judged
    assert len(node.instances(2)) == 2
    fresh.replace_pods(pods)
    node.reclaim()
    assert [ci.uuid for gi in node.instances(2) for ci in gi.computes.values()] == [stays.grants[0].device]
    assert not (node.markers / f"{goes.uid}.main.json").exists()


def test_before_the_nodes_pods_are_listed_no_instance_is_judged_an_orphan(node):
    a = node.allocator
    a.pod_event("ADDED", pod("running", MIG_7G))
    running = a.allocate(R["partitioned"], [node.token(2)])
    fresh = node.start()  # restarted; its first list of Pods has not come yet
    fresh.pod_event("ADDED", pod("new", MIG_7G))
    with pytest.raises(Refusal, match="belong to the partition of team-a/running"):
        fresh.allocate(R["partitioned"], [node.token(2)])
    [gi] = node.instances(running.grants[0].card.index)
    assert [ci.uuid for ci in gi.computes.values()] == [running.grants[0].device]
