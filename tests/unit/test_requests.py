"""fastpath.requests: the one-pass Pod facts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastpath import requests
from fastpath.pure import is_compiled, load
from tests.unit.test_keys import KEYS

interpreted = load("requests")
BOTH = pytest.mark.parametrize("r", [requests, interpreted], ids=["compiled", "interpreted"])


def test_compiled_extension_is_loaded() -> None:
    assert is_compiled(requests), (
        f"fastpath.requests was imported from {requests.__file__}, not a compiled extension: build it "
        "with `python setup.py build_ext --inplace` (or `pip install -e .`) before running the tests"
    )


# --- Pod facts ---------------------------------------------------------------------------------------------


def container(name: str, limits: dict | None = None, requests_: dict | None = None, **extra) -> dict:
    resources = {}
    if limits is not None:
        resources["limits"] = limits
    if requests_ is not None:
        resources["requests"] = requests_
    return {"name": name, "image": "busybox", "resources": resources, **extra}


@BOTH
def test_groups_sources_and_values(r) -> None:
    spec = {
        "initContainers": [
            container("warmup", {"cpu": "1", "nvidia.com/gpu": "1"}),
            container("proxy", {"device.gpustack.ai/nvidia.visibility": "1"}, restartPolicy="Always"),
            container("plain", {"cpu": "1"}),
        ],
        "containers": [
            container(
                "main", {"nvidia.com/gpu": "2", "cpu": "4"}, {"nvidia.com/gpu.shared": "3", "cpu": "1"}
            ),
            container("other", None, {"amd.com/gpu": 1}),
        ],
    }
    facts = r.scan_pod(spec)
    names = [(cf.name, cf.field, cf.index, cf.group) for cf in facts.containers]
    assert names == [
        ("warmup", "initContainers", 0, r.GROUP_INIT),
        ("proxy", "initContainers", 1, r.GROUP_SIDECAR),
        ("main", "containers", 0, r.GROUP_APP),
        ("other", "containers", 1, r.GROUP_APP),
    ]
    warmup, proxy, main, other = facts.containers
    assert warmup.exclusive == 1 and warmup.resources_path == "spec.initContainers[0].resources"
    assert not proxy.claims() and proxy.visibility == 1
    # limits first; a key only in requests is read from requests.
    assert main.exclusive == 2 and main.source_of("nvidia.com/gpu") == "limits"
    assert main.shared == 3 and main.source_of("nvidia.com/gpu.shared") == "requests"
    assert main.has_limits and main.has_requests
    assert (
        other.manufacturer == "amd" and other.exclusive == 1 and other.source_of("amd.com/gpu") == "requests"
    )
    assert not other.has_limits
    assert facts.family_names() == ["exclusive", "shared"]
    assert facts.family_names(facts.init_families) == ["exclusive"]
    assert facts.family_names(facts.app_families) == ["exclusive", "shared"]
    assert facts.sidecar_families == 0
    assert facts.shared_max == 3


@BOTH
def test_a_limit_wins_over_a_request_of_the_same_key(r) -> None:
    facts = r.scan_pod(
        {"containers": [container("a", {"nvidia.com/gpu.shared": "2"}, {"nvidia.com/gpu.shared": "5"})]}
    )
    (cf,) = facts.containers
    assert cf.shared == 2
    assert [entry.key for entry in cf.keys] == ["nvidia.com/gpu.shared"]


@BOTH
def test_slice_and_partition_facts(r) -> None:
    spec = {
        "containers": [
            container(
                "slice",
                {
                    "huawei.com/npu.sliced": "1",
                    "huawei.com/npu.sliced.memory-mib": "16384",
                    "huawei.com/npu.sliced.cores-percentage": "30",
                    "huawei.com/npu.sliced.units": "5",
                },
            ),
            container(
                "part",
                {
                    "hygon.com/dcu.partitioned": "1",
                    "hygon.com/dcu.partitioned.mig-2g.15gb": "1",
                    "hygon.com/dcu.partitioned.mig-1g.8gb": "3",
                },
            ),
            container("part2", {"hygon.com/dcu.partitioned.mig-2g.15gb": "1"}),
        ]
    }
    facts = r.scan_pod(spec)
    s, p, p2 = facts.containers
    assert (s.sliced, s.memory_mib, s.memory_percentage, s.cores_percentage, s.sliced_units) == (
        1,
        16384,
        -1,
        30,
        5,
    )
    assert s.value_of("huawei.com/npu.sliced.memory-mib") == "16384"
    assert p.partitioned == 1 and p.profiles == ["2g.15gb", "1g.8gb"]
    assert p2.partitioned == r.ABSENT
    assert facts.profiles == ["2g.15gb", "1g.8gb"]
    assert facts.claimants == 3
    assert facts.needs_vram  # a MiB budget and a profile both need the card's VRAM
    entry = next(e for e in p.keys if e.key == "hygon.com/dcu.partitioned.mig-1g.8gb")
    assert entry.as_tuple() == (
        "hygon.com/dcu.partitioned.mig-1g.8gb",
        "partitioned",
        "profile",
        "hygon",
        "1g.8gb",
        "3",
        3,
        "limits",
    )


@BOTH
def test_percentage_budget_needs_no_vram(r) -> None:
    facts = r.scan_pod(
        {
            "containers": [
                container(
                    "a", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"}
                )
            ]
        }
    )
    assert not facts.needs_vram


@BOTH
@pytest.mark.parametrize(
    ("value", "count"),
    [
        ("1", 1),
        (2, 2),
        ("1k", 1000),
        ("0", 0),
        ("1.5", -2),
        ("-1", -2),
        ("x", -2),
        (True, -2),
        (None, -2),
        ("1e30", 1 << 62),
    ],
)
def test_values_are_whole_counts_or_invalid(r, value: object, count: int) -> None:
    (cf,) = r.scan_pod({"containers": [container("a", {"amd.com/gpu": value})]}).containers
    assert cf.exclusive == count


@BOTH
@pytest.mark.parametrize(
    "spec",
    [
        None,
        [],
        {},
        {"containers": None},
        {"containers": [None, 1, "x"]},
        {"containers": [{"resources": None}]},
        {"containers": [{"resources": {"limits": ["nvidia.com/gpu"]}}]},
        {"containers": [{"resources": {"limits": {1: 2}}}]},
    ],
)
def test_malformed_specs_give_empty_facts(r, spec: object) -> None:
    facts = r.scan_pod(spec)
    assert facts.containers == [] and not facts.any_accelerator and facts.demand() is None


# --- Demand --------------------------------------------------------------------------------------------


@BOTH
def test_demand_exclusive_sums_the_claiming_group(r) -> None:
    facts = r.scan_pod(
        {"containers": [container("a", {"amd.com/gpu": "1"}), container("b", {"amd.com/gpu": "2"})]}
    )
    assert facts.demand() == r.Demand("exclusive", "amd", "amd.com/gpu", 3, 1_600_000, "")
    facts = r.scan_pod(
        {
            "initContainers": [container("i", {"amd.com/gpu": "4"})],
            "containers": [container("a", {"amd.com/gpu": "1"})],
        }
    )
    assert facts.demand().count == 4  # max(Σ init, Σ app)


@BOTH
def test_demand_shared_is_the_largest_container(r) -> None:
    facts = r.scan_pod(
        {
            "containers": [
                container("a", {"metax-tech.com/gpu.shared": "2"}),
                container("b", {"metax-tech.com/gpu.shared": "3"}),
            ]
        }
    )
    assert facts.demand() == r.Demand("shared", "metax", "metax-tech.com/gpu", 3, 160_000, "")


@BOTH
def test_demand_sliced_units(r) -> None:
    pct = r.scan_pod(
        {
            "containers": [
                container(
                    "a", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"}
                )
            ]
        }
    )
    assert pct.demand() == r.Demand("sliced", "nvidia", "nvidia.com/gpu", 1, 800_000, "")
    mib = r.scan_pod(
        {
            "containers": [
                container("a", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "6144"})
            ]
        }
    )
    assert mib.demand().units == 0  # unknown without the card's VRAM
    assert mib.demand(24576).units == 400_000
    folded = r.scan_pod(
        {
            "containers": [
                container("a", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "480000"}),
                container("b", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "960000"}),
            ]
        }
    )
    assert folded.demand().units == 960_000  # the larger units win
    assert folded.sliced_units_max == 960_000


@BOTH
def test_demand_partitioned(r) -> None:
    facts = r.scan_pod(
        {
            "containers": [
                container(
                    "a",
                    {
                        "alibabacloud.com/ppu.partitioned": "1",
                        "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "1",
                        "alibabacloud.com/ppu.partitioned.units": "785000",
                    },
                )
            ]
        }
    )
    assert facts.demand() == r.Demand("partitioned", "thead", "alibabacloud.com/ppu", 1, 785_000, "4g.48gb")


@BOTH
def test_visibility_alone_is_no_demand(r) -> None:
    facts = r.scan_pod(
        {"containers": [container("ssh", {"device.gpustack.ai/nvidia.visibility": "1", "cpu": "1"})]}
    )
    assert len(facts.containers) == 1 and not facts.any_accelerator and facts.demand() is None


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("value", [str(1 << 62), "4611686018427387903", "1e30", 1 << 62, 1 << 80])
@pytest.mark.parametrize("field", ["containers", "initContainers"])
def test_exclusive_sums_saturate_at_the_count_cap_in_both_twins(n: int, value: object, field: str) -> None:
    """Σ of whole-card counts stays at ``COUNT_CAP`` like a single count: compiled, two clamped
    counts once wrapped a C long long (a demand of 0 cards) while the interpreted twin kept 2^63."""
    spec = {field: [container(f"c{i}", {"nvidia.com/gpu": value}) for i in range(n)]}
    for r in (requests, interpreted):
        assert r.COUNT_CAP == 1 << 62
        demand = r.scan_pod(spec).demand()
        single = min(10**30 if value == "1e30" else int(value), r.COUNT_CAP)
        assert demand.count == min(n * single, r.COUNT_CAP), (r, n, value)
    a, b = requests.scan_pod(spec).demand(), interpreted.scan_pod(spec).demand()
    assert a.as_tuple() == b.as_tuple()


@BOTH
def test_exclusive_sums_below_the_cap_are_exact(r) -> None:
    spec = {"containers": [container(f"c{i}", {"nvidia.com/gpu": str((1 << 60) + i)}) for i in range(3)]}
    assert r.scan_pod(spec).demand().count == 3 * (1 << 60) + 3


@BOTH
@pytest.mark.parametrize("vram", [1 << 43, 1 << 61, (1 << 63) - 1])
def test_mib_fold_on_a_huge_card_does_not_wrap(r, vram: int) -> None:
    """``mib × M`` passes a C long long once mib > 2^63 / M: the fold stays exact (≤ M)."""
    for mib in (vram // 4, vram // 2, min(vram, 1 << 62)):  # a larger budget reads as 2^62 MiB
        spec = {
            "containers": [
                container("a", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": str(mib)})
            ]
        }
        facts = r.scan_pod(spec)
        want = mib * 1_600_000 // vram
        assert facts.demand(vram).units == want == facts.slice_units(vram) == r.slice_units_for_mib(mib, vram)


def test_folds() -> None:
    assert requests.slice_units_for_percentage(50) == 800_000
    assert requests.slice_units_for_mib(6144, 24576) == 400_000
    assert requests.slice_units_for_mib(40192, 81920) == 785_000


# --- Compiled == interpreted ----------------------------------------------------------------------------

_VALUES = st.one_of(
    st.sampled_from(
        ["0", "1", "2", "3", "50", "100", "101", "6144", "16384", "1.5", "-1", "1k", "1Gi", "x", ""]
    ),
    st.integers(-3, 200_000),
    st.none(),
    # Counts at and past the cap, and MiB budgets whose fold passes a C long long on a huge card.
    st.sampled_from(["4611686018427387903", "4611686018427387904", "1e30", 1 << 62, 1 << 80]),
    st.sampled_from(["5764607523034", "2305843009213693952", "9223372036854775807"]),
)
_RESOURCE_MAP = st.dictionaries(st.one_of(st.sampled_from(KEYS), st.just(7)), _VALUES, max_size=5)


# What a malformed Pod puts where a container, its resources, a map or a name belongs.
_NOT_A_MAP = st.sampled_from([None, "x", 1, [], [{"nvidia.com/gpu": "1"}]])


@st.composite
def pod_specs(draw) -> object:
    def one(i: int, init: bool) -> object:
        if draw(st.integers(0, 9)) == 0:
            return draw(_NOT_A_MAP)
        c: dict = {"name": f"c{i}" if draw(st.integers(0, 9)) else draw(_NOT_A_MAP)}
        resources: dict = {}
        for field in ("limits", "requests"):
            if draw(st.booleans()):
                resources[field] = draw(_RESOURCE_MAP) if draw(st.integers(0, 9)) else draw(_NOT_A_MAP)
        c["resources"] = resources if draw(st.integers(0, 9)) else draw(_NOT_A_MAP)
        if init and draw(st.booleans()):
            c["restartPolicy"] = "Always"
        return c

    if draw(st.integers(0, 19)) == 0:
        return draw(_NOT_A_MAP)
    spec: dict = {"containers": [one(i, False) for i in range(draw(st.integers(0, 3)))]}
    if draw(st.booleans()):
        spec["initContainers"] = [one(i, True) for i in range(draw(st.integers(0, 2)))]
    return spec


@settings(max_examples=300, deadline=None)
@given(pod_specs(), st.sampled_from([0, 15360, 24576, 81920, 1 << 61, (1 << 63) - 1]))
def test_compiled_and_interpreted_agree(spec: object, vram: int) -> None:
    compiled_facts = requests.scan_pod(spec)
    interpreted_facts = interpreted.scan_pod(spec)
    assert compiled_facts.as_tuple() == interpreted_facts.as_tuple()
    a, b = compiled_facts.demand(vram), interpreted_facts.demand(vram)
    assert (a.as_tuple() if a else None) == (b.as_tuple() if b else None)
