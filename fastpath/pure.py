"""Load a fastpath module from its .py source, bypassing the compiled extension.

The compiled extension and the source are the same code (Cython pure-Python mode), so tests compare
the two and benchmarks measure what compilation buys.  A module loaded here is interpreted through
and through: its imports of fastpath siblings (``from fastpath import quantity``, ``from
fastpath.cards import Card``) resolve to their interpreted twins too, so typed classes shared
through a ``.pxd`` (compiled, a card is a C struct another module's code reads directly) are the
interpreted classes on both sides.  Every other import resolves normally.
"""

from __future__ import annotations

import builtins
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

_HERE = Path(__file__).parent
_PREFIX = "fastpath._pure_"
_PACKAGE = "fastpath"
_NOT_TWINNED = frozenset({"__init__", "pure"})


def load(name: str) -> ModuleType:
    """Return the interpreted module ``fastpath/<name>.py`` (cached per process)."""
    key = _PREFIX + name
    module = sys.modules.get(key)
    if module is not None:
        return module
    source = _HERE / f"{name}.py"
    if name in _NOT_TWINNED or not source.is_file():
        raise ModuleNotFoundError(f"fastpath has no source module {name!r}")
    spec = importlib.util.spec_from_file_location(key, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # The module's import statements look ``__import__`` up in its own builtins.
    module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": _import}
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module


def _twinned(name: str) -> bool:
    return name not in _NOT_TWINNED and (_HERE / f"{name}.py").is_file()


def _import(
    name: str,
    globals: dict[str, Any] | None = None,
    locals: dict[str, Any] | None = None,
    fromlist: tuple[str, ...] | list[str] | None = (),
    level: int = 0,
) -> Any:
    """``__import__`` for interpreted modules: fastpath siblings come back interpreted."""
    if level == 0 and (name == _PACKAGE or name.startswith(_PACKAGE + ".")):
        rest = name[len(_PACKAGE) + 1 :]
        if not rest and fromlist:  # from fastpath import quantity, requests
            return SimpleNamespace(
                **{
                    item: load(item) if _twinned(item) else importlib.import_module(f"{_PACKAGE}.{item}")
                    for item in fromlist
                }
            )
        if rest and "." not in rest and _twinned(rest):
            if fromlist:  # from fastpath.cards import Card
                return load(rest)
            # import fastpath.cards: the name bound is the package, read as a namespace of twins.
            return SimpleNamespace(**{rest: load(rest)})
    return builtins.__import__(name, globals, locals, fromlist or (), level)


def modules(names: Iterable[str], *, interpreted: bool = False) -> list[ModuleType]:
    """The fastpath modules ``names``: compiled (as imported), or their interpreted twins."""
    return [load(name) if interpreted else importlib.import_module(f"{_PACKAGE}.{name}") for name in names]


def bundle(names: Iterable[str], *, interpreted: bool = False) -> SimpleNamespace:
    """The public names of the fastpath modules ``names`` in one namespace (later modules win a
    clash), so that one test or benchmark drives the compiled modules and their interpreted twins
    alike: ``bundle(("ledger", "fit")).place(...)``."""
    names_in: dict[str, Any] = {}
    for module in modules(names, interpreted=interpreted):
        names_in.update({name: value for name, value in vars(module).items() if not name.startswith("_")})
    return SimpleNamespace(**names_in)


def is_compiled(module: ModuleType) -> bool:
    """True when ``module`` was loaded from a compiled extension."""
    return str(getattr(module, "__file__", "")).endswith((".so", ".pyd"))
