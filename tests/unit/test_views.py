"""fastpath.views: the four InstanceType views (§7), with both worked examples of the spec."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastpath.requests import Demand
from tests.unit.ledgers import H100, H100_PROFILES, T4, M, accelerator, devices, ledger_twin

fit = ledger_twin()
interpreted = ledger_twin(interpreted=True)
BOTH = pytest.mark.parametrize("f", [fit, interpreted], ids=["compiled", "interpreted"])


def two_nodes() -> list[dict]:
    """§7: node A has 4 cards — c0 exclusive, c1 one 30 % slice, c2 shared by 3 holders, c3 free;
    node B has one free card."""
    a = devices(
        "node-a",
        T4,
        [accelerator(i) for i in range(4)],
        [
            {"id": "GPU-0", "index": 0, "mode": 1, "allocated": M},
            {
                "id": "GPU-1",
                "index": 1,
                "mode": 3,
                "allocated": 480_000,
                "remaining": 1_120_000,
                "allocatedSlices": 1,
            },
            {"id": "GPU-2", "index": 2, "mode": 2, "allocated": 480_000, "remaining": 1_120_000},
            {"id": "GPU-3", "index": 3, "mode": 0, "remaining": M},
        ],
    )
    b = devices("node-b", T4, [accelerator(0)])
    return [a, b]


def three_h100() -> list[dict]:
    """§7: 3 partitioned H100-80GB cards, one 3g.40gb on slices 0-3 of card 0."""
    card0 = {
        "id": "GPU-0",
        "index": 0,
        "mode": 4,
        "allocatedProfiles": [{"name": "3g.40gb", "count": 1}],
        "remainingProfiles": [
            {"name": "1g.10gb", "count": 3},
            {"name": "1g.20gb", "count": 2},
            {"name": "2g.20gb", "count": 1},
            {"name": "3g.40gb", "count": 1},
            {"name": "4g.40gb"},
            {"name": "7g.80gb"},
        ],
    }
    return [devices("h1", H100, [accelerator(i, profiles=H100_PROFILES) for i in range(3)], [card0])]


@BOTH
def test_worked_example_unpartitioned(f) -> None:
    ledger = f.build_ledger(two_nodes(), T4, node_cores={"node-a": 48, "node-b": 24})
    v = f.views(ledger)
    assert v.summary() == "1/2 2/27 100/270 0/0"
    assert (v.ex_once, v.ex_remaining, v.ex_capacity) == (1, 2, 5)
    assert (v.sh_once, v.sh_remaining, v.sh_capacity) == (2, 27, 50)
    assert (v.sl_once, v.sl_remaining, v.sl_capacity) == (100, 270, 500)
    assert (v.pt_once, v.pt_remaining, v.pt_capacity) == (0, 0, 0)
    status = v.to_status()
    assert status["accelerator"] == {"onceMaxRequest": "1", "remaining": "2", "capacity": "5"}
    assert status["acceleratorShared"] == {"onceMaxRequest": "2", "remaining": "27", "capacity": "50"}
    assert status["acceleratorSliced"] == {"onceMaxRequest": "100", "remaining": "270", "capacity": "500"}
    assert status["acceleratorPartitioned"] == {
        "onceMaxRequest": "0",
        "remaining": "0",
        "capacity": "0",
        "remainingProfiles": [],
        "allocatedProfiles": [],
    }
    assert status["cpu"] == {"onceMaxRequest": "48", "remaining": "72", "capacity": "72"}
    assert v.cpu_summary() == "48/72"


@BOTH
def test_worked_example_partitioned(f) -> None:
    ledger = f.build_ledger(three_h100(), H100)
    v = f.views(ledger)
    assert v.summary() == "0/0 0/0 0/0 1/17"
    assert v.pt_capacity == 21
    assert v.remaining_profiles == [
        ("1g.10gb", 17),
        ("1g.20gb", 10),
        ("2g.20gb", 7),
        ("3g.40gb", 5),
        ("4g.40gb", 2),
        ("7g.80gb", 2),
    ]
    assert v.allocated_profiles == [("3g.40gb", 1)]
    pt = v.to_status()["acceleratorPartitioned"]
    assert (pt["onceMaxRequest"], pt["remaining"], pt["capacity"]) == ("1", "17", "21")
    assert pt["allocatedProfiles"] == [{"name": "3g.40gb", "count": 1}]
    # Card 0 contributes its largest remaining profile count (3), never the sum.
    assert ledger.nodes[0].cards[0].profile_remaining() == {
        "1g.10gb": 3,
        "1g.20gb": 2,
        "2g.20gb": 1,
        "3g.40gb": 1,
        "4g.40gb": 0,
        "7g.80gb": 0,
    }
    # The node keys of the same example: .partitioned = (1+3)+7+7, mig-3g.40gb = 1+5, mig-4g.40gb = 2.
    tokens, per_profile = f.partition_capacity(ledger.nodes[0])
    assert tokens == 18
    assert per_profile["3g.40gb"] == 6 and per_profile["4g.40gb"] == 2


@BOTH
def test_full_profiles_stay_listed_and_zero_allocations_are_omitted(f) -> None:
    ledger = f.build_ledger(three_h100(), H100)
    node = ledger.nodes[0]
    assert f.place(node, Demand("partitioned", profile="7g.80gb")) is not None
    assert f.place(node, Demand("partitioned", profile="7g.80gb")) is not None
    v = f.views(ledger)
    assert v.summary() == "0/0 0/0 0/0 1/3"
    assert dict(v.remaining_profiles)["7g.80gb"] == 0
    assert [name for name, _ in v.remaining_profiles] == [
        "1g.10gb",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ]
    assert v.allocated_profiles == [("3g.40gb", 1), ("7g.80gb", 2)]
    pt = v.to_status()["acceleratorPartitioned"]
    assert {"name": "7g.80gb", "count": 0} in pt["remainingProfiles"]
    for profile in ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "1g.10gb"):
        while f.place(node, Demand("partitioned", profile=profile)) is not None:
            pass
    v = f.views(ledger)
    assert (v.pt_once, v.pt_remaining, v.pt_capacity) == (0, 0, 21)


@BOTH
def test_views_follow_placements(f) -> None:
    ledger = f.build_ledger(two_nodes(), T4)
    f.place(ledger.node("node-b"), Demand("sliced", units=30 * 16_000))
    v = f.views(ledger)
    # node B's card is now sliced: no longer whole (EX), no longer shareable (SH), 70 % left (SL).
    assert v.summary() == "1/1 2/17 100/240 0/0"
    f.place(ledger.node("node-a"), Demand("shared", count=2))
    assert f.views(ledger).summary() == "0/0 2/15 70/140 0/0"


@BOTH
def test_each_card_feeds_exactly_one_group(f) -> None:
    mixed = devices(
        "m", H100, [accelerator(0, profiles=H100_PROFILES), accelerator(1), accelerator(2, slices=0)]
    )
    v = f.views(f.build_ledger([mixed]))
    assert v.summary() == "2/2 2/20 100/100 1/7"
    assert (v.ex_capacity, v.sh_capacity, v.sl_capacity, v.pt_capacity) == (2, 20, 100, 7)


@BOTH
def test_unhealthy_cards_count_in_capacity_only(f) -> None:
    obj = devices("n", T4, [accelerator(0, unhealthy=True), accelerator(1)])
    v = f.views(f.build_ledger([obj]))
    assert v.summary() == "1/1 1/10 100/100 0/0"
    assert (v.ex_capacity, v.sh_capacity, v.sl_capacity) == (2, 20, 200)


@BOTH
def test_a_card_with_no_free_slot_adds_no_slice_room(f) -> None:
    obj = devices(
        "n",
        T4,
        [accelerator(0, slices=4)],
        [{"id": "GPU-0", "index": 0, "mode": 3, "remaining": 800_000, "allocatedSlices": 4}],
    )
    assert f.views(f.build_ledger([obj])).summary() == "0/0 0/0 0/0 0/0"


@BOTH
def test_empty_pool_and_cpu(f) -> None:
    v = f.views(f.Ledger([]))
    assert v.summary() == "0/0 0/0 0/0 0/0" and v.cpu_summary() == "0/0"
    node = f.NodeLedger("cpu-1", [], 64)
    node.cores_free = 40
    v = f.views(f.Ledger([node, f.NodeLedger("cpu-2", [], 16)]))
    assert (v.cpu_once, v.cpu_remaining, v.cpu_capacity) == (64, 56, 80)


_ROW = st.sampled_from(
    [
        None,
        (0, M, 0),
        (1, None, 0),
        (2, 1_120_000, 0),
        (2, 160_000, 0),
        (3, 1_120_000, 1),
        (3, 8_000, 2),
        (3, 800_000, 4),
    ]
)


@st.composite
def pools(draw) -> list[dict]:
    objs = []
    for n in range(draw(st.integers(0, 3))):
        accs, rows = [], []
        for i in range(draw(st.integers(1, 4))):
            partitioned = draw(st.booleans())
            accs.append(
                accelerator(
                    i,
                    slices=draw(st.sampled_from([0, 4, 128])),
                    profiles=H100_PROFILES if partitioned else None,
                    unhealthy=draw(st.integers(0, 9)) == 0,
                )
            )
            if partitioned:
                name = draw(st.sampled_from([None, "1g.10gb", "3g.40gb", "7g.80gb"]))
                if name:
                    rows.append(
                        {
                            "id": f"GPU-{i}",
                            "index": i,
                            "mode": 4,
                            "allocatedProfiles": [{"name": name, "count": 1}],
                        }
                    )
            else:
                r = draw(_ROW)
                if r is not None:
                    entry = {"id": f"GPU-{i}", "index": i, "mode": r[0], "allocatedSlices": r[2]}
                    if r[1] is not None:
                        entry["remaining"] = r[1]
                    rows.append(entry)
        objs.append(devices(f"n{n}", H100, accs, rows))
    return objs


@settings(max_examples=200, deadline=None)
@given(pools())
def test_compiled_and_interpreted_views_agree(objs: list[dict]) -> None:
    cores = {f"n{i}": 8 * (i + 1) for i in range(3)}
    a = fit.views(fit.build_ledger(objs, node_cores=cores))
    b = interpreted.views(interpreted.build_ledger(objs, node_cores=cores))
    assert a.as_tuple() == b.as_tuple()
    assert a.to_status() == b.to_status()
