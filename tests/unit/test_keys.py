"""fastpath.keys: the §3.2 family classifier of accelerator resource keys."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.manufacturers import BY_NAME, MANUFACTURERS
from fastpath import keys
from fastpath.pure import is_compiled, load

interpreted = load("keys")
BOTH = pytest.mark.parametrize("k", [keys, interpreted], ids=["compiled", "interpreted"])
PARTITIONING = [m for m in MANUFACTURERS if m.partition_kind]
NOT_PARTITIONING = [m for m in MANUFACTURERS if not m.partition_kind]


def test_compiled_extension_is_loaded() -> None:
    assert is_compiled(keys), (
        f"fastpath.keys was imported from {keys.__file__}, not a compiled extension: build it "
        "with `python setup.py build_ext --inplace` (or `pip install -e .`) before running the tests"
    )


# --- The classifier -----------------------------------------------------------------------------------


@BOTH
@pytest.mark.parametrize("m", MANUFACTURERS, ids=lambda m: m.name)
def test_every_manufacturer_key_is_classified(k, m) -> None:
    assert k.classify(m.base) == ("exclusive", "token", m.name, "")
    assert k.classify(m.base + ".shared") == ("shared", "token", m.name, "")
    assert k.classify(m.base + ".sliced") == ("sliced", "token", m.name, "")
    assert k.classify(m.base + ".sliced.units") == ("sliced", "units", m.name, "")
    assert k.classify(m.base + ".sliced.cores-percentage") == ("sliced", "cores-percentage", m.name, "")
    assert k.classify(m.base + ".sliced.memory-percentage") == ("sliced", "memory-percentage", m.name, "")
    assert k.classify(m.base + ".sliced.memory-mib") == ("sliced", "memory-mib", m.name, "")
    assert k.classify(f"device.gpustack.ai/{m.name}.visibility") == ("visibility", "visibility", m.name, "")
    assert k.family_of(m.base + ".sliced.memory-mib") == ("sliced", m.name, "")
    # Unknown sub-keys and neighbours are no family.
    for key in (
        m.base + ".sliced.bogus",
        m.base + ".sliced.",
        m.base + ".slicedx",
        m.base + ".shared.units",
        m.base + "x",
        m.base + ".",
        m.base[:-1],
        f"credits.gpustack.ai/{m.name}",
        f"device.gpustack.ai/{m.name}.visibilityx",
    ):
        assert k.family_of(key) == ("none", "", ""), key


@BOTH
@pytest.mark.parametrize("m", PARTITIONING, ids=lambda m: m.name)
def test_partition_keys_of_partitioning_manufacturers(k, m) -> None:
    assert k.classify(m.base + ".partitioned") == ("partitioned", "token", m.name, "")
    assert k.classify(m.base + ".partitioned.units") == ("partitioned", "units", m.name, "")
    key = f"{m.base}.partitioned.{m.partition_kind}-2g.15gb"
    assert k.classify(key) == ("partitioned", "profile", m.name, "2g.15gb")
    assert k.family_of(key) == ("partitioned", m.name, "2g.15gb")
    # An empty profile, another kind or a bare segment is no family.
    for bad in (
        f"{m.base}.partitioned.{m.partition_kind}-",
        f"{m.base}.partitioned.{m.partition_kind}",
        f"{m.base}.partitioned.vgpu-1g",
        f"{m.base}.partitioned.bogus",
        f"{m.base}.sliced.{m.partition_kind}-1g.10gb",  # the legacy MIG key gets no handling
    ):
        assert k.family_of(bad) == ("none", "", ""), bad


@BOTH
@pytest.mark.parametrize("m", NOT_PARTITIONING, ids=lambda m: m.name)
def test_manufacturers_without_partitioning_have_no_partition_keys(k, m) -> None:
    assert k.family_of(m.base + ".partitioned") == ("none", "", "")
    assert k.family_of(m.base + ".partitioned.mig-1g.10gb") == ("none", "", "")


@BOTH
@pytest.mark.parametrize(
    "key",
    [
        "cpu",
        "memory",
        "ephemeral-storage",
        "hugepages-2Mi",
        "device.gpustack.ai/rdma",
        "device.gpustack.ai/rdma.shared",
        "device.gpustack.ai/rdma.partitioned",
        "device.gpustack.ai/unknown.visibility",
        "device.gpustack.ai/.visibility",
        "vpc.amazonaws.com/efa",
        "example.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "",
    ],
)
def test_other_keys_are_no_family(k, key: str) -> None:
    assert k.family_of(key) == ("none", "", "")


@BOTH
def test_base_of(k) -> None:
    assert k.base_of("thead") == "alibabacloud.com/ppu"
    assert k.base_of("nope") == ""


# --- Compiled == interpreted ----------------------------------------------------------------------------

KEYS = [
    m.base + s
    for m in (BY_NAME["nvidia"], BY_NAME["hygon"], BY_NAME["ascend"])
    for s in (
        "",
        ".shared",
        ".sliced",
        ".sliced.units",
        ".sliced.memory-percentage",
        ".sliced.memory-mib",
        ".sliced.cores-percentage",
        ".partitioned",
        ".partitioned.units",
        ".partitioned.mig-1g.10gb",
        ".partitioned.mig-2g.20gb",
        ".sliced.bogus",
        ".partitioned.mig-",
    )
] + [
    "device.gpustack.ai/nvidia.visibility",
    "device.gpustack.ai/rdma.shared",
    "cpu",
    "memory",
    "credits.gpustack.ai/nvidia",
]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.sampled_from(KEYS),
        st.text(max_size=40),
        st.text(alphabet="nvidia.com/gpushrtelc-mbk", max_size=45),
    )
)
def test_classifier_compiled_and_interpreted_agree(key: str) -> None:
    assert keys.classify(key) == interpreted.classify(key)
