"""Gate 3's cache between decisions (controllers.nodedevices.fit.DecisionCache, fastpath.ledger's
LedgerCache and Book.first_fit): a decision with the cache is the decision without it, whatever
changed in between — a Pod added, removed or rewritten, a ``Devices`` status moved, a Node
relabelled or gone — and an unchanged node is answered without being rebuilt."""

from __future__ import annotations

import copy
import hashlib
import inspect

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api import allocation
from controllers.nodedevices import fit
from controllers.nodedevices.check import workloads_on
from controllers.nodedevices.fit_labels import WORKLOAD_INDEXES
from fastpath import fit as cards_fit
from fastpath import ledger
from fastpath.cards import Demand
from fastpath.pure import load
from kube.informer import Informer
from tests.unit import test_node_devices_fit as base
from tests.unit.test_node_devices_fit import (
    A10G,
    M,
    card,
    devices,
    flavor,
    gpu,
    node,
    pod_set,
    record_pod,
    slice_units,
    workload,
)

interpreted = load("ledger")


# --- Objects as the API server serves them: each carries a resourceVersion ----------------------------------


def stamped(obj: dict) -> dict:
    """A copy of ``obj`` whose resourceVersion follows its content (a write changes it)."""
    out = copy.deepcopy(obj)
    out.setdefault("metadata", {}).pop("resourceVersion", None)
    digest = hashlib.sha1(orjson.dumps(out, option=orjson.OPT_SORT_KEYS)).hexdigest()
    out["metadata"]["resourceVersion"] = digest[:16]
    return out


def stamp_all(objs: dict) -> dict:
    return {name: stamped(obj) for name, obj in objs.items()}


def pool_workload(cards: int = 4, count: int = 1) -> dict:
    return workload(
        pod_sets=[pod_set(count=count, limits=gpu(cards))], assignments=[base.assignment(count=count)]
    )


def exclusive_pod(name: str, node_name: str, cards: range) -> dict:
    entries = [allocation.accelerator_entry(card(node_name, i), i, 1) for i in cards]
    return stamped(record_pod(name, node_name, entries, limits=gpu(len(cards))))


class World:
    """Three 8-card nodes with stamped objects, judged with one cache and without."""

    def __init__(self) -> None:
        names = ("n1", "n2", "n3")
        self.nodes = {n: stamped(node(n)) for n in names}
        self.devices = {n: stamped(devices(n)) for n in names}
        self.flavors = {"rf": flavor()}
        self.pods: list[dict] = []
        self.cache = fit.DecisionCache()

    def judge(self, wl: dict, pods: list[dict] | None = None, **kw) -> fit.Verdict:
        listed = self.pods if pods is None else pods
        args = dict(flavors=self.flavors, nodes=self.nodes, devices=self.devices, **kw)
        want = fit.decide(wl, pods=copy.deepcopy(listed), **args)
        got = fit.decide(wl, pods=copy.deepcopy(listed), cache=self.cache, **args)
        assert got == want
        return got


def fill(world: World, *names: str) -> None:
    """Take five cards of each named node (four whole cards never fit there)."""
    for n in names:
        world.pods.append(exclusive_pod(f"{n}-busy", n, range(5)))


# --- Invalidation ----------------------------------------------------------------------------------------------


def test_an_unchanged_pool_is_answered_from_the_cache() -> None:
    world = World()
    fill(world, "n1", "n2", "n3")
    assert not world.judge(pool_workload()).ready
    built = world.cache.ledgers.builds
    for _ in range(3):
        assert not world.judge(pool_workload()).ready
    assert world.cache.ledgers.builds == built  # nothing rebuilt
    assert world.cache.ledgers.hits >= 9


def test_a_removed_pod_frees_its_node() -> None:
    world = World()
    fill(world, "n1", "n2", "n3")
    assert not world.judge(pool_workload()).ready
    world.pods = [p for p in world.pods if p["metadata"]["name"] != "n2-busy"]
    assert world.judge(pool_workload()).ready


def test_a_node_that_loses_one_of_its_pods_is_rebuilt_from_the_others() -> None:
    world = World()
    fill(world, "n1", "n2")
    world.pods += [exclusive_pod("n3-a", "n3", range(5)), exclusive_pod("n3-b", "n3", range(5, 6))]
    assert not world.judge(pool_workload()).ready
    world.pods = [p for p in world.pods if p["metadata"]["name"] != "n3-b"]  # the last of n3's
    assert not world.judge(pool_workload()).ready  # n3-a still holds five cards
    world.pods.append(exclusive_pod("n3-b", "n3", range(5, 6)))
    assert not world.judge(pool_workload()).ready
    world.pods = [p for p in world.pods if p["metadata"]["name"] != "n3-a"]  # the first of n3's
    assert world.judge(pool_workload()).ready


def test_every_pod_of_a_node_gone_frees_it() -> None:
    world = World()
    fill(world, "n1")
    world.devices = {"n1": world.devices["n1"]}
    world.nodes = {"n1": world.nodes["n1"]}
    assert not world.judge(pool_workload()).ready
    world.pods = []
    assert world.judge(pool_workload()).ready


def test_an_added_pod_takes_its_cards() -> None:
    world = World()
    fill(world, "n1", "n2")
    assert world.judge(pool_workload()).ready  # n3 is free
    world.pods.append(exclusive_pod("n3-new", "n3", range(2, 7)))
    assert not world.judge(pool_workload()).ready


def test_a_rewritten_pod_is_read_again() -> None:
    world = World()
    fill(world, "n1", "n2")
    world.pods.append(exclusive_pod("n3-busy", "n3", range(1)))
    assert world.judge(pool_workload()).ready
    # The same Pod, its record now naming five cards: a new resourceVersion.
    world.pods[-1] = exclusive_pod("n3-busy", "n3", range(5))
    assert not world.judge(pool_workload()).ready


def test_a_finished_pod_releases_its_cards() -> None:
    world = World()
    fill(world, "n1", "n2", "n3")
    assert not world.judge(pool_workload()).ready
    done = copy.deepcopy(world.pods[0])
    done["status"]["phase"] = "Succeeded"
    world.pods[0] = stamped(done)
    assert world.judge(pool_workload()).ready


def test_a_devices_status_that_moves_is_read_again() -> None:
    world = World()
    fill(world, "n1", "n2")
    assert world.judge(pool_workload()).ready
    rows = {i: {"mode": 1, "allocated": M, "remaining": 0} for i in range(6)}
    world.devices["n3"] = stamped(devices("n3", rows=rows))  # published before the Pod list shows it
    assert not world.judge(pool_workload()).ready
    world.devices["n3"] = stamped(devices("n3"))
    assert world.judge(pool_workload()).ready


def test_a_node_that_leaves_the_pool_or_the_cluster_is_not_judged() -> None:
    world = World()
    fill(world, "n1", "n2")
    assert world.judge(pool_workload()).ready  # on n3
    relabelled = copy.deepcopy(world.nodes["n3"])
    relabelled["metadata"]["labels"].pop(next(iter(world.flavors["rf"]["spec"]["nodeLabels"])))
    world.nodes["n3"] = stamped(relabelled)
    assert not world.judge(pool_workload()).ready
    world.nodes["n3"] = stamped(node("n3"))
    assert world.judge(pool_workload()).ready
    del world.nodes["n3"]
    assert not world.judge(pool_workload()).ready
    assert "none of the 2 nodes" in world.judge(pool_workload()).message


def test_a_one_node_pod_list_then_the_whole_list() -> None:
    """Under TAS the controller lists one node's Pods: the other nodes' ledgers stay as they were."""
    world = World()
    fill(world, "n1", "n2", "n3")
    assert not world.judge(pool_workload()).ready
    only_n1 = [p for p in world.pods if p["spec"]["nodeName"] == "n1"]
    tas = workload(pod_sets=[pod_set(limits=gpu(2))], assignments=[base.tas(n1=1)])
    assert world.judge(tas, pods=only_n1).ready
    assert not world.judge(pool_workload()).ready
    # A pod list that omits n3's Pods is judged as n3 being free, as without the cache.
    assert world.judge(pool_workload(), pods=[p for p in world.pods if p["spec"]["nodeName"] != "n3"]).ready


def test_objects_without_a_resource_version_are_never_cached() -> None:
    world = World()
    world.pods = [record_pod("p", "n1", [allocation.accelerator_entry(card("n1", 0), 0, 1)])]
    world.judge(pool_workload())
    built = world.cache.ledgers.builds
    world.judge(pool_workload())
    assert world.cache.ledgers.builds > built  # n1 is rebuilt: its Pod has no resourceVersion


def test_release_terminated_is_part_of_the_key() -> None:
    world = World()
    fill(world, "n1", "n2", "n3")
    for pod in world.pods:
        pod["status"]["phase"] = "Failed"
    world.pods = [stamped(p) for p in world.pods]
    assert world.judge(pool_workload()).ready
    assert not world.judge(pool_workload(), release_terminated=False).ready
    assert world.judge(pool_workload()).ready


def test_placements_and_inflight_charges_fall_on_copies_never_on_the_cached_ledger() -> None:
    world = World()
    fill(world, "n1", "n2")
    for _ in range(2):
        assert world.judge(pool_workload(cards=8)).ready  # placed on n3 (a copy) both times
    inflight = workload(
        "inflight", pod_sets=[pod_set(limits=gpu(5))], assignments=[base.tas(n3=1)], admitted=True
    )
    assert not world.judge(pool_workload(), others=[inflight]).ready  # n3: five cards promised
    assert world.judge(pool_workload(cards=8)).ready  # the promise gone: n3 is whole again


def test_an_inflight_workload_is_read_again_when_its_resource_version_moves() -> None:
    world = World()
    fill(world, "n1", "n2")

    def promise(cards: int, *, admitted: bool = True) -> dict:
        return stamped(
            workload(
                "inflight",
                pod_sets=[pod_set(limits=gpu(cards))],
                assignments=[base.tas(n3=1)],
                admitted=admitted,
            )
        )

    for _ in range(2):  # the second decision reads the promise from the cache, on fresh copies
        assert not world.judge(pool_workload(), others=[promise(5)]).ready
    assert world.judge(pool_workload(), others=[promise(4)]).ready  # rewritten: four cards promised
    assert world.judge(pool_workload(), others=[promise(5, admitted=False)]).ready  # no longer inflight
    assert not world.judge(pool_workload(), others=[promise(5)]).ready  # inflight again


def test_held_pods_are_counted_only_for_the_workloads_asked_about() -> None:
    pods = [
        record_pod("a", "n1", [allocation.accelerator_entry(card("n1", 0), 0, 1)], workload_name="wa"),
        record_pod("b", "n1", [allocation.accelerator_entry(card("n1", 1), 1, 1)], workload_name="wb"),
    ]
    everything = fit.held_pods(pods)
    assert fit.held_pods(pods, {(base.NS, "wa")}) == {k: v for k, v in everything.items() if k[1] == "wa"}


# --- Every scenario of test_node_devices_fit, judged through one shared cache ----------------------------------


def _plain(test) -> bool:
    return not inspect.signature(test).parameters and not hasattr(test, "pytestmark")


SCENARIOS = [
    getattr(base, n) for n in sorted(dir(base)) if n.startswith("test_") and _plain(getattr(base, n))
]
SHARED = fit.DecisionCache()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda t: t.__name__)
def test_the_fit_scenarios_judge_alike_through_a_shared_cache(scenario, monkeypatch) -> None:
    """Each decision of the scenario is made without a cache and with the one every scenario
    shares (the objects stamped with content-derived resourceVersions): same verdict."""
    decide = fit.decide

    def both(wl, *, flavors, nodes, devices, pods, others=(), **kw):
        want = decide(wl, flavors=flavors, nodes=nodes, devices=devices, pods=pods, others=others, **kw)
        got = decide(
            wl,
            flavors=flavors,
            nodes=stamp_all(nodes),
            devices=stamp_all(devices),
            pods=[stamped(p) for p in pods],
            others=others,
            cache=SHARED,
            **kw,
        )
        assert got == want
        return want

    monkeypatch.setattr(fit, "decide", both)
    scenario()


NEVER_FITS = [base.test_nine_whole_cards_on_eight_card_nodes_never_fit_and_the_message_names_the_shapes,
              base.test_a_profile_no_card_offers_never_fits]  # fmt: skip


@pytest.mark.parametrize("scenario", NEVER_FITS, ids=lambda t: t.__name__)
def test_never_fits_answers_alike_through_a_shared_pool_cache(scenario, monkeypatch) -> None:
    """``never_fits`` with the pools of earlier calls kept (the report controller's way) says
    what it says without them."""
    never_fits, cache = fit.never_fits, fit.DecisionCache()

    def both(wl, *, nodes, **kw):
        want = never_fits(wl, nodes=nodes, **kw)
        assert never_fits(wl, nodes=stamp_all(nodes), cache=cache, **kw) == want
        return want

    monkeypatch.setattr(fit, "never_fits", both)
    scenario()


# --- Random histories ------------------------------------------------------------------------------------------

NODES = ("n1", "n2", "n3")


@st.composite
def a_pod(draw, k: int) -> dict:
    node_name = draw(st.sampled_from(NODES))
    index = draw(st.integers(0, 7))
    kind = draw(st.sampled_from(["exclusive", "slice"]))
    if kind == "exclusive":
        entry = allocation.accelerator_entry(card(node_name, index), index, 1)
        limits = gpu(1)
    else:
        units = draw(st.sampled_from([320_000, 640_000, 960_000]))
        entry = allocation.accelerator_entry(card(node_name, index), index, 3, units, slices=1)
        limits = slice_units(units)
    pod = record_pod(f"p{k}", node_name, [entry], limits=limits)
    pod["status"]["phase"] = draw(st.sampled_from(["Running", "Running", "Succeeded"]))
    return stamped(pod)


@st.composite
def histories(draw) -> list[tuple[list[dict], dict]]:
    """Decisions in a row: each a Pod list and the Devices (some with a published status)."""
    steps = []
    pods: list[dict] = []
    for step in range(draw(st.integers(2, 6))):
        action = draw(st.sampled_from(["add", "add", "remove", "rewrite", "status", "same"]))
        if action == "add" or not pods:
            pods = sorted([*pods, draw(a_pod(step * 10 + len(pods)))], key=lambda p: p["metadata"]["name"])
        elif action == "remove":
            gone = draw(st.integers(0, len(pods) - 1))
            pods = [p for i, p in enumerate(pods) if i != gone]
        elif action == "rewrite":
            at = draw(st.integers(0, len(pods) - 1))
            fresh = draw(a_pod(0))
            fresh["metadata"]["name"] = pods[at]["metadata"]["name"]
            pods = [*pods[:at], stamped(fresh), *pods[at + 1 :]]
        busy = draw(st.sets(st.integers(0, 7), max_size=8)) if action == "status" else set()
        rows = {i: {"mode": 1, "allocated": M, "remaining": 0} for i in busy}
        devs = {n: stamped(devices(n, rows=rows if n == "n1" else None)) for n in NODES}
        steps.append((pods, devs))
    return steps


DEMANDS = [gpu(1), gpu(4), gpu(8), slice_units(640_000), slice_units(1_280_000)]


@settings(max_examples=60, deadline=None)
@given(histories(), st.lists(st.sampled_from(range(len(DEMANDS))), min_size=1, max_size=3))
def test_random_histories_judge_alike_with_and_without_the_cache(history, picks) -> None:
    cache = fit.DecisionCache()
    nodes = {n: stamped(node(n)) for n in NODES}
    for pods, devs in history:
        for pick in picks:
            wl = workload(
                pod_sets=[pod_set(count=2, limits=DEMANDS[pick])], assignments=[base.assignment(count=2)]
            )
            args = dict(flavors={"rf": flavor()}, nodes=nodes, devices=devs)
            want = fit.decide(wl, pods=pods, **args)
            assert fit.decide(wl, pods=pods, cache=cache, **args) == want


# --- fastpath.ledger: compiled == interpreted ------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(histories())
def test_the_ledger_cache_builds_what_the_book_builds_compiled_and_interpreted(history) -> None:
    caches = [ledger.LedgerCache(), interpreted.LedgerCache()]
    demand = Demand("exclusive", "nvidia", "nvidia.com/gpu", 2, M)
    for pods, devs in history:
        by_node = {n: [p for p in pods if p["spec"]["nodeName"] == n] for n in NODES}
        want = [ledger.Book(devs, by_node).ledger(n, A10G.group).as_tuple() for n in NODES]
        for module, cache in zip((ledger, interpreted), caches, strict=True):
            claimed = cache.index(pods, devs, True)
            assert claimed == []  # no Pod names a Workload
            book = module.Book(devs, {}, cache=cache)
            fits = [book.fits(n, A10G.group, demand) for n in NODES]
            assert [book.ledger(n, A10G.group).as_tuple() for n in NODES] == want
            fit_module = cards_fit if module is ledger else load("fit")
            assert fits == [fit_module.fits(book.ledger(n, A10G.group), demand) for n in NODES]
            assert module.Book(devs, {}, cache=cache).first_fit(list(NODES), 0, A10G.group, demand) == (
                fits.index(True) if True in fits else -1
            )


def test_bound_pods_groups_by_node_and_keeps_the_workloads_pods() -> None:
    pods = [
        record_pod("a", "n1", [], workload_name="w"),
        record_pod("b", "n2", []),
        {"metadata": {"name": "unbound"}, "spec": {}},
        record_pod("c", "n1", []),
    ]
    for module in (ledger, interpreted):
        by_node, claimed = module.bound_pods(pods)
        assert by_node == {"n1": [pods[0], pods[3]], "n2": [pods[1]]}
        assert claimed == [pods[0]]


# --- Partial mode: the Pods asked of a cache (the controller's Pod informer) -------------------------------------


class Source:
    """A Pod cache as the controller's informer serves it: a node's Pods and a Workload's, and which
    nodes' Pods moved since the last time it was asked (as the informer's events mark them)."""

    def __init__(self) -> None:
        self.by_node: dict[str, list[dict]] = {}
        self.asked: list[str] = []

    def set(self, pods: list[dict]) -> set[str]:
        """Serve ``pods`` from now on; returns the nodes whose Pods moved."""
        before = self.by_node
        self.by_node = {}
        for pod in pods:
            self.by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
        return {
            n
            for n in before.keys() | self.by_node.keys()
            if [p["metadata"].get("resourceVersion") for p in before.get(n, [])]
            != [p["metadata"].get("resourceVersion") for p in self.by_node.get(n, [])]
        }

    def node_pods(self, node_name: str) -> list[dict]:
        self.asked.append(node_name)
        return list(self.by_node.get(node_name, ()))

    def workload_pods(self, namespace: str, name: str) -> list[dict]:
        return [
            p
            for pods in self.by_node.values()
            for p in pods
            if p["metadata"]["namespace"] == namespace
            and p["metadata"]["annotations"].get("kueue.x-k8s.io/workload") == name
        ]


def test_partial_mode_reads_only_the_nodes_that_changed() -> None:
    world = World()
    fill(world, "n1", "n2", "n3")
    source = Source()
    changed = source.set(world.pods)
    args = dict(flavors=world.flavors, nodes=world.nodes, devices=world.devices)
    verdict = fit.decide(pool_workload(), source=source, changed=changed, cache=world.cache, **args)
    assert not verdict.ready and sorted(source.asked) == ["n1", "n2", "n3"]  # first time: every node
    source.asked.clear()
    for _ in range(3):  # nothing moved: nothing read, nothing rebuilt
        built = world.cache.ledgers.builds
        assert not fit.decide(pool_workload(), source=source, changed=(), cache=world.cache, **args).ready
        assert source.asked == [] and world.cache.ledgers.builds == built
    changed = source.set([p for p in world.pods if p["metadata"]["name"] != "n2-busy"])
    assert changed == {"n2"}
    verdict = fit.decide(pool_workload(), source=source, changed=changed, cache=world.cache, **args)
    assert verdict.ready and verdict.nodes == ("n2",)
    assert source.asked == ["n2"]


def test_a_stale_cache_cannot_make_a_ready_verdict_overbook() -> None:
    """The cache shows n1 free, but its Pods already took it: the Ready is confirmed on an uncached
    read of every node it places on, and the Pods land where the cards are free."""
    world = World()
    fill(world, "n2")
    source = Source()
    changed = source.set(list(world.pods))  # the cache has not seen n1's new Pod yet
    world.pods.append(exclusive_pod("n1-new", "n1", range(5)))
    reads: list[str] = []

    def read_node(name: str) -> list[dict]:
        reads.append(name)
        return [copy.deepcopy(p) for p in world.pods if p["spec"]["nodeName"] == name]

    verdict, fresh = fit.decide_confirmed(
        pool_workload(),
        source=source,
        changed=changed,
        read_node=read_node,
        read_all=lambda: pytest.fail("no list of every Pod needed"),
        cache=world.cache,
        flavors=world.flavors,
        nodes=world.nodes,
        devices=world.devices,
    )
    assert verdict.ready and verdict.nodes == ("n3",)
    assert reads == ["n1", "n3"] and fresh == ["n1", "n3"]
    # What the uncached decision says.
    assert world.judge(pool_workload()) == verdict


def test_a_retry_from_the_cache_reads_nothing_and_a_wide_ready_lists_every_pod() -> None:
    world = World()
    fill(world, "n1", "n2", "n3")
    source = Source()
    changed = source.set(world.pods)
    args = dict(flavors=world.flavors, nodes=world.nodes, devices=world.devices, cache=world.cache)
    fail = lambda *_: pytest.fail("a Retry reads nothing uncached")  # noqa: E731
    verdict, fresh = fit.decide_confirmed(
        pool_workload(), source=source, changed=changed, read_node=fail, read_all=fail, **args
    )
    assert not verdict.ready and fresh == []
    # Five Pods of three cards each, spread over more nodes than are read one by one: one list.
    world.pods = []
    source.set([])
    listed: list[int] = []

    def read_all() -> list[dict]:
        listed.append(1)
        return copy.deepcopy(world.pods)

    many = {f"m{i}": stamped(node(f"m{i}")) for i in range(6)}
    world.nodes, world.devices = many, {n: stamped(devices(n)) for n in many}
    args.update(nodes=world.nodes, devices=world.devices)
    verdict, _ = fit.decide_confirmed(
        pool_workload(cards=8, count=6),
        source=source,
        changed=(),
        read_node=lambda n: [],
        read_all=read_all,
        **args,
    )
    assert verdict.ready and len(verdict.nodes) == 6 and listed == [1]


@settings(max_examples=60, deadline=None)
@given(histories(), st.lists(st.sampled_from(range(len(DEMANDS))), min_size=1, max_size=3), st.data())
def test_random_histories_judge_alike_from_a_source_and_from_a_list(history, picks, data) -> None:
    """Partial mode (only the changed nodes re-read), alternating with full lists on the same cache,
    judges as the uncached decision does."""
    cache = fit.DecisionCache()
    source = Source()
    nodes = {n: stamped(node(n)) for n in NODES}
    pending: set[str] = set()
    for pods, devs in history:
        pending |= source.set(pods)
        for pick in picks:
            wl = workload(
                pod_sets=[pod_set(count=2, limits=DEMANDS[pick])], assignments=[base.assignment(count=2)]
            )
            args = dict(flavors={"rf": flavor()}, nodes=nodes, devices=devs)
            want = fit.decide(wl, pods=pods, **args)
            if data.draw(st.booleans()):
                got = fit.decide(wl, source=source, changed=pending, cache=cache, **args)
            else:
                got = fit.decide(wl, pods=pods, cache=cache, **args)
            pending = set()
            assert got == want


@settings(max_examples=40, deadline=None)
@given(histories())
def test_partial_mode_builds_what_the_book_builds_compiled_and_interpreted(history) -> None:
    caches = [ledger.LedgerCache(), interpreted.LedgerCache()]
    source = Source()
    for pods, devs in history:
        changed = source.set(pods)
        by_node = {n: [p for p in pods if p["spec"]["nodeName"] == n] for n in NODES}
        want = [ledger.Book(devs, by_node).ledger(n, A10G.group).as_tuple() for n in NODES]
        for module, cache in zip((ledger, interpreted), caches, strict=True):
            cache.use(source.node_pods, changed, True)
            book = module.Book(devs, {}, cache=cache)
            assert [book.ledger(n, A10G.group).as_tuple() for n in NODES] == want


@settings(max_examples=60, deadline=None)
@given(
    histories(),
    st.lists(
        st.tuples(st.sampled_from(NODES), st.sampled_from(range(len(DEMANDS))), st.booleans()), max_size=4
    ),
    st.sampled_from(NODES),
    st.sampled_from(range(len(DEMANDS))),
)
def test_charging_only_the_inflight_workloads_on_the_judged_nodes_changes_no_verdict(
    history, promised, target, pick
) -> None:
    """A Workload assigned nodes reads only their ledgers, so the inflight Workloads assigned
    elsewhere are not charged (``near_only``): the verdict is the one that charges every one."""
    nodes = {n: stamped(node(n)) for n in NODES}
    others = [
        stamped(
            workload(
                f"other-{i}",
                [pod_set(limits=DEMANDS[d])],
                [base.tas(**{at: 1})],
                check="Ready" if ready else "Pending",
                admitted=not ready,
            )
        )
        for i, (at, d, ready) in enumerate(promised)
    ]
    judged = workload(pod_sets=[pod_set(limits=DEMANDS[pick])], assignments=[base.tas(**{target: 1})])
    cache = fit.DecisionCache()
    promises = promised_by_index(others)
    for pods, devs in history:
        args = dict(flavors={"rf": flavor()}, nodes=nodes, devices=devs, pods=pods, others=others)
        want = fit.decide(judged, near_only=False, **args)
        assert fit.decide(judged, **args) == want
        assert fit.decide(judged, cache=cache, **args) == want
        # The controller's way: the other Workloads asked of the Workload cache's node index.
        del args["others"]
        assert fit.decide(judged, cache=cache, promises=promises, **args) == want


def promised_by_index(workloads: list[dict]):
    """``decide``'s ``promises`` over an informer holding ``workloads``, indexed as gate 3's is."""
    cache = Informer(None, "Workload", indexes=WORKLOAD_INDEXES)  # type: ignore[arg-type]
    for obj in workloads:
        cache._store("ADDED", obj)

    return lambda near: workloads_on(cache, near)
