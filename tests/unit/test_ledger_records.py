"""fastpath.ledger.tally_records — the device manager tallies its reservations, already decoded —
charges exactly what tally_pods charges for the same records on the Pods, compiled and interpreted,
and adds into given tallies as a second pass over the rest would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from api import allocation
from fastpath import ledger
from fastpath.pure import load
from tests.unit.test_ledger_twins import A10G, H100, pods

interpreted = load("ledger")


def _summary(tallies: dict) -> dict:
    return {
        key: (t.mode, t.allocated, t.slices, dict(t.profiles), t.occupied, t.complete)
        for key, t in tallies.items()
    }


def _records(items: list[dict]) -> list[tuple[str, bool, dict]]:
    return [
        (
            p["spec"]["nodeName"],
            p["status"]["phase"] in ("Succeeded", "Failed"),
            allocation.record_of(p),
        )
        for p in items
    ]


@settings(max_examples=100, deadline=None)
@given(st.data(), st.sampled_from([A10G, H100]), st.booleans())
def test_records_tally_as_the_pods_carrying_them(data, product, release) -> None:
    items = data.draw(pods(product))
    for module in (ledger, interpreted):
        want = _summary(module.tally_pods(items, release_terminated=release))
        assert _summary(module.tally_records(_records(items), release_terminated=release)) == want
        half = len(items) // 2
        into = module.tally_records(_records(items[:half]), release_terminated=release)
        module.tally_records(_records(items[half:]), release_terminated=release, into=into)
        assert _summary(into) == want
