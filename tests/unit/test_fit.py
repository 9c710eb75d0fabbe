"""fastpath.ledger, fastpath.fit, fastpath.fit_labels: the per-card ledger and the fit predicates gates
1, 3 and 5 share (§6.3, §6.6)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastpath.pure import is_compiled
from fastpath.requests import Demand
from tests.unit.ledgers import (
    H100,
    H100_PROFILES_WITH_ME,
    T4,
    M,
    accelerator,
    devices,
    ledger_modules,
    ledger_twin,
    row,
)

fit = ledger_twin()
interpreted = ledger_twin(interpreted=True)
BOTH = pytest.mark.parametrize("f", [fit, interpreted], ids=["compiled", "interpreted"])
SHARE = 160_000

H100_PROFILES = H100_PROFILES_WITH_ME


def t4_node(f, rows: list | None = None, cards: int = 4, slices: int = 128, name: str = "n1"):
    return f.node_ledger(devices(name, T4, [accelerator(i, slices) for i in range(cards)], rows))


def state(node) -> list[tuple]:
    return [(c.index, c.mode, c.remaining, c.allocated_slices) for c in node.cards]


def test_compiled_extension_is_loaded() -> None:
    for module in ledger_modules():
        assert is_compiled(module), (
            f"{module.__name__} was imported from {module.__file__}, not a compiled extension: build it "
            "with `python setup.py build_ext --inplace` (or `pip install -e .`) before running the tests"
        )


# --- Building the ledger ------------------------------------------------------------------------------


@BOTH
def test_ledger_rows(f) -> None:
    node = t4_node(f, [row(0, 1), row(1, 3, 1_120_000, 1), row(2, 2, 1_120_000)])
    assert state(node) == [(0, 1, 0, 0), (1, 3, 1_120_000, 1), (2, 2, 1_120_000, 0), (3, 0, M, 0)]
    # A row present with remaining omitted holds 0; a card without a row is fresh (remaining = M).
    card = node.cards[3]
    assert (card.group, card.manufacturer, card.id, card.memory_mib, card.slice_count) == (
        T4,
        "nvidia",
        "GPU-3",
        15360,
        128,
    )
    assert not card.partitioned and card.healthy


@BOTH
def test_accelerator_group_scoping_and_memory_suffixed_ids(f) -> None:
    obj = devices("n1", T4, [accelerator(0)], [row(0, 1)], group_id="nvidia-tesla-t4-16g")
    obj["spec"]["groups"].append(
        {
            "id": "amd-mi300x",
            "manufacturer": "amd",
            "name": "MI300X",
            "memory": 196608,
            "accelerators": [accelerator(0)],
        }
    )
    obj["metadata"]["labels"]["acceleratable.feature.gpustack.ai/amd-mi300x"] = "true"
    scoped = f.node_ledger(obj, T4)
    assert [(c.group, c.id, c.mode) for c in scoped.cards] == [(T4, "GPU-0", 1)]
    everything = f.node_ledger(obj)
    assert [c.group for c in everything.cards] == [T4, "amd-mi300x"]
    assert f.node_ledger(obj, "nvidia-a10g").cards == []


@BOTH
def test_partitioned_cards_and_their_inventory(f) -> None:
    node = f.node_ledger(devices("h1", H100, [accelerator(0, profiles=H100_PROFILES)]))
    (card,) = node.cards
    assert card.partitioned
    # +me variants cannot be a key segment: not inventory.
    assert [p.name for p in card.profiles] == [
        "1g.10gb",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ]
    assert card.profile_remaining() == {
        "1g.10gb": 7,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    }


@BOTH
def test_thead_profiles_are_published_with_their_separator(f) -> None:
    profiles = [
        {
            "name": "4g48gb",
            "memoryMib": 49152,
            "count": 2,
            "placements": [{"start": 0, "length": 4}, {"start": 4, "length": 4}],
        }
    ]
    node = f.node_ledger(
        devices("p1", "thead-ppu", [accelerator(0, profiles=profiles)], manufacturer="thead")
    )
    (card,) = node.cards
    assert [(p.name, p.vendor) for p in card.profiles] == [("4g.48gb", "4g48gb")]
    grants = f.place(node, Demand("partitioned", "thead", "alibabacloud.com/ppu", 1, 800_000, "4g.48gb"))
    assert grants == [("thead-ppu", "GPU-0", 0, 800_000, "4g.48gb", 0, 4)]


# --- Exclusive ----------------------------------------------------------------------------------------


@BOTH
def test_exclusive_takes_only_free_whole_cards(f) -> None:
    node = t4_node(f, [row(0, 1), row(1, 3, 1_120_000, 1), row(2, 2, 1_120_000), row(3, 0, M - 1)])
    assert not f.fits(node, Demand("exclusive", count=1))
    node = t4_node(f, [row(0, 1), row(1, 3, 1_120_000, 1)])
    assert f.fits(node, Demand("exclusive", count=2))
    assert not f.fits(node, Demand("exclusive", count=3))
    grants = f.place(node, Demand("exclusive", "nvidia", count=2))
    assert [(g[1], g[3]) for g in grants] == [("GPU-2", M), ("GPU-3", M)]
    assert state(node)[2:] == [(2, 1, 0, 0), (3, 1, 0, 0)]
    assert f.place(node, Demand("exclusive", count=1)) is None


@BOTH
def test_manufacturer_scoping(f) -> None:
    node = t4_node(f)
    assert not f.fits(node, Demand("exclusive", "amd", count=1))
    assert f.fits(node, Demand("exclusive", "nvidia", count=1))
    assert f.fits(node, Demand("exclusive", "", count=1))


@BOTH
def test_unhealthy_cards_never_fit(f) -> None:
    node = f.node_ledger(devices("n1", T4, [accelerator(0, unhealthy=True), accelerator(1)]))
    assert f.fits(node, Demand("exclusive", count=1))
    assert not f.fits(node, Demand("exclusive", count=2))
    assert f.place(node, Demand("sliced", count=1, units=100))[0][1] == "GPU-1"


# --- Shared -------------------------------------------------------------------------------------------


@BOTH
def test_shared_needs_n_distinct_cards_with_a_free_share(f) -> None:
    rows = [row(0, 1), row(1, 3, 1_120_000, 1), row(2, 2, SHARE), row(3, 2, SHARE - 1)]
    node = t4_node(f, rows)
    assert f.fits(node, Demand("shared", count=1))
    assert not f.fits(node, Demand("shared", count=2))  # one card with a share; shares of one card do not add
    node = t4_node(f, [row(0, 2, 480_000), row(1, 2, 960_000)])
    # The fullest card first, each card once.
    grants = f.place(node, Demand("shared", count=3))
    assert [g[1] for g in grants] == ["GPU-0", "GPU-1", "GPU-2"]
    assert state(node) == [(0, 2, 320_000, 0), (1, 2, 800_000, 0), (2, 2, M - SHARE, 0), (3, 0, M, 0)]
    assert not f.fits(node, Demand("shared", count=5))


# --- Sliced -------------------------------------------------------------------------------------------


@BOTH
def test_two_30_percent_slices_share_a_card_two_60_do_not(f) -> None:
    node = t4_node(f, cards=1)
    thirty = Demand("sliced", "nvidia", count=1, units=30 * 16_000)
    assert f.place(node, thirty) is not None
    assert f.place(node, thirty) is not None
    assert state(node) == [(0, 3, M - 960_000, 2)]
    node = t4_node(f, cards=1)
    sixty = Demand("sliced", "nvidia", count=1, units=60 * 16_000)
    assert f.place(node, sixty) is not None
    assert f.place(node, sixty) is None
    assert state(node) == [(0, 3, M - 960_000, 1)]  # a refusal leaves the ledger as it was
    # The same pair in one demand: judged together.
    assert f.fits(t4_node(f, cards=1), Demand("sliced", count=2, units=30 * 16_000))
    assert not f.fits(t4_node(f, cards=1), Demand("sliced", count=2, units=60 * 16_000))
    assert f.fits(t4_node(f, cards=2), Demand("sliced", count=2, units=60 * 16_000))


@BOTH
def test_slices_go_to_the_fullest_card_that_fits_ties_by_index(f) -> None:
    rows = [row(0, 3, 1_000_000, 1), row(1, 3, 400_000, 1), row(2, 0, M), row(3, 3, 400_000, 1)]
    node = t4_node(f, rows)
    assert f.choose(node, Demand("sliced", units=300_000))[0][1] == "GPU-1"
    assert f.choose(node, Demand("sliced", units=500_000))[0][1] == "GPU-0"
    assert f.choose(node, Demand("sliced", units=1_100_000))[0][1] == "GPU-2"
    assert state(node) == [(0, 3, 1_000_000, 1), (1, 3, 400_000, 1), (2, 0, M, 0), (3, 3, 400_000, 1)]


@BOTH
def test_slice_slots_bound_a_card_whatever_its_memory(f) -> None:
    # Hygon hosts four slices per card.
    node = f.node_ledger(
        devices(
            "d1", "hygon-k100", [accelerator(0, slices=4)], [row(0, 3, 1_200_000, 4)], manufacturer="hygon"
        )
    )
    assert not f.fits(node, Demand("sliced", "hygon", units=16_000))
    node = f.node_ledger(
        devices(
            "d1", "hygon-k100", [accelerator(0, slices=4)], [row(0, 3, 1_200_000, 3)], manufacturer="hygon"
        )
    )
    assert f.place(node, Demand("sliced", "hygon", units=16_000)) is not None
    assert not f.fits(node, Demand("sliced", "hygon", units=16_000))


@BOTH
def test_only_free_or_sliced_sliceable_cards_take_a_slice(f) -> None:
    assert not f.fits(t4_node(f, [row(0, 2, M - SHARE)], cards=1), Demand("sliced", units=1))
    assert not f.fits(t4_node(f, [row(0, 1)], cards=1), Demand("sliced", units=1))
    assert not f.fits(t4_node(f, cards=1, slices=0), Demand("sliced", units=1))
    assert f.fits(t4_node(f, cards=1), Demand("sliced", units=M))
    assert not f.fits(t4_node(f, cards=1), Demand("sliced", units=M + 1))


# --- Partitioned ---------------------------------------------------------------------------------------


def h100_node(f, rows: list | None = None, cards: int = 3):
    return f.node_ledger(
        devices(
            "h1", H100, [accelerator(i, profiles=H100_PROFILES) for i in range(cards)], rows, memory=81559
        )
    )


CARD0_ONE_3G = row(
    0,
    4,
    allocatedProfiles=[{"name": "3g.40gb", "count": 1}],
    remainingProfiles=[
        {"name": "1g.10gb", "count": 3},
        {"name": "1g.20gb", "count": 2},
        {"name": "2g.20gb", "count": 1},
        {"name": "3g.40gb", "count": 1},
        {"name": "4g.40gb"},
        {"name": "7g.80gb"},
    ],
)


@BOTH
def test_partitions_pack_onto_the_most_occupied_card(f) -> None:
    node = h100_node(f, [CARD0_ONE_3G])
    one_g = Demand("partitioned", "nvidia", count=1, units=195_000, profile="1g.10gb")
    grants = f.place(node, one_g)
    # On card 0 (slices 0-3 taken), slot 6 keeps a 2g.20gb placeable at 4-5; slot 4 would not.
    assert grants == [(H100, "GPU-0", 0, 195_000, "1g.10gb", 6, 1)]
    assert node.cards[0].profile_remaining()["2g.20gb"] == 1
    assert node.cards[0].profile_remaining()["1g.10gb"] == 2
    assert node.cards[0].profile_remaining()["3g.40gb"] == 0
    # 7g.80gb needs an empty card: the first free one.
    seven = Demand("partitioned", count=1, profile="7g.80gb")
    assert f.place(node, seven)[0][1:3] == ("GPU-1", 1)
    assert f.place(node, seven)[0][1:3] == ("GPU-2", 2)
    assert f.place(node, seven) is None
    assert node.cards[2].allocated_profiles == [0, 0, 0, 0, 0, 1]


@BOTH
def test_partition_placement_keeps_large_shapes_placeable(f) -> None:
    node = h100_node(f, cards=1)
    # A 2g.20gb lands where it leaves the most instances: slots 4-5 keep 4g.40gb (0-3) placeable.
    assert f.place(node, Demand("partitioned", profile="2g.20gb"))[0][5:] == (4, 2)
    assert node.cards[0].profile_remaining()["4g.40gb"] == 1
    assert f.place(node, Demand("partitioned", profile="3g.40gb"))[0][5:] == (0, 4)
    assert f.place(node, Demand("partitioned", profile="3g.40gb")) is None
    assert f.place(node, Demand("partitioned", profile="1g.10gb"))[0][5:] == (6, 1)
    assert f.place(node, Demand("partitioned", profile="1g.10gb")) is None


@BOTH
def test_families_never_cross_the_partition_boundary(f) -> None:
    mixed = devices("m1", H100, [accelerator(0, profiles=H100_PROFILES), accelerator(1)])
    node = f.node_ledger(mixed)
    for family in ("exclusive", "shared"):
        assert f.choose(node, Demand(family, count=1))[0][1] == "GPU-1"
        assert not f.fits(node, Demand(family, count=2))
    assert f.choose(node, Demand("sliced", units=1))[0][1] == "GPU-1"
    assert f.choose(node, Demand("partitioned", profile="1g.10gb"))[0][1] == "GPU-0"
    only_partitioned = f.node_ledger(devices("m2", H100, [accelerator(0, profiles=H100_PROFILES)]))
    for demand in (Demand("exclusive"), Demand("shared"), Demand("sliced", units=1)):
        assert not f.fits(only_partitioned, demand)
    assert not f.fits(t4_node(f), Demand("partitioned", profile="1g.10gb"))
    assert not f.fits(h100_node(f), Demand("partitioned", profile="9g.99gb"))


@BOTH
def test_occupied_slices_are_recovered_from_the_ledger(f) -> None:
    # The 3g.40gb sits on slices 4-7, which the reported remaining counts give away: 4g.40gb fits.
    at_four = row(
        0,
        4,
        allocatedProfiles=[{"name": "3g.40gb", "count": 1}],
        remainingProfiles=[
            {"name": "1g.10gb", "count": 4},
            {"name": "1g.20gb", "count": 2},
            {"name": "2g.20gb", "count": 2},
            {"name": "3g.40gb", "count": 1},
            {"name": "4g.40gb", "count": 1},
            {"name": "7g.80gb"},
        ],
    )
    node = h100_node(f, [at_four], cards=1)
    assert node.cards[0].occupied == 0b11110000
    assert f.place(node, Demand("partitioned", profile="4g.40gb"))[0][5:] == (0, 4)


@BOTH
def test_an_inconsistent_ledger_caps_what_the_geometry_allows(f) -> None:
    # Nothing allocated, yet the device manager reports room for one 1g.10gb only (say, an instance
    # carved by hand): the ledger's word caps the geometry, and placements move the cap.
    odd = row(0, 4, remainingProfiles=[{"name": "1g.10gb", "count": 1}])
    node = h100_node(f, [odd], cards=1)
    remaining = node.cards[0].profile_remaining()
    assert remaining == {"1g.10gb": 1, "1g.20gb": 0, "2g.20gb": 0, "3g.40gb": 0, "4g.40gb": 0, "7g.80gb": 0}
    assert f.place(node, Demand("partitioned", profile="1g.10gb")) is not None
    assert f.place(node, Demand("partitioned", profile="1g.10gb")) is None


@BOTH
def test_an_impossible_allocation_fills_the_card(f) -> None:
    node = h100_node(f, [row(0, 4, allocatedProfiles=[{"name": "7g.80gb", "count": 2}])], cards=1)
    assert node.cards[0].profile_remaining()["1g.10gb"] == 0


# --- Sequences and the pool ------------------------------------------------------------------------------


@BOTH
def test_inflight_demands_are_placed_in_sequence(f) -> None:
    node = t4_node(f, cards=2)
    demands = [
        Demand("sliced", units=960_000),
        Demand("sliced", units=960_000),
        Demand("sliced", units=960_000),
    ]
    assert not f.fits_many(node, demands)
    assert f.fits_many(node, demands[:2])
    assert state(node) == [(0, 0, M, 0), (1, 0, M, 0)]  # judged on a copy
    assert f.place_many(node, demands) == 2
    assert state(node) == [(0, 3, 640_000, 1), (1, 3, 640_000, 1)]
    copy = node.copy()
    assert f.place(copy, Demand("sliced", units=640_000)) is not None
    assert state(node) == [(0, 3, 640_000, 1), (1, 3, 640_000, 1)]  # copies are independent


@BOTH
def test_place_on_pool_takes_the_first_node_that_fits(f) -> None:
    ledger = f.build_ledger(
        [devices("a", T4, [accelerator(0)], [row(0, 1)]), devices("b", T4, [accelerator(0), accelerator(1)])]
    )
    assert f.place_on_pool(ledger, Demand("exclusive", count=2))[0] == "b"
    assert f.place_on_pool(ledger, Demand("exclusive", count=1)) is None
    assert ledger.node("b") is ledger.nodes[1] and ledger.node("zz") is None


# --- Fit labels ----------------------------------------------------------------------------------------


@BOTH
def test_fit_labels(f) -> None:
    node = t4_node(f, [row(0, 3, 640_000, 1), row(1, 3, 640_000, 1), row(2, 0, M)], cards=3)
    assert f.fit_labels(node) == {
        f"sliced-max-free-units.fit.gpustack.ai/{T4}": "1600000",
        f"shared-free-cards.fit.gpustack.ai/{T4}": "1",
        f"exclusive-free-cards.fit.gpustack.ai/{T4}": "1",
    }
    # A card whose slots are all taken is full for the sliced label, whatever its memory.
    node = t4_node(f, [row(0, 3, 1_500_000, 128), row(1, 1), row(2, 2, SHARE)], cards=3)
    assert f.sliced_max_free_units(node, T4) == 0
    assert f.shared_free_cards(node, T4) == 1
    assert f.exclusive_free_cards(node, T4) == 0  # sliced, exclusive, shared: none is whole
    # Partitioned cards publish free placements per profile and nothing of the other families; a
    # profile whose key is no valid label key (``1g.10gb+me``) is left out.
    partitioned = f.node_ledger(devices("h1", H100, [accelerator(0, profiles=H100_PROFILES)]))
    assert f.exclusive_free_cards(partitioned, H100) is None
    assert f.partitioned_free_instances(partitioned, H100)["3g.40gb"] == 2
    assert f.fit_labels(partitioned) == {
        f"partitioned-free-instances.fit.gpustack.ai/{H100}.{name}": str(count)
        for name, count in f.partitioned_free_instances(partitioned, H100).items()
        if "+" not in name
    }
    taken = f.node_ledger(devices("h1", H100, [accelerator(0, profiles=H100_PROFILES)]))
    assert f.place(taken, Demand("partitioned", profile="4g.40gb")) is not None
    assert f.partitioned_free_instances(taken, H100)["4g.40gb"] == 0
    assert f.partitioned_free_instances(taken, H100)["3g.40gb"] == 1  # the 4g blocks one 3g placement
    no_slicing = t4_node(f, cards=2, slices=0)
    assert f.fit_labels(no_slicing) == {
        f"shared-free-cards.fit.gpustack.ai/{T4}": "2",
        f"exclusive-free-cards.fit.gpustack.ai/{T4}": "2",
    }


# --- Compiled == interpreted ------------------------------------------------------------------------------

_ROWS = st.sampled_from(
    [
        None,
        (0, M, 0),
        (1, 0, 0),
        (2, 1_120_000, 0),
        (2, SHARE, 0),
        (3, 1_120_000, 1),
        (3, 160_000, 3),
        (3, 800_000, 4),
    ]
)
_DEMANDS = st.one_of(
    st.builds(lambda n: Demand("exclusive", count=n), st.integers(0, 4)),
    st.builds(lambda n: Demand("shared", count=n), st.integers(1, 4)),
    st.builds(
        lambda n, u: Demand("sliced", count=n, units=u),
        st.integers(1, 3),
        st.sampled_from([16_000, 480_000, 960_000, M]),
    ),
    st.builds(
        lambda p, n: Demand("partitioned", count=n, profile=p),
        st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]),
        st.integers(1, 2),
    ),
)


@st.composite
def nodes(draw) -> dict:
    n = draw(st.integers(1, 4))
    accs, rows = [], []
    for i in range(n):
        partitioned = draw(st.booleans())
        accs.append(
            accelerator(
                i, slices=draw(st.sampled_from([0, 4, 128])), profiles=H100_PROFILES if partitioned else None
            )
        )
        if partitioned:
            allocated = draw(st.sampled_from([None, "1g.10gb", "3g.40gb", "2g.20gb"]))
            if allocated:
                rows.append(row(i, 4, allocatedProfiles=[{"name": allocated, "count": 1}]))
        else:
            r = draw(_ROWS)
            if r is not None:
                rows.append(row(i, r[0], r[1], r[2]))
    return devices("n", H100, accs, rows)


@settings(max_examples=200, deadline=None)
@given(nodes(), st.lists(_DEMANDS, max_size=5))
def test_compiled_and_interpreted_agree(obj: dict, demands: list) -> None:
    a, b = fit.node_ledger(obj), interpreted.node_ledger(obj)
    assert a.as_tuple() == b.as_tuple()
    for demand in demands:
        assert fit.fits(a, demand) == interpreted.fits(b, demand)
        assert fit.place(a, demand) == interpreted.place(b, demand)
        assert a.as_tuple() == b.as_tuple()
    assert fit.fit_labels(a) == interpreted.fit_labels(b)
    assert fit.partition_capacity(a) == interpreted.partition_capacity(b)


# A profile's placements as Devices objects give them (in order), as callers may (any order, ties,
# the whole 64-slice width), and as nothing should (bools, huge ints, lists): compiled, in-order
# int pairs take a C path; every input must give the interpreted twin's masks and starts.
_SLOTS = st.lists(
    st.one_of(
        st.tuples(st.integers(0, 63), st.integers(1, 8)),
        st.tuples(st.integers(0, 63), st.integers(1, 64)),
        st.tuples(st.sampled_from([0, 1, 2**70, -1, True]), st.sampled_from([1, 64, 2**66, True])),
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(_SLOTS, st.booleans())
def test_profile_placements_agree(slots: list, in_order: bool) -> None:
    if in_order:
        slots = sorted(slots, key=lambda slot: (slot[0] + slot[1], slot[0]))

    def made(f) -> object:
        try:
            profile = f.Profile("p", "p", 1, 1, slots)
        except Exception as error:  # the twins must fail alike too
            return type(error)
        return (profile.masks, profile.starts, [type(start) for start in profile.starts])

    assert made(fit) == made(interpreted)


def test_profile_placements_in_order_and_at_the_edges() -> None:
    slots = [(0, 1), (0, 2), (1, 1), (2, 2), (0, 64)]  # by end, then start
    for f in (fit, interpreted):
        profile = f.Profile("p", "p", 1, 1, slots)
        assert profile.masks == [1, 3, 2, 12, 2**64 - 1]
        assert profile.starts == [0, 0, 1, 2, 0]
        assert f.Profile("p", "p", 1, 1, [(2, 2), (0, 2)]).starts == [0, 2]  # sorted by end


def test_profile_names_that_can_be_a_key_segment_agree() -> None:
    # Compiled, the character test runs in C; interpreted, it is a set inclusion: every character
    # of the Latin-1 and a few wider ranges must be judged alike (the others never make inventory).
    chars = [chr(c) for c in (*range(0x250), 0x2010, 0x3000, 0xFF10, 0x1F600)]
    raw = [{"name": f"1g{c}x", "count": 1, "placements": [{"start": 0, "length": 1}]} for c in chars]
    obj = devices("n", H100, [accelerator(0, profiles=raw)])
    names = [[p.name for p in f.node_ledger(obj).cards[0].profiles] for f in (fit, interpreted)]
    assert names[0] == names[1]
    assert len(names[0]) == 26 + 26 + 10 + 3
