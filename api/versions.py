"""Ordering runtime versions as people read them: dotted parts compared as numbers where they are
numbers (``12.10`` after ``12.9``), as text otherwise."""

from __future__ import annotations

import re
from collections.abc import Iterable

_SEPARATORS = re.compile(r"[.\-+_]")


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _SEPARATORS.split(version))


def ordered(versions: Iterable[str]) -> list[str]:
    """The distinct non-empty versions, lowest first."""
    return sorted({v for v in versions if v}, key=version_key)
