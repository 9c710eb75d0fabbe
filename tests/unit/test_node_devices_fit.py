"""controllers.nodedevices.fit: gate 3's per-card verdict (devices spec §6.3, §11 items 9-15)."""

from __future__ import annotations

import copy

import pytest

from api import allocation, constants
from controllers.nodedevices import fit
from nodeplugins.devicemanager import simulated as sim

M = 1_600_000
A10G = sim.PRODUCTS["NVIDIA A10G"]
H100 = sim.PRODUCTS["NVIDIA H100 80GB HBM3"]
CREDITS = "credits.gpustack.ai/nvidia"
NS = "team-a"


# --- Objects ---------------------------------------------------------------------------------------------


def node(name: str, product=A10G, count: int = 8) -> dict:
    labels = sim.node_labels(name, product, count)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def flavor(name: str = "rf", product=A10G, count: int = 8) -> dict:
    labels = sim.node_labels("x", product, count)
    labels.pop(constants.LABEL_HOSTNAME)
    keep = (
        constants.LABEL_OS,
        constants.LABEL_ARCH,
        constants.LABEL_MANAGED,
        constants.LABEL_TOPOLOGY_PROFILE,
    )
    node_labels = {k: v for k, v in labels.items() if k in keep}
    node_labels[constants.label_accelerator_group(product.group)] = "true"
    node_labels[constants.label_accelerator_count(product.group)] = str(count)
    node_labels[constants.label_general_group("generic")] = "true"
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": node_labels},
    }


def devices(
    name: str, product=A10G, count: int = 8, *, partitioned: bool = False, rows: dict | None = None
) -> dict:
    """Simulated Devices; ``rows`` maps card index -> ledger row overrides in status."""
    obj = sim.devices(name, product, count, partitioned=partitioned)
    for i, override in (rows or {}).items():
        obj["status"]["groups"][0]["accelerators"][i].update(override)
    return obj


def sliced_half(count: int = 8) -> dict:
    return {
        i: {"mode": 3, "allocated": M // 2, "remaining": M // 2, "allocatedSlices": 1} for i in range(count)
    }


def container(name: str = "main", limits: dict | None = None) -> dict:
    return {"name": name, "image": "x", "resources": {"limits": limits or {}}}


def gpu(n: int) -> dict:
    return {"nvidia.com/gpu": str(n)}


def slice_units(units: int) -> dict:
    return {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": str(units)}


def shared(n: int) -> dict:
    return {"nvidia.com/gpu.shared": str(n)}


def partition(profile: str, units: int = 785_000) -> dict:
    return {
        "nvidia.com/gpu.partitioned": "1",
        f"nvidia.com/gpu.partitioned.mig-{profile}": "1",
        "nvidia.com/gpu.partitioned.units": str(units),
    }


def pod_set(
    name: str = "main", count: int = 1, limits: dict | None = None, labels: dict | None = None
) -> dict:
    return {
        "name": name,
        "count": count,
        "template": {
            "metadata": {"labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits or {}}}]},
        },
    }


def assignment(name: str = "main", count: int = 1, rf: str = "rf", nodes: dict | None = None) -> dict:
    out: dict = {"name": name, "count": count, "flavors": {"cpu": rf, CREDITS: rf}}
    if nodes is not None:
        out["topologyAssignment"] = {
            "levels": [constants.LABEL_HOSTNAME],
            "slices": [
                {
                    "domainCount": len(nodes),
                    "valuesPerLevel": [{"individual": {"roots": list(nodes)}}],
                    "podCounts": {"individual": list(nodes.values())},
                }
            ],
        }
    return out


def workload(
    name: str = "wl",
    pod_sets: list | None = None,
    assignments: list | None = None,
    *,
    check: str = "Pending",
    admitted: bool = False,
    evicted: bool = False,
    reserved: bool = True,
) -> dict:
    conditions = []
    if reserved:
        conditions.append({"type": "QuotaReserved", "status": "True"})
    if admitted:
        conditions.append({"type": "Admitted", "status": "True"})
    if evicted:
        conditions.append({"type": "Evicted", "status": "True"})
    status: dict = {
        "conditions": conditions,
        "admissionChecks": [{"name": fit.CHECK, "state": check, "message": ""}],
    }
    if reserved:
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": assignments or [assignment()]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"podSets": pod_sets or [pod_set(limits=gpu(1))]},
        "status": status,
    }


def record_pod(
    name: str,
    node_name: str,
    entries: list[dict],
    *,
    limits: dict | None = None,
    group: str = A10G.group,
    workload_name: str = "",
    podset: str = "main",
    phase: str = "Running",
) -> dict:
    meta: dict = {
        "name": name,
        "namespace": NS,
        "annotations": {
            allocation.ANNOTATION: allocation.encode(
                {"main": [{"id": group, "manufacturer": "nvidia", "accelerators": entries}]}
            )
        },
        "labels": {},
    }
    if workload_name:
        meta["annotations"][constants.KUEUE_WORKLOAD] = workload_name
        meta["labels"][constants.KUEUE_PODSET] = podset
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node_name, "containers": [container("main", limits or gpu(1))]},
        "status": {"phase": phase},
    }


def card(node_name: str, i: int, product=A10G) -> str:
    return f"{node_name}-{product.group}-{i}"


def judge(wl: dict, *, nodes=None, devs=None, pods=(), others=(), flavors=None, **kw) -> fit.Verdict:
    nodes = nodes if nodes is not None else {"n1": node("n1")}
    devs = devs if devs is not None else {"n1": devices("n1")}
    flavors = flavors if flavors is not None else {"rf": flavor()}
    return fit.decide(wl, flavors=flavors, nodes=nodes, devices=devs, pods=pods, others=others, **kw)


def tas(name: str = "main", count: int = 1, **nodes: int) -> dict:
    return assignment(name, count, nodes=nodes or {"n1": count})


# --- Which Workloads are judged -----------------------------------------------------------------------------


def test_only_reserved_live_not_ready_workloads_are_judged() -> None:
    assert fit.needs_verdict(workload())
    assert not fit.needs_verdict(workload(reserved=False))
    assert not fit.needs_verdict(workload(evicted=True))
    assert not fit.needs_verdict(workload(check="Ready"))
    assert fit.needs_verdict(workload(check="Retry"))
    other = workload()
    other["status"]["admissionChecks"][0]["name"] = "something-else"
    assert not fit.needs_verdict(other)


def test_inflight_is_admitted_or_ready_here_and_live() -> None:
    assert fit.is_inflight(workload(admitted=True))
    assert fit.is_inflight(workload(check="Ready"))
    assert not fit.is_inflight(workload())
    assert not fit.is_inflight(workload(check="Ready", evicted=True))
    assert not fit.is_inflight(workload(check="Ready", reserved=False))


# --- The motivating case -------------------------------------------------------------------------------------


def test_eight_half_sliced_cards_hold_four_whole_cards_and_name_the_podset() -> None:
    wl = workload(pod_sets=[pod_set(limits=gpu(4))], assignments=[tas()])
    verdict = judge(wl, devs={"n1": devices("n1", rows=sliced_half())})
    assert verdict.state == "Retry"
    assert 'PodSet "main"' in verdict.message
    assert "4 whole nvidia-a10g cards" in verdict.message
    assert "0 of 8 cards whole and free" in verdict.message


def test_freeing_the_cards_makes_it_ready() -> None:
    wl = workload(pod_sets=[pod_set(limits=gpu(4))], assignments=[tas()])
    rows = sliced_half()
    for i in range(4):
        rows[i] = {"mode": 0, "allocated": 0, "remaining": M, "allocatedSlices": 0}
    assert judge(wl, devs={"n1": devices("n1", rows=rows)}).state == "Ready"


def test_the_ledger_is_rebuilt_from_bound_pods_records() -> None:
    wl = workload(pod_sets=[pod_set(limits=gpu(4))], assignments=[tas()])
    slices = [
        record_pod(
            f"p{i}",
            "n1",
            [allocation.accelerator_entry(card("n1", i), i, 3, M // 2, slices=1)],
            limits=slice_units(M // 2),
        )
        for i in range(8)
    ]
    # The published status still shows every card free: the Pods' records decide.
    assert judge(wl, pods=slices).state == "Retry"
    assert judge(wl, pods=slices[:4]).state == "Ready"
    # Pods bound elsewhere do not charge this node's cards.
    elsewhere = copy.deepcopy(slices)
    for pod in elsewhere:
        pod["spec"]["nodeName"] = "n2"
    assert judge(wl, pods=elsewhere).state == "Ready"


def test_finished_pods_release_cards_unless_told_not_to() -> None:
    wl = workload(pod_sets=[pod_set(limits=gpu(8))], assignments=[tas()])
    done = [record_pod("done", "n1", [allocation.accelerator_entry(card("n1", 0), 0, 1)], phase="Succeeded")]
    assert judge(wl, pods=done).state == "Ready"
    assert judge(wl, pods=done, release_terminated=False).state == "Retry"


# --- Per-card predicates ----------------------------------------------------------------------------------------


def one_card() -> dict:
    return {"n1": devices("n1", count=1)}


def test_two_30_percent_slices_share_a_card_two_60_do_not() -> None:
    for pct, state in ((30, "Ready"), (60, "Retry")):
        wl = workload(
            pod_sets=[pod_set(count=2, limits=slice_units(pct * 16_000))], assignments=[tas(count=2)]
        )
        verdict = judge(
            wl, nodes={"n1": node("n1", count=1)}, devs=one_card(), flavors={"rf": flavor(count=1)}
        )
        assert verdict.state == state, (pct, verdict)
    assert "largest free slice 640000 units" in verdict.message
    assert "(1 of 2 Pods placed)" in verdict.message


def test_shared_needs_n_distinct_cards_on_one_node() -> None:
    two = {"n1": devices("n1", count=2)}
    flavors, nodes = {"rf": flavor(count=2)}, {"n1": node("n1", count=2)}
    ok = workload(pod_sets=[pod_set(limits=shared(2))], assignments=[tas()])
    assert judge(ok, nodes=nodes, devs=two, flavors=flavors).state == "Ready"
    too_many = workload(pod_sets=[pod_set(limits=shared(3))], assignments=[tas()])
    verdict = judge(too_many, nodes=nodes, devs=two, flavors=flavors)
    assert verdict.state == "Retry" and "a share on 3 distinct nvidia-a10g cards" in verdict.message
    one_taken = {"n1": devices("n1", count=2, rows={0: {"mode": 1, "allocated": M, "remaining": 0}})}
    assert judge(ok, nodes=nodes, devs=one_taken, flavors=flavors).state == "Retry"


def h100(rows: dict | None = None, count: int = 1) -> dict:
    return {"n1": devices("n1", H100, count, partitioned=True, rows=rows)}


H100_FLAVOR = {"rf": flavor(product=H100, count=1)}
H100_NODES = {"n1": node("n1", H100, 1)}


def test_a_partition_needs_a_free_legal_placement() -> None:
    wl = workload(pod_sets=[pod_set(limits=partition("3g.40gb"))], assignments=[tas()])
    assert judge(wl, nodes=H100_NODES, devs=h100(), flavors=H100_FLAVOR).state == "Ready"
    entry = lambda start: allocation.accelerator_entry(  # noqa: E731
        card("n1", 0, H100), 0, 4, 785_000, profile="3g.40gb", placements=[(start, 4)]
    )
    full = [
        record_pod(f"p{s}", "n1", [entry(s)], limits=partition("3g.40gb"), group=H100.group) for s in (0, 4)
    ]
    verdict = judge(wl, nodes=H100_NODES, devs=h100(), flavors=H100_FLAVOR, pods=full)
    assert verdict.state == "Retry"
    assert "0 free placement(s) of 3g.40gb" in verdict.message
    # Half the card still takes a 1g.10gb instance.
    small = workload(pod_sets=[pod_set(limits=partition("1g.10gb", 190_000))], assignments=[tas()])
    assert judge(small, nodes=H100_NODES, devs=h100(), flavors=H100_FLAVOR, pods=full[:1]).state == "Ready"


def test_non_partition_demands_never_match_partitioned_cards() -> None:
    for limits in (gpu(1), shared(1), slice_units(16_000)):
        wl = workload(pod_sets=[pod_set(limits=limits)], assignments=[tas()])
        verdict = judge(wl, nodes=H100_NODES, devs=h100(), flavors=H100_FLAVOR)
        assert verdict.state == "Retry", limits
        assert "no unpartitioned card" in verdict.message


# --- Nodes -------------------------------------------------------------------------------------------------------


def two_nodes(rows_b: dict | None = None) -> tuple[dict, dict]:
    return (
        {"n1": node("n1"), "n2": node("n2")},
        {"n1": devices("n1"), "n2": devices("n2", rows=rows_b)},
    )


def test_under_tas_each_assigned_node_hosts_its_own_share() -> None:
    taken = {i: {"mode": 1, "allocated": M, "remaining": 0} for i in range(6)}
    nodes, devs = two_nodes(taken)  # n2 keeps 2 free cards; the pool still has 10
    wl = workload(pod_sets=[pod_set(count=2, limits=gpu(4))], assignments=[tas(count=2, n1=1, n2=1)])
    verdict = judge(wl, nodes=nodes, devs=devs)
    assert verdict.state == "Retry" and "node n2" in verdict.message
    wl = workload(pod_sets=[pod_set(count=2, limits=gpu(4))], assignments=[tas(count=2, n1=2)])
    assert judge(wl, nodes=nodes, devs=devs).state == "Ready"


def test_without_a_hostname_assignment_the_flavor_pool_is_judged() -> None:
    full = {i: {"mode": 1, "allocated": M, "remaining": 0} for i in range(8)}
    nodes = {"n1": node("n1"), "n2": node("n2"), "other": node("other", H100, 8)}
    devs = {"n1": devices("n1", rows=full), "n2": devices("n2")}
    wl = workload(pod_sets=[pod_set(count=2, limits=gpu(4))], assignments=[assignment(count=2)])
    verdict = judge(wl, nodes=nodes, devs=devs)
    assert verdict.state == "Ready" and "node pool" in verdict.message
    wl3 = workload(pod_sets=[pod_set(count=3, limits=gpu(4))], assignments=[assignment(count=3)])
    verdict = judge(wl3, nodes=nodes, devs=devs)
    assert verdict.state == "Retry"
    assert 'none of the 2 nodes of ResourceFlavor "rf" can host 4 whole' in verdict.message
    assert "(2 of 3 Pods placed)" in verdict.message


def test_a_gone_node_holds_the_workload() -> None:
    wl = workload(assignments=[tas(n9=1)])
    verdict = judge(wl)
    assert verdict.state == "Retry" and "node n9 that Kueue assigned is gone" in verdict.message


def test_a_node_without_a_ledger_holds_the_workload() -> None:
    verdict = judge(workload(assignments=[tas()]), devs={})
    assert verdict.state == "Retry" and "no nvidia-a10g cards" in verdict.message


def test_a_flavor_that_names_no_single_model_holds_the_workload() -> None:
    bad = flavor()
    bad["spec"]["nodeLabels"] = {constants.LABEL_OS: "linux"}
    verdict = judge(workload(assignments=[tas()]), flavors={"rf": bad})
    assert verdict.state == "Retry" and "not resolvable to one accelerator flavor" in verdict.message
    verdict = judge(workload(assignments=[tas()]), flavors={})
    assert verdict.state == "Retry" and "not observed yet" in verdict.message


def test_a_podset_without_accelerators_is_ready() -> None:
    wl = workload(pod_sets=[pod_set(limits={"cpu": "1"})], assignments=[tas()])
    assert judge(wl).state == "Ready"


# --- Inflight ---------------------------------------------------------------------------------------------------


def test_inflight_workloads_are_counted_so_two_cannot_take_the_same_cards() -> None:
    first = workload("first", [pod_set(limits=gpu(4))], [tas()], check="Ready")
    second = workload("second", [pod_set(limits=gpu(5))], [tas()])
    assert judge(second).state == "Ready"
    verdict = judge(second, others=[first])
    assert verdict.state == "Retry" and "4 of 8 cards whole and free" in verdict.message
    # Admitted counts too; evicted, unreserved and merely pending Workloads do not.
    assert (
        judge(second, others=[workload("first", [pod_set(limits=gpu(4))], [tas()], admitted=True)]).state
        == "Retry"
    )
    for idle in (
        workload("first", [pod_set(limits=gpu(4))], [tas()], check="Ready", evicted=True),
        workload("first", [pod_set(limits=gpu(4))], [tas()]),
        workload("first", [pod_set(limits=gpu(4))], [assignment()], check="Ready"),  # no hostname level
    ):
        assert judge(second, others=[idle]).state == "Ready"
    # The judged Workload itself is never inflight against itself.
    assert judge(second, others=[second | {"status": first["status"]}]).state == "Ready"


def test_held_pods_of_an_inflight_workload_are_not_counted_twice() -> None:
    first = workload("first", [pod_set(count=2, limits=gpu(2))], [tas(count=2)], admitted=True)
    pods = [
        record_pod(
            "first-0",
            "n1",
            [allocation.accelerator_entry(card("n1", i), i, 1) for i in (0, 1)],
            limits=gpu(2),
            workload_name="first",
        )
    ]
    # One of first's Pods holds two cards, the other is still inflight: 4 of 8 cards are spoken for.
    assert (
        judge(workload("second", [pod_set(limits=gpu(4))], [tas()]), pods=pods, others=[first]).state
        == "Ready"
    )
    assert (
        judge(workload("second", [pod_set(limits=gpu(5))], [tas()]), pods=pods, others=[first]).state
        == "Retry"
    )
    # A Pod whose record misses an accelerator container is not held: its Workload still counts it
    # as inflight, on top of the cards its partial record charges (2 + 2 × 2 of 8).
    unheld = copy.deepcopy(pods)
    unheld[0]["spec"]["containers"].append(container("extra", gpu(1)))
    second = lambda n: workload("second", [pod_set(limits=gpu(n))], [tas()])  # noqa: E731
    assert judge(second(2), pods=unheld, others=[first]).state == "Ready"
    assert judge(second(3), pods=unheld, others=[first]).state == "Retry"


def test_inflight_slices_pack_where_the_allocator_would() -> None:
    first = workload("first", [pod_set(limits=slice_units(480_000))], [tas()], check="Ready")
    # first's 30 % slice lands on the fullest card that fits: card 0 holds 50 %, so 30 % joins it.
    rows = {0: {"mode": 3, "allocated": M // 2, "remaining": M // 2, "allocatedSlices": 1}}
    devs = {"n1": devices("n1", rows=rows)}
    second = workload("second", [pod_set(limits=gpu(7))], [tas()])
    assert judge(second, devs=devs, others=[first]).state == "Ready"


# --- Several PodSets --------------------------------------------------------------------------------------------


def test_the_per_card_budget_is_global_to_the_workload_and_the_starved_role_is_named() -> None:
    wl = workload(
        pod_sets=[
            pod_set("prefill", limits=gpu(4), labels={constants.LABEL_ROLE_KIND: "prefill"}),
            pod_set("decode", limits=gpu(5), labels={constants.LABEL_ROLE_KIND: "decode"}),
        ],
        assignments=[tas("prefill"), tas("decode")],
    )
    verdict = judge(wl)
    assert verdict.state == "Retry"
    assert 'role "decode" (PodSet "decode")' in verdict.message


def test_pods_of_the_judged_workload_already_held_are_not_charged_twice() -> None:
    wl = workload("me", [pod_set(count=2, limits=gpu(4))], [tas(count=2)])
    mine = [
        record_pod(
            "me-0",
            "n1",
            [allocation.accelerator_entry(card("n1", i), i, 1) for i in range(4)],
            limits=gpu(4),
            workload_name="me",
        )
    ]
    assert judge(wl, pods=mine).state == "Ready"


# --- Topology assignments ---------------------------------------------------------------------------------------


def test_hostname_counts_decode_kueues_compressed_slices() -> None:
    assignment_ = {
        "levels": ["cloud.provider.com/block", constants.LABEL_HOSTNAME],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"universal": "b1"},
                    {"individual": {"prefix": "node-", "roots": ["1", "2"]}},
                ],
                "podCounts": {"universal": 3},
            },
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "b2"}, {"universal": "gpu-9"}],
                "podCounts": {"individual": [2]},
            },
        ],
    }
    assert fit.hostname_counts(assignment_) == {"node-1": 3, "node-2": 3, "gpu-9": 2}
    assert fit.hostname_counts({"levels": ["rack"], "slices": []}) is None
    assert fit.hostname_counts(None) is None
    legacy = {"levels": [constants.LABEL_HOSTNAME], "domains": [{"values": ["a"], "count": 2}]}
    assert fit.hostname_counts(legacy) == {"a": 2}


def test_accelerator_groups_of_a_flavor() -> None:
    assert fit.accelerator_groups(flavor()) == [A10G.group]
    with_marker = flavor()
    with_marker["spec"]["nodeLabels"][constants.PREFIX_ACCELERATABLE + "nvidia"] = "true"
    assert fit.accelerator_groups(with_marker) == [A10G.group]


@pytest.mark.parametrize("state", ["Ready", "Retry"])
def test_verdict_carries_state(state: str) -> None:
    assert fit.Verdict(state, "m").ready is (state == "Ready")


# --- A demand no node of the pool can ever host -------------------------------------------------------------------


def test_nine_whole_cards_on_eight_card_nodes_never_fit_and_the_message_names_the_shapes() -> None:
    nodes = {"n1": node("n1"), "n2": node("n2")}
    # What is free now comes from the nodes' fit labels (the ledger less live reservations).
    for name, free in (("n1", "6"), ("n2", "3")):
        nodes[name]["metadata"]["labels"][constants.label_fit_exclusive_free_cards(A10G.group)] = free
    devs = {
        "n1": devices("n1", rows={i: {"mode": 1, "allocated": M, "remaining": 0} for i in range(2)}),
        "n2": devices("n2"),
    }
    wl = workload("big", [pod_set(limits=gpu(9))], reserved=False)
    message = fit.never_fits(wl, pool="pool-a", flavors=[flavor()], nodes=nodes, devices=devs)
    assert message.startswith('PodSet "main" asks 9 whole nvidia-a10g cards per Pod')
    assert "no node of pool pool-a" in message
    assert "the most a node offers is 8 whole cards (n1)" in message
    assert "largest free now: 6 whole cards (n1)" in message
    # Eight fit an empty node: a Workload that only waits for room is no news.
    for fits in (gpu(8), slice_units(M), shared(8)):
        wl = workload("ok", [pod_set(limits=fits)], reserved=False)
        assert fit.never_fits(wl, pool="pool-a", flavors=[flavor()], nodes=nodes, devices=devs) == ""
    # Shares on nine distinct cards cannot exist on an eight-card node either.
    nine = workload("shares", [pod_set(limits=shared(9))], reserved=False)
    assert "9 distinct" in fit.never_fits(nine, pool="pool-a", flavors=[flavor()], nodes=nodes, devices=devs)
    # A pool whose flavors name no model, or no observed node: nothing to say.
    assert fit.never_fits(wl, pool="p", flavors=[], nodes=nodes, devices=devs) == ""


def test_a_profile_no_card_offers_never_fits() -> None:
    nodes = {"h1": node("h1", H100, 1)}
    devs = {"h1": devices("h1", H100, 1, partitioned=True)}
    odd = workload("odd", [pod_set(limits=partition("9g.99gb"))], reserved=False)
    message = fit.never_fits(
        odd, pool="h", flavors=[flavor(product=H100, count=1)], nodes=nodes, devices=devs
    )
    assert "partition 9g.99gb" in message and "0 9g.99gb partitions (h1)" in message
    ok = workload("ok", [pod_set(limits=partition("3g.40gb"))], reserved=False)
    assert (
        fit.never_fits(ok, pool="h", flavors=[flavor(product=H100, count=1)], nodes=nodes, devices=devs) == ""
    )
