"""§6.5 reuse on retry: an ``Allocate`` the kubelet repeats for a container that already holds a
reservation (the earlier response was lost, or the kubelet restarted before recording it) gets the
same devices — and a retry never takes another pending container's turn, nor its cards."""

from __future__ import annotations

import pytest

from api import allocation
from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.allocator import Allocator, Refusal
from tests.unit.devicemanager.conftest import make_allocator, pod

BASE = "nvidia.com/gpu"
R = {r.family: r for r in tk.resources("nvidia")}
SLICE = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 480_000}
FAMILIES = [
    ("exclusive", {BASE: 1}, 1),
    ("shared", {f"{BASE}.shared": 2}, 2),
    ("sliced", SLICE, 1),
]


def offer(allocator: Allocator, cards: list[int], n: int = 0) -> list[str]:
    group = allocator.groups[0]["id"]
    return [tk.token_id(group, allocator.inventory.cards[c].id, n) for c in cards]


def rows(allocator: Allocator) -> dict:
    return {card_id: row for (_g, card_id), row in allocator.row_index().items()}


@pytest.fixture
def kubelet():
    """What the kubelet's pod-resources API lists as waiting (a test edits it)."""
    return set()


@pytest.fixture
def a4(kubelet) -> Allocator:
    return make_allocator([{"product": "NVIDIA A10G", "count": 4}], pod_resources=lambda _r, skip=(): kubelet)


@pytest.mark.parametrize(("family", "limits", "count"), FAMILIES)
def test_a_retry_the_kubelet_names_gets_the_same_devices(a4, kubelet, family, limits, count):
    a4.pod_event("ADDED", pod("p", limits))
    kubelet.add(("team-a", "p", "main"))
    tokens = offer(a4, list(range(count)))
    first = a4.allocate(R[family], tokens)
    before = rows(a4)
    again = a4.allocate(R[family], tokens)  # the kubelet never got the first response
    assert again is first and [g.card.id for g in again.grants] == [g.card.id for g in first.grants]
    assert rows(a4) == before  # charged once
    assert a4.record_for(first.uid) == {"main": first.groups}


@pytest.mark.parametrize(("family", "limits", "count"), FAMILIES)
def test_a_retry_without_the_kubelets_answer_is_recognised_by_its_cards(family, limits, count):
    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 4}])
    allocator.pod_event("ADDED", pod("p", limits))
    tokens = offer(allocator, list(range(count)))
    first = allocator.allocate(R[family], tokens)
    assert allocator.allocate(R[family], tokens) is first
    with pytest.raises(Refusal, match="cannot tell which container"):
        allocator.allocate(R[family], offer(allocator, [3]))  # other cards: not a retry of anyone


def test_a_retry_never_takes_another_pending_containers_turn(a4, kubelet):
    a4.pod_event("ADDED", pod("first", {BASE: 1}))
    kubelet.add(("team-a", "first", "main"))
    held = a4.allocate(R["exclusive"], offer(a4, [0]))
    a4.pod_event("ADDED", pod("second", {BASE: 1}))
    kubelet.add(("team-a", "second", "main"))  # both listed: "first"'s response is in flight
    other = a4.allocate(R["exclusive"], offer(a4, [1]))
    assert (held.pod, other.pod) == ("first", "second")
    assert {g.card.index for g in held.grants} | {g.card.index for g in other.grants} == {0, 1}


def test_a_retry_on_other_cards_moves_the_reservation_there(a4, kubelet):
    a4.pod_event("ADDED", pod("p", {BASE: 1}))
    kubelet.add(("team-a", "p", "main"))
    first = a4.allocate(R["exclusive"], offer(a4, [0]))
    moved = a4.allocate(R["exclusive"], offer(a4, [2]))
    assert moved.container == first.container and [g.card.index for g in moved.grants] == [2]
    by_card = rows(a4)
    assert by_card[a4.inventory.cards[0].id]["mode"] == 0 and by_card[a4.inventory.cards[2].id]["mode"] == 1
    a4.pod_event("ADDED", pod("q", {BASE: 1}))
    kubelet.discard(("team-a", "p", "main"))
    kubelet.add(("team-a", "q", "main"))
    with pytest.raises(Refusal, match="held in exclusive mode"):
        a4.allocate(R["exclusive"], offer(a4, [2]))  # the moved reservation holds card 2


def test_the_preference_of_a_retried_container_is_what_it_holds(a4, kubelet):
    a4.pod_event("ADDED", pod("p", SLICE))
    kubelet.add(("team-a", "p", "main"))
    first = a4.allocate(R["sliced"], offer(a4, [3], n=5))
    available = [t for c in range(4) for t in offer(a4, [c], n=7)]
    assert a4.preferred(R["sliced"], available, [], 1) == offer(a4, [3], n=7)
    assert a4.allocate(R["sliced"], offer(a4, [3], n=7)) is first


def test_a_restarted_agent_recognises_a_retry_of_a_recorded_reservation(kubelet):
    allocator = make_allocator(
        [{"product": "NVIDIA A10G", "count": 2}], pod_resources=lambda _r, skip=(): kubelet
    )
    p = pod("p", {BASE: 1})
    allocator.pod_event("ADDED", p)
    kubelet.add(("team-a", "p", "main"))
    first = allocator.allocate(R["exclusive"], offer(allocator, [1]))
    written = {
        **p,
        "metadata": {
            **p["metadata"],
            "annotations": {allocation.ANNOTATION: allocation.encode(allocator.record_for(first.uid))},
        },
    }
    fresh = make_allocator(
        [{"product": "NVIDIA A10G", "count": 2}], pod_resources=lambda _r, skip=(): kubelet
    )
    fresh.replace_pods([written])
    again = fresh.allocate(R["exclusive"], offer(fresh, [1]))
    assert [g.card.id for g in again.grants] == [g.card.id for g in first.grants]
    assert fresh.record_for(first.uid) == allocator.record_for(first.uid)


def test_callers_arriving_together_share_one_kubelet_answer_asked_after_they_came() -> None:
    """The kubelet is asked once for a batch of callers, never with an answer older than a caller."""
    import threading

    from nodeplugins.devicemanager.identify import Asked

    gate = threading.Event()
    calls: list[int] = []

    def lookup(_resource: str) -> set:
        calls.append(len(calls))
        if len(calls) == 1:
            gate.wait(5)  # the first answer is slow: the others arrive meanwhile
        return {("ns", f"answer-{len(calls)}", "main")}

    asked = Asked(lookup)
    answers: list = []
    first = threading.Thread(target=lambda: answers.append(asked("r")))
    first.start()
    while not calls:
        threading.Event().wait(0.01)
    later = [threading.Thread(target=lambda: answers.append(asked("r"))) for _ in range(5)]
    for thread in later:
        thread.start()
    while len(asked._cond._waiters) < len(later):  # all five wait on the answer being asked
        threading.Event().wait(0.01)
    gate.set()
    for thread in [first, *later]:
        thread.join()
    assert len(calls) == 2  # the slow one, then one for the five that arrived during it
    assert sorted(next(iter(a))[1] for a in answers) == ["answer-1"] + ["answer-2"] * 5


def test_a_reservation_the_kubelet_lists_with_its_devices_is_confirmed_and_not_read_again() -> None:
    waiting: set = set()
    skipped: list = []

    def kubelet(_resource: str, skip=()) -> set:
        skipped.append(set(skip))
        return set(waiting)

    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 4}], pod_resources=kubelet)
    allocator.pod_event("ADDED", pod("p", {BASE: 1}))
    allocator.pod_event("ADDED", pod("q", {BASE: 1}))
    waiting.add(("team-a", "p", "main"))
    held = allocator.allocate(R["exclusive"], offer(allocator, [0]))
    assert held.pod == "p" and ("team-a", "p") not in skipped[-1]
    waiting.clear()
    waiting.add(("team-a", "q", "main"))  # the kubelet now lists p with its devices
    assert allocator.allocate(R["exclusive"], offer(allocator, [1])).pod == "q"
    allocator.pod_event("ADDED", pod("r", {BASE: 1}))
    waiting.clear()
    waiting.add(("team-a", "r", "main"))
    allocator.allocate(R["exclusive"], offer(allocator, [2]))
    assert ("team-a", "p") in skipped[-1]  # confirmed: its Pod is not read any more
    assert ("team-a", "r") not in skipped[-1]


def test_a_slice_preference_asks_the_kubelet_only_when_the_waiting_slices_differ() -> None:
    """Whichever container the kubelet names, the preference reads the oldest pending one's size:
    when every waiting slice asks for the same size it is the same answer, so it is not asked."""
    asked: list[str] = []

    def kubelet(resource: str, skip=()) -> set:
        asked.append(resource)
        return {("team-a", "small", "main"), ("team-a", "alike", "main")}

    allocator = make_allocator([{"product": "NVIDIA A10G", "count": 2}], pod_resources=kubelet)
    small = {f"{BASE}.sliced": 1, f"{BASE}.sliced.units": 120_000}
    allocator.pod_event("ADDED", pod("small", small))
    allocator.pod_event("ADDED", pod("alike", small))
    available = [t for t, ok, _ in tk.devices_of(R["sliced"], allocator.groups, {}) if ok]
    alike = allocator.preferred(R["sliced"], available, [], 1)
    assert asked == []  # two waiting slices of one size: nothing to ask
    allocator.pod_event("ADDED", pod("large", SLICE))
    assert allocator.preferred(R["sliced"], available, [], 1) == alike  # the oldest is still "small"
    assert asked == [R["sliced"].name]  # sizes differ now: the kubelet's answer may name "large"
    held = allocator.allocate(R["sliced"], alike)
    assert held.pod == "small"  # the allocation itself always asks
