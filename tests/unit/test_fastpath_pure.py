"""fastpath.pure: interpreted twins are interpreted through and through."""

from __future__ import annotations

import pytest

from fastpath import cards, ledger
from fastpath.pure import bundle, is_compiled, load, modules


def test_a_twin_imports_its_siblings_as_twins() -> None:
    requests = load("requests")
    assert not is_compiled(requests)
    assert requests.whole is load("quantity").whole  # from fastpath.quantity import whole
    assert requests.Demand is load("cards").Demand is not cards.Demand
    twin = load("ledger")
    assert twin.fit is load("fit") and twin.requests is requests  # from fastpath import fit, requests
    assert ledger.fit is not twin.fit


def test_a_twin_ledger_is_interpreted_through_and_through() -> None:
    twin = bundle(("ledger", "fit"), interpreted=True)
    node = twin.node_ledger({"metadata": {"name": "n"}, "spec": {"groups": []}})
    assert type(node) is load("cards").NodeLedger
    assert [module.__name__ for module in modules(("cards", "fit"))] == ["fastpath.cards", "fastpath.fit"]
    assert all(is_compiled(module) for module in modules(("cards", "fit")))
    assert not any(is_compiled(module) for module in modules(("cards", "fit"), interpreted=True))


def test_a_twin_leaves_other_imports_alone() -> None:
    import api.manufacturers

    assert load("keys").MANUFACTURERS is api.manufacturers.MANUFACTURERS


def test_twins_are_cached_and_unknown_names_refused() -> None:
    assert load("quantity") is load("quantity")
    with pytest.raises(ModuleNotFoundError):
        load("no_such_module")
    with pytest.raises(ModuleNotFoundError):
        load("pure")
