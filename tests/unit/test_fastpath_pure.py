"""fastpath.pure: interpreted twins are interpreted through and through."""

from __future__ import annotations

import pytest

from fastpath import quantity
from fastpath.pure import is_compiled, load


def test_a_twin_imports_its_siblings_as_twins() -> None:
    requests = load("requests")
    assert not is_compiled(requests)
    assert requests.quantity is load("quantity")
    assert requests.quantity is not quantity
    assert not is_compiled(requests.quantity)


def test_a_twin_leaves_other_imports_alone() -> None:
    import api.manufacturers

    assert load("requests").MANUFACTURERS is api.manufacturers.MANUFACTURERS


def test_twins_are_cached_and_unknown_names_refused() -> None:
    assert load("quantity") is load("quantity")
    with pytest.raises(ModuleNotFoundError):
        load("no_such_module")
    with pytest.raises(ModuleNotFoundError):
        load("pure")
