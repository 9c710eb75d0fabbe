"""What every test module shares: the process's signal handlers and root logger are the same
after each test.

A command run in-process (``cli.main([...])``) installs its SIGTERM/SIGINT handlers in the pytest
process.  A child forked later (pyroute2 forks one to open a socket in another network namespace
and ends it with SIGTERM) would run such a handler instead of dying: one that raises SystemExit
left the child running the rest of the suite, inside that namespace, beside its parent.

The same command also routes the root logger to the ``sys.stderr`` of that moment, which is the
test's capture stream: once pytest closes it, every later log line from another test's threads
failed with "I/O operation on closed file" and buried the real failure in tracebacks.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Iterator[None]:
    before = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    yield
    for signum, handler in before.items():
        if signal.getsignal(signum) is not handler and handler is not None:
            signal.signal(signum, handler)


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


_E2E_DIR = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` runs tests/e2e in its own lane and everything else beside it (scripts/test.sh),
    choosing by directory and marker at once: a test that is in one and not the other would be run
    by neither lane, so it is refused here."""
    misplaced = [
        item.nodeid
        for item in items
        if (_E2E_DIR in Path(str(item.fspath)).resolve().parents)
        != (item.get_closest_marker("e2e") is not None)
    ]
    if misplaced:
        raise pytest.UsageError(
            "tests under tests/e2e must be marked e2e and no other test may be (scripts/test.sh picks lanes "
            f"by both): {misplaced[:5]}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under `make test` (GPUSTACK_TEST_NO_SKIP=1, set by scripts/test.sh) a skipped test fails: the
    machine `make test` prepares has every tool (helm, Go binaries, root for namespaces), so a skip
    there hides a missing install step instead of saying so. Run pytest directly to allow skips."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("GPUSTACK_TEST_NO_SKIP") == "1" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under make test, where nothing may skip (GPUSTACK_TEST_NO_SKIP=1): {reason}"
        )
