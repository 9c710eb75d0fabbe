"""The e2e lanes share one queue of modules (scripts/test.sh; docs/testing.md, "Lanes").

Every lane's pytest collects every e2e module; with ``GPUSTACK_E2E_QUEUE=<dir>`` set, its run loop
takes modules from that queue instead of running what it collected: the longest module not yet taken
(by the measured seconds of tests/e2e/durations.json; 60 s for a module it does not know), claimed
with one ``mkdir`` under ``<dir>`` — atomic, so two lanes never run the same module. A lane that
finishes early takes more, so the lanes end within about one module of each other whatever the
machine did to the estimates (a fixed split ended its lanes up to 100 s apart). A lane claims its
next module while the last test of the current one runs: pytest must know the next test to tear
down the current module's fixtures and keep the session's.

Without the variable, pytest's own loop runs what it collected, as ever.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ENV = "GPUSTACK_E2E_QUEUE"
DEFAULT_S = 60.0
WEIGHTS = Path(__file__).resolve().parents[1] / "e2e" / "durations.json"


def weights(path: Path = WEIGHTS) -> dict[str, float]:
    """Seconds per module path (``tests/e2e/test_x.py``), as scripts/test-durations.py wrote them."""
    return {k: float(v) for k, v in json.loads(path.read_text()).items()} if path.exists() else {}


def longest_first(modules: Iterable[str], seconds: Mapping[str, float]) -> list[str]:
    """The order lanes take modules in: longest first, then by path."""
    return sorted(set(modules), key=lambda m: (-float(seconds.get(m, DEFAULT_S)), m))


class Queue:
    """Modules claimed through one directory shared by every lane."""

    def __init__(self, directory: str | os.PathLike[str], order: list[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.order = order

    def claim(self) -> str | None:
        """The next module no lane took yet, now this lane's; None when every one is taken."""
        for module in self.order:
            try:
                (self.directory / module.replace("/", "__")).mkdir()
            except FileExistsError:
                continue
            return module
        return None


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def run(session: pytest.Session, directory: str, seconds: Mapping[str, float] | None = None) -> bool:
    """``pytest_runtestloop`` over the queue at ``directory`` (pytest's own loop, but for which
    modules run and in what order); ``seconds``: the modules' weights, else durations.json's."""
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
    if session.config.option.collectonly:
        return True
    by_module: dict[str, list[pytest.Item]] = {}
    for item in session.items:
        by_module.setdefault(module_of(item), []).append(item)
    queue = Queue(directory, longest_first(by_module, weights() if seconds is None else seconds))
    current = queue.claim()
    while current is not None:
        items = by_module[current]
        following: str | None = None
        for i, item in enumerate(items):
            if i + 1 < len(items):
                nextitem: pytest.Item | None = items[i + 1]
            else:
                following = queue.claim()
                nextitem = by_module[following][0] if following is not None else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        current = following
    return True
