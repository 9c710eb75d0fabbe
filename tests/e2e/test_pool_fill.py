"""Every node of a pool serves (docs/scheduling.md): Kueue's topology-aware placement and gate 3
agree, so a pool of several real kubelet nodes fills to its last card in every family.

The operator (its webhooks and every controller) runs over real kubelet nodes whose device managers
serve simulated cards: an H100 pool of one all-whole 8-card node, one with 6 whole cards and 2 in
MIG mode and one with 2 MIG cards only; an A10G pool of two all-whole 8-card nodes.  Pods go
through the pools' entrances as users send them:

- one-card Pods fill both pools to their last whole card, every Pod runs and each node's ledger is
  full, and not one Workload is answered ``Retry`` by gate 3;
- 40 % slices and two-card shares fill the A10G pool per card; MIG profiles fill the partitioned
  cards of two nodes;
- a Workload that loses the race for a node's last card (a share and a whole card for it at once)
  is admitted on the other node at its next attempt;
- a Pod that no node can ever host is held, with an Event naming the largest shape.

Each test leaves the pools empty.
"""

from __future__ import annotations

import json
from collections import Counter

import nodes
import pytest

from api import constants
from controllers.nodedevices.fit_labels import desired_fit_labels, fit_label_patch
from kube.client import Client, load_api_client
from nodeplugins.devicemanager import simulated as sim
from tests.e2e.objects import queued_pod, requesting, wait_for_entrance

from .conftest import ensure_namespace, gpustack, harness

pytestmark = pytest.mark.e2e

NS = "pool-fill"
H100 = sim.PRODUCTS["NVIDIA H100 80GB HBM3"]
A10G = sim.PRODUCTS["NVIDIA A10G"]
H100_POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
A10G_POOL = "gpustack--nvidia-a10g-linux-amd64"
NODES = {  # name -> (slot, hardware): this module's node ports (tests/cluster/nodes.py)
    "fill-h100-whole": (26, [{"product": H100.product, "count": 8}]),
    "fill-h100-mixed": (
        27,
        [{"product": H100.product, "count": 6}, {"product": H100.product, "count": 2, "partitioned": True}],
    ),
    "fill-h100-mig": (28, [{"product": H100.product, "count": 2, "partitioned": True}]),
    "fill-a10g-a": (29, [{"product": A10G.product, "count": 8}]),
    "fill-a10g-b": (30, [{"product": A10G.product, "count": 8}]),
}
A10G_NODES = ("fill-a10g-a", "fill-a10g-b")
EXCLUSIVE, SHARED, SLICED, PARTITIONED = 1, 2, 3, 4  # Devices status card modes
FILL_TIMEOUT = 240  # seconds for a pool to fill (a Retry costs a back-off: 5 s in e2e, conftest.py)


@pytest.fixture(scope="module")
def pools(cluster, tmp_path_factory):
    op = gpustack.install(cluster)
    gpustack.start_worker(cluster, op)
    profiles = tmp_path_factory.mktemp("profiles")
    try:
        specs = []
        for name, (slot, cards) in NODES.items():
            profile = profiles / f"{name}.json"
            profile.write_text(json.dumps({"manufacturer": "nvidia", "cards": cards}))
            specs.append({"name": name, "profile": profile, "slot": slot})
        nodes.start_nodes(cluster, specs)
        ensure_namespace(cluster, NS)
        entrances = {
            pool: wait_for_entrance(cluster, pool, NS, timeout=180, what=f"the entrance of {pool}")
            for pool in (H100_POOL, A10G_POOL)
        }
        yield Client(load_api_client(str(cluster.kubeconfig))), entrances
    finally:
        harness.delete_namespace(cluster, NS, timeout=240)
        nodes.remove_nodes(cluster, NODES)
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)


def pod(name: str, queue: str, limits: dict[str, str]) -> dict:
    return queued_pod(name, NS, queue, requesting(limits))


def send(client: Client, prefix: str, count: int, queue: str, limits: dict[str, str]) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        client.create(pod(name, queue, limits))
    return names


def pods(client: Client) -> dict[str, dict]:
    items, _ = client.list("Pod", NS)
    return {p["metadata"]["name"]: p for p in items}


def running(client: Client, names: list[str]) -> dict[str, str] | None:
    """Node per Pod once every one of ``names`` runs; None before."""
    current = pods(client)
    where = {}
    for name in names:
        p = current.get(name) or {}
        if (p.get("status") or {}).get("phase") != "Running":
            return None
        where[name] = p["spec"]["nodeName"]
    return where


def wait_running(client: Client, names: list[str], what: str) -> dict[str, str]:
    try:
        return harness.wait_for(lambda: running(client, names), timeout=FILL_TIMEOUT, interval=0.5, what=what)
    except TimeoutError as error:
        current = pods(client)
        stuck = {n: (current.get(n) or {}).get("status", {}).get("phase") for n in names}
        items, _ = client.list("Workload", NS)
        held = {
            w["metadata"]["name"]: [c.get("message") for c in (w.get("status") or {}).get("conditions") or []]
            for w in items
            if not (w.get("status") or {}).get("admission")
        }
        raise TimeoutError(
            f"{error}; phases: {stuck}; pending workloads: {json.dumps(held)[:4000]}"
        ) from None


def modes(client: Client, node: str) -> Counter:
    """Cards per mode in the node's published ledger (``Devices`` status)."""
    devices = client.get("Devices", node) or {}
    return Counter(
        card.get("mode", 0)
        for group in (devices.get("status") or {}).get("groups") or ()
        for card in group.get("accelerators") or ()
    )


def fit_labels_caught_up(client: Client, node: str) -> bool:
    """The node carries the fit labels the fit-label reconciler derives from its ``Devices`` now."""
    obj, devices = client.get("Node", node), client.get("Devices", node)
    if obj is None or devices is None:
        return False
    return not fit_label_patch(obj, desired_fit_labels(obj, devices))  # nothing to set or delete


def retries(client: Client) -> list[str]:
    """Gate 3's ``Retry`` answers in the namespace (the check posts one Event per verdict)."""
    items, _ = client.list("Event", NS, field_selector="reason=NodeDevicesDoNotFit")
    return [e.get("message", "") for e in items]


def gated_with_message(client: Client, name: str) -> str:
    """Kueue's message on the Workload of a Pod that stays gated ("" while it is not)."""
    p = pods(client).get(name) or {}
    gates = (p.get("spec") or {}).get("schedulingGates") or []
    if not gates:
        return ""
    items, _ = client.list("Workload", NS)
    for w in items:
        if any(o.get("name") == name for o in (w["metadata"].get("ownerReferences") or [])):
            for c in (w.get("status") or {}).get("conditions") or []:
                if c.get("type") == "QuotaReserved" and c.get("status") == "False":
                    return c.get("message") or ""
    return ""


def empty(cluster, client: Client) -> None:
    """Delete every Pod of the namespace and wait until each node's ledger is free again."""
    cluster.kubectl("delete", "pods", "--all", "-n", NS, "--wait=true", "--grace-period=0", timeout=180)
    harness.wait_for(
        lambda: all(set(modes(client, n)) <= {0} for n in NODES),
        timeout=120,
        what="every card free again",
    )
    # The fit labels follow the ledger a few seconds later (the fit-label reconciler coalesces);
    # the next test's NeverFits message reads "largest free now" from them.
    harness.wait_for(
        lambda: all(fit_labels_caught_up(client, n) for n in NODES),
        timeout=60,
        what="every node's fit labels showing its free ledger",
    )
    # One deletecollection: `kubectl delete events --all` sends a DELETE per Event under kubectl's
    # client-side limit of 5 a second (535 Events took 108 s; this, under a second).
    cluster.kubectl("delete", "--raw", f"/api/v1/namespaces/{NS}/events", check=False)


# --- Whole cards ----------------------------------------------------------------------------------------------


def test_one_card_pods_fill_a_mixed_and_a_whole_node_and_two_whole_nodes(cluster, pools) -> None:
    client, entrances = pools
    h100 = send(client, "h", 14, entrances[H100_POOL], {"nvidia.com/gpu": "1"})
    a10g = send(client, "a", 16, entrances[A10G_POOL], {"nvidia.com/gpu": "1"})
    where = wait_running(client, h100 + a10g, "30 one-card Pods running")
    assert Counter(where[n] for n in h100) == {"fill-h100-whole": 8, "fill-h100-mixed": 6}
    assert Counter(where[n] for n in a10g) == {"fill-a10g-a": 8, "fill-a10g-b": 8}
    assert modes(client, "fill-h100-whole")[EXCLUSIVE] == 8
    assert modes(client, "fill-h100-mixed") == Counter({EXCLUSIVE: 6, 0: 2})  # the MIG cards stay free
    assert all(modes(client, n)[EXCLUSIVE] == 8 for n in A10G_NODES)
    assert retries(client) == []  # TAS proposed no node gate 3 refused
    # One more waits: Kueue finds no node with a whole card (the pin), and does not loop on it.
    (extra,) = send(client, "h-extra", 1, entrances[H100_POOL], {"nvidia.com/gpu": "1"})
    message = harness.wait_for(
        lambda: gated_with_message(client, extra), timeout=60, what="the extra Pod held"
    )
    assert "doesn't allow to fit" in message
    node = client.get("Node", "fill-h100-whole") or {}
    assert node["metadata"]["labels"][constants.label_fit_exclusive_free_cards(H100.group)] == "0"
    assert retries(client) == []
    empty(cluster, client)


# --- Slices and shares ----------------------------------------------------------------------------------------


def test_forty_percent_slices_fill_every_card_twice(cluster, pools) -> None:
    client, entrances = pools
    names = send(
        client,
        "s",
        32,
        entrances[A10G_POOL],
        {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"},
    )
    where = wait_running(client, names, "32 slices of 40 % running")
    assert Counter(where.values()) == {"fill-a10g-a": 16, "fill-a10g-b": 16}
    for node in A10G_NODES:
        devices = client.get("Devices", node) or {}
        cards = [c for g in devices["status"]["groups"] for c in g["accelerators"]]
        assert [(c["mode"], c["allocatedSlices"], c["remaining"]) for c in cards] == [
            (SLICED, 2, 320_000)
        ] * 8
    # A 33rd does not fit any card (20 % left on each): it waits, whatever Kueue's sum of units says.
    (extra,) = send(
        client,
        "s-extra",
        1,
        entrances[A10G_POOL],
        {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"},
    )
    harness.wait_for(lambda: gated_with_message(client, extra), timeout=60, what="the 33rd slice held")
    empty(cluster, client)


def test_two_card_shares_fill_the_cards_whole_pods_left(cluster, pools) -> None:
    client, entrances = pools
    # One 6-card Pod per node (a node cannot hold two) leaves two free cards on each.
    whole = send(client, "w", 2, entrances[A10G_POOL], {"nvidia.com/gpu": "6"})
    assert sorted(wait_running(client, whole, "6 whole cards taken on each node").values()) == list(
        A10G_NODES
    )
    shares = send(client, "sh", 20, entrances[A10G_POOL], {"nvidia.com/gpu.shared": "2"})
    where = wait_running(client, shares, "20 two-card shares on the 4 cards left")
    assert Counter(where.values()) == {"fill-a10g-a": 10, "fill-a10g-b": 10}
    for node in A10G_NODES:
        assert modes(client, node) == Counter({EXCLUSIVE: 6, SHARED: 2})
    (extra,) = send(client, "sh-extra", 1, entrances[A10G_POOL], {"nvidia.com/gpu.shared": "2"})
    harness.wait_for(lambda: gated_with_message(client, extra), timeout=60, what="the 21st share held")
    empty(cluster, client)


# --- Partitions -------------------------------------------------------------------------------------------------


def test_mig_profiles_fill_the_partitioned_cards_of_two_nodes(cluster, pools) -> None:
    client, entrances = pools
    mig = {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}
    names = send(client, "m", 8, entrances[H100_POOL], mig)  # 2 per card, 4 cards on 2 nodes
    where = wait_running(client, names, "8 MIG 3g.40gb partitions running")
    assert Counter(where.values()) == {"fill-h100-mixed": 4, "fill-h100-mig": 4}
    assert modes(client, "fill-h100-whole") == Counter({0: 8})  # a whole-card node serves no partition
    (extra,) = send(client, "m-extra", 1, entrances[H100_POOL], mig)
    harness.wait_for(lambda: gated_with_message(client, extra), timeout=60, what="the 9th partition held")
    empty(cluster, client)


# --- Races and refusals -----------------------------------------------------------------------------------------


def test_the_loser_of_a_race_for_the_last_card_runs_on_the_other_node(cluster, pools) -> None:
    client, entrances = pools
    queue = entrances[A10G_POOL]
    first = send(client, "f", 7, queue, {"nvidia.com/gpu": "1"})
    where = wait_running(client, first, "7 whole cards taken")
    (busy,) = set(where.values())
    other = next(n for n in A10G_NODES if n != busy)
    # The kubelet counts only healthy tokens: once it reports one card's shares, the busy node is
    # the fullest that fits both a whole card and a share, so Kueue proposes it for both.
    harness.wait_for(
        lambda: (
            ((client.get("Node", busy) or {})["status"]["allocatable"].get("nvidia.com/gpu.shared")) == "10"
        ),
        timeout=60,
        what=f"{busy} advertising the shares of its last card only",
    )
    (whole,) = send(client, "race-whole", 1, queue, {"nvidia.com/gpu": "1"})
    (share,) = send(client, "race-share", 1, queue, {"nvidia.com/gpu.shared": "1"})
    placed = wait_running(client, [whole, share], "both racers running")
    assert sorted(placed.values()) == sorted([busy, other])
    # Kueue proposes both for the busy node only when it judges the second before the first's
    # charge shows (in the ledger, then the fit labels); on a slower pass it already sends the
    # second to the other node. Either way nothing is placed twice: at most one Retry, and the
    # loser (when there was a race) named the busy node and runs on the other.
    lost = retries(client)
    assert len(lost) <= 1, lost
    if lost:
        loser = whole if placed[whole] == other else share
        assert f"node {busy}" in lost[0]
        assert placed[loser] == other
    empty(cluster, client)


def test_a_pod_no_node_can_ever_host_is_held_with_the_largest_shape(cluster, pools) -> None:
    client, entrances = pools
    (big,) = send(client, "big", 1, entrances[A10G_POOL], {"nvidia.com/gpu": "9"})

    def never_fits() -> str:
        items, _ = client.list("Event", NS, field_selector=f"involvedObject.name={big},reason=NeverFits")
        return items[0]["message"] if items else ""

    message = harness.wait_for(never_fits, timeout=60, what="the NeverFits event on the Pod")
    assert message.startswith('PodSet "main" asks 9 whole nvidia-a10g cards per Pod')
    assert (
        "the most a node offers is 8 whole cards" in message and "largest free now: 8 whole cards" in message
    )
    # The event comes from our report controller as soon as the Workload holds no reservation;
    # Kueue's own QuotaReserved=False message on it may land a moment later, so wait for it.
    harness.wait_for(lambda: gated_with_message(client, big), timeout=60, what="Kueue's pending message")
    assert retries(client) == []
    empty(cluster, client)
