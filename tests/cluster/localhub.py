"""The local hub (``python -m tests.hub``) as a process of its own, as the e2e modules and
``make dev`` run it: on 127.0.0.1, its log appended under the caller's path, in a session of its
own so that stopping it stops everything it started.

    with localhub.serving(root, port, log) as endpoint:   # waits until /_hub/health answers
        ...                                                # http://127.0.0.1:PORT

``make dev`` starts it with :func:`spawn` and leaves it running (a pid file remembers it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import gpustack
import harness

from tests.hub.control import HubControl
from tests.net import free_port

START_TIMEOUT_S = 30


def port_from(variable: str) -> int:
    """The port ``$variable`` pins, else a free one."""
    value = os.environ.get(variable)
    return int(value) if value else free_port()


def endpoint_of(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def spawn(root: Path, port: int, log: Path, *extra: str) -> subprocess.Popen:
    """Start the hub serving ``root`` on ``port`` (``extra``: more of its flags, e.g. ``--demo``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [gpustack.PYTHON, "-m", "tests.hub", "--root", str(root), "--port", str(port), *extra],
        cwd=gpustack.REPO,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=10)


@contextlib.contextmanager
def serving(root: Path, port: int, log: Path) -> Iterator[str]:
    """The hub running and healthy for the block; its endpoint.  Stopped on the way out."""
    process = spawn(root, port, log)
    try:
        harness.wait_for(HubControl(endpoint_of(port)).healthy, timeout=START_TIMEOUT_S, what="the local hub")
        yield endpoint_of(port)
    finally:
        stop(process)
