"""Load a fastpath module from its .py source, bypassing the compiled extension.

The compiled extension and the source are the same code (Cython pure-Python mode), so tests compare
the two and benchmarks measure what compilation buys.  Imports inside a pure module still resolve
normally (to compiled siblings where built); each fastpath module is differential-tested on its own.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_HERE = Path(__file__).parent
_PREFIX = "fastpath._pure_"


def load(name: str) -> ModuleType:
    """Return the interpreted module ``fastpath/<name>.py`` (cached per process)."""
    key = _PREFIX + name
    module = sys.modules.get(key)
    if module is not None:
        return module
    source = _HERE / f"{name}.py"
    if not source.is_file():
        raise ModuleNotFoundError(f"fastpath has no source module {name!r}")
    spec = importlib.util.spec_from_file_location(key, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def is_compiled(module: ModuleType) -> bool:
    """True when ``module`` was loaded from a compiled extension."""
    return str(getattr(module, "__file__", "")).endswith((".so", ".pyd"))
