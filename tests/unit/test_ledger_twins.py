"""fastpath.ledger compiled == interpreted: the ledger rebuilt from Pods' allocation records, the
merged view gate 3 judges on, and its lazy book, on generated records."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from api import allocation
from fastpath import ledger
from fastpath.cards import Demand
from fastpath.pure import is_compiled, load
from nodeplugins.devicemanager import simulated as sim

interpreted = load("ledger")
A10G = sim.PRODUCTS["NVIDIA A10G"]
H100 = sim.PRODUCTS["NVIDIA H100 80GB HBM3"]
M = 1_600_000
NODES = ("n1", "n2")


def test_compiled_extension_is_loaded() -> None:
    assert is_compiled(ledger), "fastpath.ledger is not compiled: python setup.py build_ext --inplace"
    assert not is_compiled(interpreted)


def _card_id(node: str, product: sim.Product, index: int) -> str:
    return sim.devices(node, product, index + 1)["spec"]["groups"][0]["accelerators"][index]["id"]


@st.composite
def entries(draw, node: str, product: sim.Product) -> dict:
    index = draw(st.integers(0, 3))
    mode = draw(st.sampled_from([0, 1, 2, 3, 4, 5]))
    card = _card_id(node, product, index)
    if mode == 4:
        start = draw(st.sampled_from([0, 2, 4, 6]))
        placements = draw(st.sampled_from([None, [(start, 2)]]))
        return allocation.accelerator_entry(card, index, 4, 390_000, profile="2g.20gb", placements=placements)
    allocated = draw(st.sampled_from([None, 160_000, 480_000, M]))
    slices = draw(st.sampled_from([None, 1, 2])) if mode == 3 else None
    return allocation.accelerator_entry(card, index, mode, allocated, slices=slices)


@st.composite
def pods(draw, product: sim.Product) -> list[dict]:
    out = []
    for k in range(draw(st.integers(0, 5))):
        node = draw(st.sampled_from(NODES))
        record = {
            "main": [
                {
                    "id": product.group,
                    "manufacturer": product.manufacturer,
                    "accelerators": draw(st.lists(entries(node, product), min_size=1, max_size=3)),
                }
            ]
        }
        out.append(
            {
                "metadata": {
                    "name": f"p{k}",
                    "namespace": "ns",
                    "annotations": {allocation.ANNOTATION: allocation.encode(record)},
                },
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                },
                "status": {"phase": draw(st.sampled_from(["Running", "Succeeded", "Failed"]))},
            }
        )
    return out


PRODUCTS = st.sampled_from([(A10G, False), (H100, True)])


@settings(max_examples=150, deadline=None)
@given(st.data(), PRODUCTS, st.booleans())
def test_rows_and_merged_view_agree(data, product_partitioned, release: bool) -> None:
    product, partitioned = product_partitioned
    listed = data.draw(pods(product))
    for node in NODES:
        devices = sim.devices(node, product, 4, partitioned=partitioned)
        a = ledger.ledger_rows(devices, listed, release_terminated=release)
        b = interpreted.ledger_rows(devices, listed, release_terminated=release)
        assert a == b
        tallies_a = ledger.tally_pods(listed, release_terminated=release)
        tallies_b = interpreted.tally_pods(listed, release_terminated=release)
        assert ledger.merged_rows(devices, tallies_a) == interpreted.merged_rows(devices, tallies_b)


@settings(max_examples=100, deadline=None)
@given(st.data(), PRODUCTS)
def test_the_book_agrees(data, product_partitioned) -> None:
    product, partitioned = product_partitioned
    listed = data.draw(pods(product))
    devices = {node: sim.devices(node, product, 4, partitioned=partitioned) for node in NODES}
    by_node = {node: [p for p in listed if p["spec"]["nodeName"] == node] for node in NODES}
    demand = (
        Demand("partitioned", "nvidia", "nvidia.com/gpu", 1, 195_000, "1g.10gb")
        if partitioned
        else Demand("sliced", "nvidia", "nvidia.com/gpu", 1, 480_000)
    )
    pending = data.draw(st.integers(0, 3))
    books = [ledger.Book(devices, by_node), interpreted.Book(devices, by_node)]
    for book in books:
        book.charge_later("n1", product.group, demand, pending)
    a, b = (book.ledger("n1", product.group) for book in books)
    assert a.as_tuple() == b.as_tuple()
    for book in books:
        book.charge_later("n1", product.group, demand, 1)
    assert a.as_tuple() == b.as_tuple()
    assert books[0].ledger("gone", product.group) is None and books[1].ledger("gone", product.group) is None
