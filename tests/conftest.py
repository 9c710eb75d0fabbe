"""What every test module shares: the process's signal handlers are the same after each test.

A command run in-process (``cli.main([...])``) installs its SIGTERM/SIGINT handlers in the pytest
process.  A child forked later (pyroute2 forks one to open a socket in another network namespace
and ends it with SIGTERM) would run such a handler instead of dying: one that raises SystemExit
left the child running the rest of the suite, inside that namespace, beside its parent.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Iterator[None]:
    before = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    yield
    for signum, handler in before.items():
        if signal.getsignal(signum) is not handler and handler is not None:
            signal.signal(signum, handler)
