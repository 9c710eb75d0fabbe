"""Gate 5 decisions (§6.5): grants, cross-mode refusals, preference, release, visibility."""

from __future__ import annotations

import pytest

from api import allocation
from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.allocator import Allocator, Refusal
from tests.unit.devicemanager.conftest import make_allocator, pod

BASE = "nvidia.com/gpu"
R = {r.family: r for r in tk.resources("nvidia")}


def tokens(allocator: Allocator, family: str, card: int, n: int = 1) -> list[str]:
    group = allocator.groups[0]["id"]
    card_id = allocator.inventory.cards[card].id
    return [tk.token_id(group, card_id, i) for i in range(n)]


def card_id(allocator: Allocator, card: int) -> str:
    return allocator.inventory.cards[card].id


def row(allocator: Allocator, card: int) -> dict:
    card_id = allocator.inventory.cards[card].id
    return allocator.row_index()[(allocator.groups[0]["id"], card_id)]


def record(allocator: Allocator, held) -> None:
    """What the caller does after Allocate: write the record on the Pod."""
    p = allocator.pods[held.uid]
    current = allocation.record_of(p)
    current[held.container] = held.groups
    p = {
        **p,
        "metadata": {**p["metadata"], "annotations": {allocation.ANNOTATION: allocation.encode(current)}},
    }
    allocator.pod_event("MODIFIED", p)


def test_exclusive_grant_charges_the_whole_card(h100: Allocator) -> None:
    h100.pod_event("ADDED", pod("whole", {BASE: 1}))
    held = h100.allocate(R["exclusive"], tokens(h100, "exclusive", 1))
    assert [g.card.index for g in held.grants] == [1]
    assert held.groups[0]["accelerators"][0]["mode"] == 1
    assert row(h100, 1)["mode"] == 1 and row(h100, 1)["remaining"] == 0
    record(h100, held)
    assert row(h100, 1)["mode"] == 1
    assert h100.drifted(h100.pods[held.uid]) is None


def test_an_annotation_edited_by_hand_frees_nothing_and_is_restored(h100: Allocator) -> None:
    h100.pod_event("ADDED", pod("whole", {BASE: 1}))
    held = h100.allocate(R["exclusive"], tokens(h100, "exclusive", 1))
    record(h100, held)
    edited = dict(h100.pods[held.uid])
    edited["metadata"] = {**edited["metadata"], "annotations": {allocation.ANNOTATION: "{not json"}}
    h100.pod_event("MODIFIED", edited)
    assert row(h100, 1)["mode"] == 1
    assert h100.drifted(edited) == {"main": held.groups}


def test_a_restarted_agent_adopts_the_recorded_allocations(h100: Allocator) -> None:
    h100.pod_event("ADDED", pod("whole", {BASE: 1}))
    held = h100.allocate(R["exclusive"], tokens(h100, "exclusive", 1))
    record(h100, held)
    fresh = make_allocator(
        [
            {"product": "NVIDIA H100 80GB HBM3", "count": 4},
            {"product": "NVIDIA H100 80GB HBM3", "count": 2, "partitioned": True},
        ]
    )
    fresh.replace_pods(list(h100.pods.values()))
    assert fresh.row_index()[(fresh.groups[0]["id"], held.grants[0].card.id)]["mode"] == 1
    fresh.pod_event("ADDED", pod("next", {BASE: 1}))
    with pytest.raises(Refusal, match="held in exclusive mode"):
        fresh.allocate(R["exclusive"], tokens(fresh, "exclusive", 1))


def test_a_record_written_by_hand_once_the_agent_runs_charges_nothing_and_is_removed(
    h100: Allocator,
) -> None:
    """After the start list, a record on a Pod this process granted nothing is an edit: the card it
    names stays free for the next container, and the agent is told to remove the annotation."""
    h100.pod_event("ADDED", pod("whole", {BASE: 1}))
    held = h100.allocate(R["exclusive"], tokens(h100, "exclusive", 1))
    h100.replace_pods(list(h100.pods.values()))  # the start list: the agent now runs
    forged = pod("forger", {BASE: 1})
    forged["metadata"]["annotations"] = {}
    forged["metadata"]["annotations"][allocation.ANNOTATION] = allocation.encode(
        {
            "main": [
                {
                    **held.groups[0],
                    "accelerators": [{**held.groups[0]["accelerators"][0], "id": card_id(h100, 2)}],
                }
            ]
        }
    )
    h100.pod_event("ADDED", forged)
    assert row(h100, 2)["mode"] == 0
    assert h100.drifted(h100.pods["uid-forger"]) == {}
    h100.pod_event("ADDED", pod("next", {BASE: 1}))
    assert h100.allocate(R["exclusive"], tokens(h100, "exclusive", 2)).pod == "next"  # the card is free
    ended = pod("ended", {BASE: 1}, phase="Succeeded")
    ended["metadata"]["annotations"] = dict(forged["metadata"]["annotations"])
    h100.pod_event("ADDED", ended)
    assert h100.drifted(h100.pods["uid-ended"]) is None  # an ended Pod's record is history


def test_card_held_in_another_mode_is_refused_and_unhealthy_for_that_family(h100: Allocator) -> None:
    h100.pod_event("ADDED", pod("shared", {f"{BASE}.shared": 1}))
    h100.allocate(R["shared"], tokens(h100, "shared", 0))
    h100.pod_event("ADDED", pod("whole", {BASE: 1}))
    with pytest.raises(Refusal, match="held in shared mode"):
        h100.allocate(R["exclusive"], tokens(h100, "exclusive", 0))
    health = {t: ok for t, ok, _ in tk.devices_of(R["exclusive"], h100.groups, h100.row_index())}
    assert health[tokens(h100, "exclusive", 0)[0]] is False
    assert health[tokens(h100, "exclusive", 1)[0]] is True
    visibility = tk.devices_of(R["visibility"], h100.groups, h100.row_index())
    assert all(ok for _t, ok, _ in visibility)  # visibility is exempt


def test_shared_grant_with_two_tokens_on_one_card_is_refused(h100: Allocator) -> None:
    h100.pod_event("ADDED", pod("two", {f"{BASE}.shared": 2}))
    with pytest.raises(Refusal, match="distinct cards"):
        h100.allocate(R["shared"], tokens(h100, "shared", 0, 2))


def test_two_30_percent_slices_share_a_card_two_60_do_not(h100: Allocator) -> None:
    slice30 = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 480_000}
    slice60 = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 960_000}
    h100.pod_event("ADDED", pod("a", slice30))
    h100.pod_event("ADDED", pod("b", slice30))
    h100.allocate(R["sliced"], [tokens(h100, "sliced", 2, 1)[0]])
    held = h100.allocate(R["sliced"], [tokens(h100, "sliced", 2, 2)[1]])
    assert held.grants[0].units == 480_000
    assert row(h100, 2)["remaining"] == 640_000 and row(h100, 2)["allocatedSlices"] == 2
    h100.pod_event("ADDED", pod("c", slice60))
    h100.pod_event("ADDED", pod("d", slice60))
    h100.allocate(R["sliced"], [tokens(h100, "sliced", 3)[0]])
    with pytest.raises(Refusal, match="units left; the slice needs 960000"):
        h100.allocate(R["sliced"], [tokens(h100, "sliced", 3, 2)[1]])


def test_slice_preference_is_the_most_occupied_card_that_fits(h100: Allocator) -> None:
    slice30 = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 480_000}
    h100.pod_event("ADDED", pod("a", slice30))
    h100.allocate(R["sliced"], [tokens(h100, "sliced", 2)[0]])
    h100.pod_event("ADDED", pod("b", slice30))
    offered = [t for card in range(4) for t in tokens(h100, "sliced", card, 3)]
    picked = h100.preferred(R["sliced"], offered, [], 1)
    assert len(picked) == 1 and tk.parse_token(picked[0])[1] == h100.inventory.cards[2].id


def test_a_slice_preference_for_a_pod_the_watch_has_not_delivered_reads_the_uncached_list() -> None:
    """The first 60 % slice leaves 40 % on its card: the second, known only past the watch, must be
    preferred onto another card (at 1 % it would go to the fuller one, and Allocate refuse it)."""
    slice60 = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 960_000}
    late = pod("late", slice60)
    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 2}], refresh_pods=lambda: [late])
    allocator.pod_event("ADDED", pod("first", slice60))
    allocator.allocate(R["sliced"], [tokens(allocator, "sliced", 0)[0]])
    offered = [t for card in range(2) for t in tokens(allocator, "sliced", card, 3)[1:]]
    picked = allocator.preferred(R["sliced"], offered, [], 1)
    assert tk.parse_token(picked[0])[1] == allocator.inventory.cards[1].id
    assert allocator.allocate(R["sliced"], picked).pod == "late"


def test_a_slice_of_unknown_size_is_preferred_onto_the_card_with_the_most_room(h100: Allocator) -> None:
    slice30 = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 480_000}
    for name, card in (("a", 0), ("b", 1), ("c", 1)):
        h100.pod_event("ADDED", pod(name, slice30))
        h100.allocate(R["sliced"], [tokens(h100, "sliced", card, 3)[int(name == "c")]])
    offered = [t for card in range(3) for t in tokens(h100, "sliced", card, 6)[3:]]
    picked = h100.preferred(R["sliced"], offered, [], 1)  # nobody waits: the size is unknown
    assert tk.parse_token(picked[0])[1] == h100.inventory.cards[2].id


def test_partition_is_packed_on_a_partitioned_card_with_its_placement(h100: Allocator) -> None:
    limits = {
        f"{BASE}.partitioned": 1,
        f"{BASE}.partitioned.mig-3g.40gb": 1,
        f"{BASE}.partitioned.units": 785_000,
    }
    h100.pod_event("ADDED", pod("p1", limits))
    held = h100.allocate(R["partitioned"], [tokens(h100, "partitioned", 4)[0]])
    grant = held.grants[0]
    assert grant.card.partitioned and grant.profile == "3g.40gb" and grant.length == 4
    entry = held.groups[0]["accelerators"][0]
    assert entry["mode"] == 4 and entry["allocatedPhysicalPlacements"] == [
        {"start": grant.start, "length": 4}
    ]
    h100.pod_event("ADDED", pod("p2", limits))
    second = h100.allocate(R["partitioned"], [tokens(h100, "partitioned", 5)[0]])
    assert second.grants[0].card.id == grant.card.id  # packed, not spread


def test_finished_pod_releases_its_card_and_deletion_releases_everything(h100: Allocator) -> None:
    p = pod("whole", {BASE: 1})
    h100.pod_event("ADDED", p)
    record(h100, h100.allocate(R["exclusive"], tokens(h100, "exclusive", 0)))
    done = {**h100.pods[p["metadata"]["uid"]], "status": {"phase": "Succeeded"}}
    h100.pod_event("MODIFIED", done)
    assert row(h100, 0)["mode"] == 0 and row(h100, 0)["remaining"] == 1_600_000
    h100.pod_event("ADDED", pod("x", {BASE: 1}))
    held = h100.allocate(R["exclusive"], tokens(h100, "exclusive", 1))
    h100.pod_event("DELETED", h100.pods[held.uid])
    assert row(h100, 1)["mode"] == 0


def test_identification_takes_the_oldest_pending_container_and_the_kubelet_answer_first() -> None:
    waiting: set = set()
    allocator = make_allocator(
        [{"product": "NVIDIA A10G", "count": 2}], pod_resources=lambda _r, skip=(): waiting
    )
    old, new = pod("old", {BASE: 1}), pod("new", {BASE: 1})
    allocator.pod_event("ADDED", new)
    allocator.pod_event("ADDED", old)
    waiting.add(("team-a", "new", "main"))  # the kubelet says it serves "new"
    assert allocator.allocate(R["exclusive"], tokens(allocator, "exclusive", 0)).pod == "new"
    waiting.clear()
    assert allocator.allocate(R["exclusive"], tokens(allocator, "exclusive", 1)).pod == "old"
    with pytest.raises(Refusal, match="cannot tell which container"):
        allocator.allocate(R["exclusive"], tokens(allocator, "exclusive", 1))


def test_visibility_reuses_the_owners_cards_and_fails_closed_without_one(h100: Allocator) -> None:
    p = pod("ssh", {BASE: 1})
    p["spec"]["containers"].append(
        {"name": "sshd", "resources": {"limits": {"device.gpustack.ai/nvidia.visibility": 1}}}
    )
    h100.pod_event("ADDED", p)
    owner = h100.allocate(R["exclusive"], tokens(h100, "exclusive", 3))
    sidecar = h100.allocate(R["visibility"], [tokens(h100, "visibility", 0)[0]])
    assert [g.card.id for g in sidecar.grants] == [g.card.id for g in owner.grants]
    assert sidecar.groups[0]["accelerators"][0]["mode"] == 5
    lone = pod("lone", {"device.gpustack.ai/nvidia.visibility": 1})
    h100.pod_event("ADDED", lone)
    with pytest.raises(Refusal, match="holds no card"):
        h100.allocate(R["visibility"], [tokens(h100, "visibility", 0, 2)[1]])


def test_unknown_token_is_refused(h100: Allocator) -> None:
    h100.pod_event("ADDED", pod("whole", {BASE: 1}))
    with pytest.raises(Refusal, match="not one this device manager advertises"):
        h100.allocate(R["exclusive"], ["nvidia-x:GPU-nope:0"])


def test_a_pod_the_watch_has_not_delivered_yet_is_found_by_an_uncached_list() -> None:
    late = pod("late", {BASE: 1})
    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 1}], refresh_pods=lambda: [late])
    held = allocator.allocate(R["exclusive"], tokens(allocator, "exclusive", 0))
    assert held.pod == "late"


@pytest.mark.parametrize("word", ["no", "off", "yes", "enabled"])
def test_switches_are_read_by_the_one_boolean_parser(word) -> None:
    from api.booleans import EnvironmentValueError
    from nodeplugins.devicemanager import devices
    from nodeplugins.devicemanager.allocator import ENV_IDENTIFY_BY_KUBELET, ENV_SLICED_GATE

    for name in (ENV_SLICED_GATE, ENV_IDENTIFY_BY_KUBELET):
        with pytest.raises(EnvironmentValueError, match=name):
            make_allocator([{"product": "NVIDIA A10G", "count": 1}], env={name: word})
    with pytest.raises(EnvironmentValueError, match=devices.ENV_GROUP_ID_WITH_MEMORY):
        devices.group_id_with_memory({devices.ENV_GROUP_ID_WITH_MEMORY: word})


def test_the_slice_gate_switched_off_allocates_past_the_fit() -> None:
    allocator = make_allocator(
        [{"product": "NVIDIA A10G", "count": 1}], env={"GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE": "false"}
    )
    slice80 = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 1_280_000}
    allocator.pod_event("ADDED", pod("a", slice80))
    allocator.pod_event("ADDED", pod("b", slice80))
    allocator.allocate(R["sliced"], tokens(allocator, "sliced", 0))
    over = allocator.allocate(R["sliced"], [tokens(allocator, "sliced", 0, 2)[1]])
    assert over.grants[0].units == 1_280_000 and row(allocator, 0)["remaining"] == 0


def test_the_health_stamp_moves_with_a_cards_mode_and_not_with_another_slice(h100: Allocator) -> None:
    """ListAndWatch streams rebuild their token health only when the stamp moves."""
    slice_ = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 16_000}
    for name in ("s1", "s2"):
        h100.pod_event("ADDED", pod(name, slice_))
    h100.pod_event("ADDED", pod("whole", {BASE: 1}))
    before = h100.health_stamp()
    h100.allocate(R["sliced"], tokens(h100, "sliced", 0))  # card 0 goes into slice mode
    first = h100.health_stamp()
    assert first != before
    h100.allocate(R["sliced"], [tk.token_id(h100.groups[0]["id"], h100.inventory.cards[0].id, 1)])
    assert h100.health_stamp() == first  # another slice on the same card: no token's health moved
    h100.allocate(R["exclusive"], tokens(h100, "exclusive", 1))
    assert h100.health_stamp() != first  # card 1 taken whole
    h100.set_inventory(h100.inventory, h100.groups)
    assert h100.health_stamp()[0] != first[0]  # new spec groups: card health may have moved


def test_the_allocate_that_follows_a_preference_reuses_its_kubelet_answer(monkeypatch) -> None:
    """The kubelet allocates the ids it was just preferred, for the same container: that
    ``Allocate`` identifies from the answer the preference asked (one pod-resources call per
    admission, not two); other ids, a second ``Allocate``, or an answer over a second old ask again."""
    from nodeplugins.devicemanager import allocator as module

    asked: list[str] = []
    waiting = {("team-a", "big", "main")}

    def lookup(resource: str, skip=()):
        asked.append(resource)
        return set(waiting)

    clock = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 2}], pod_resources=lookup)
    # Two sizes waiting: the preference needs the kubelet's answer to know which slice it serves.
    allocator.pod_event("ADDED", pod("small", {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 160_000}))
    allocator.pod_event("ADDED", pod("big", {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 960_000}))
    offered = [t for card in range(2) for t in tokens(allocator, "sliced", card, 3)]
    picked = allocator.preferred(R["sliced"], offered, [], 1)
    assert len(asked) == 1
    waiting.clear()  # an ask now would name nobody: only the kept answer names "big"
    assert allocator.allocate(R["sliced"], picked).pod == "big"
    assert len(asked) == 1
    # Used once: a second Allocate of the same ids asks (and, nobody named, falls back to "small").
    waiting.add(("team-a", "small", "main"))
    other = [t for t in offered if tk.parse_token(t)[1] != tk.parse_token(picked[0])[1]][:1]
    assert allocator.allocate(R["sliced"], other).pod == "small"
    assert len(asked) == 2


def test_a_kept_answer_is_not_used_for_other_ids_or_once_stale(monkeypatch) -> None:
    from nodeplugins.devicemanager import allocator as module

    asked: list[str] = []
    waiting = {("team-a", "a", "main"), ("team-a", "b", "main")}
    clock = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    allocator = make_allocator(
        [{"product": "NVIDIA A10G", "count": 2}],
        pod_resources=lambda r, skip=(): asked.append(r) or set(waiting),
    )
    allocator.pod_event("ADDED", pod("a", {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 160_000}))
    allocator.pod_event("ADDED", pod("b", {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 960_000}))
    offered = [t for card in range(2) for t in tokens(allocator, "sliced", card, 3)]
    picked = allocator.preferred(R["sliced"], offered, [], 1)
    other = [t for t in offered if t not in picked][:1]
    allocator.allocate(R["sliced"], other)  # not the preferred ids: asks afresh
    assert len(asked) == 2
    allocator.preferred(R["sliced"], offered, [], 1)
    picked = allocator.preferred(R["sliced"], offered, [], 1)
    assert len(asked) == 4
    clock[0] += module.FOLLOW_SECONDS + 0.5
    allocator.allocate(R["sliced"], picked)  # the preferred ids, but the answer is stale
    assert len(asked) == 5
