"""The capacity rule (model-delivery spec §4.6): usage, the effective watermarks, and reservations.

- Usage is the cache filesystem's usage by **everything** on it, root-reserved blocks counted as
  used: ``(f_blocks - f_bavail) / f_blocks``, as kubelet reads available space.
- The kubelet cap applies only when the cache root and kubelet's ``pods`` directory share a device:
  ``cap = min(100 - nodefs% - 5, 100 - imagefs% - 5, imageGCHigh - 5)``, at least 2; thresholds
  kubelet leaves unset take its defaults (10%, 15%, 85: cap 80); a quantity is converted to a
  percentage of the filesystem, and one at or above its size takes the default. The effective high
  is ``min(high, cap)``; low is lowered with it when it would reach it.
- A reservation — the rest of a manifest plus what every other running download has yet to write —
  must fit under the effective high watermark.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from fastpath.quantity import parse as parse_quantity

KUBELET_DEFAULTS = {"nodefs": 10.0, "imagefs": 15.0, "image_gc_high": 85}
MIN_HIGH = 2


@dataclass(frozen=True, slots=True)
class Usage:
    total: int  # bytes of the filesystem
    used: int  # bytes used by everything, root-reserved blocks included

    @property
    def percent(self) -> float:
        return 100.0 * self.used / self.total if self.total else 100.0

    @property
    def percent_step(self) -> int:
        """``usedPercent`` as status shows it: rounded down to a multiple of 5."""
        return int(self.percent // 5 * 5)


def usage_of(path: str | os.PathLike[str]) -> Usage:
    st = os.statvfs(path)
    return Usage(st.f_blocks * st.f_frsize, (st.f_blocks - st.f_bavail) * st.f_frsize)


@dataclass(frozen=True, slots=True)
class Watermarks:
    high: int
    low: int
    note: str = ""  # what the Ready message says about a cap


def _text(value: object) -> str | None:
    """A kubelet threshold as its text (``"10%"``, ``"15Gi"``), None when absent or not a string."""
    return value if isinstance(value, str) else None


def _threshold_percent(value: str | None, default: float, fs_size: int, name: str, notes: list[str]) -> float:
    if value is None:
        notes.append(f"{name} unset, kubelet default {default:g}%")
        return default
    if value == "":
        return 0.0  # kubelet sets no such threshold: it cannot fire, nothing to keep free
    text = value.strip()
    if text.endswith("%"):
        try:
            return float(text[:-1])
        except ValueError:
            notes.append(f"{name} {value!r} unreadable, kubelet default {default:g}%")
            return default
    try:
        numerator, denominator = parse_quantity(text)
        quantity = numerator / denominator
    except (ValueError, TypeError):
        notes.append(f"{name} {value!r} unreadable, kubelet default {default:g}%")
        return default
    if fs_size <= 0 or quantity >= fs_size:
        notes.append(f"{name} {value} is not below the filesystem size, kubelet default {default:g}%")
        return default
    return 100.0 * quantity / fs_size


def kubelet_cap(
    kubelet: dict[str, object] | None, fs_size: int, shares_kubelet_device: bool
) -> tuple[int | None, str]:
    """The cap on the high watermark, or None, and how it was reached (for the Ready message)."""
    if not shares_kubelet_device:
        return None, ""
    notes: list[str] = []
    if kubelet is None:
        notes.append("kubelet's effective configuration could not be read; its defaults apply")
        kubelet = {}
    nodefs = _threshold_percent(
        _text(kubelet.get("nodefsAvailable")), KUBELET_DEFAULTS["nodefs"], fs_size, "nodefs.available", notes
    )
    imagefs = _threshold_percent(
        _text(kubelet.get("imagefsAvailable")),
        KUBELET_DEFAULTS["imagefs"],
        fs_size,
        "imagefs.available",
        notes,
    )
    gc = kubelet.get("imageGCHighThresholdPercent")
    if not isinstance(gc, int) or isinstance(gc, bool):
        notes.append(
            f"imageGCHighThresholdPercent unset, kubelet default {KUBELET_DEFAULTS['image_gc_high']}"
        )
        gc = KUBELET_DEFAULTS["image_gc_high"]
    cap = min(100 - nodefs - 5, 100 - imagefs - 5, gc - 5)
    return max(MIN_HIGH, math.floor(cap)), "; ".join(notes)


def effective(high: int, low: int, cap: int | None, cap_note: str) -> Watermarks:
    if cap is None or cap >= high:
        note = f"kubelet thresholds allow up to {cap}%" if cap is not None else ""
        if cap_note:
            note = f"{note}; {cap_note}" if note else cap_note
        return Watermarks(high, low, note)
    new_low = min(low, cap - 1)
    note = f"high watermark capped at {cap}% by kubelet's thresholds (from {high}%)"
    if cap_note:
        note += f"; {cap_note}"
    return Watermarks(cap, max(new_low, 1), note)


class Reservations:
    """Bytes promised to running downloads, checked against the effective high watermark."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._remaining: dict[str, Callable[[], int]] = {}

    def outstanding(self, excluding: str | None = None) -> int:
        return sum(max(fn(), 0) for digest, fn in self._remaining.items() if digest != excluding)

    def try_reserve(self, digest: str, remaining: Callable[[], int], usage: Usage, high_percent: int) -> bool:
        """Reserve when ``usage + remaining + others' remaining`` fits under ``high_percent``."""
        with self._lock:
            need = usage.used + max(remaining(), 0) + self.outstanding(excluding=digest)
            if need > usage.total * high_percent / 100:
                return False
            self._remaining[digest] = remaining
            return True

    def release(self, digest: str) -> None:
        with self._lock:
            self._remaining.pop(digest, None)

    def shortfall(self, digest: str, remaining: int, usage: Usage, high_percent: int) -> int:
        """Bytes that would have to be freed for a reservation of ``remaining`` to fit."""
        with self._lock:
            need = usage.used + remaining + self.outstanding(excluding=digest)
        return max(0, math.ceil(need - usage.total * high_percent / 100))
