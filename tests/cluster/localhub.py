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


def endpoint_of(port: int, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{port}"


def spawn(root: Path, port: int, log: Path, *extra: str, host: str = "127.0.0.1") -> subprocess.Popen:
    """Start the hub serving ``root`` on ``host:port`` (``extra``: more of its flags, e.g. ``--demo``).
    Off loopback its LFS redirects name ``host`` too, at a second port of the hub (another origin,
    as the Hub's CDN is), so a client that reached the hub reaches its files."""
    log.parent.mkdir(parents=True, exist_ok=True)
    where = (
        ["--host", host, "--cdn-host", host, "--cdn-port", str(free_port())] if host != "127.0.0.1" else []
    )
    return subprocess.Popen(
        [gpustack.PYTHON, "-m", "tests.hub", "--root", str(root), "--port", str(port), *where, *extra],
        cwd=gpustack.REPO,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=10)


@contextlib.contextmanager
def serving(root: Path, port: int, log: Path, *extra: str, host: str = "127.0.0.1") -> Iterator[str]:
    """The hub running and healthy for the block; its endpoint.  Stopped on the way out."""
    process = spawn(root, port, log, *extra, host=host)
    endpoint = endpoint_of(port, host)
    try:
        harness.wait_for(HubControl(endpoint).healthy, timeout=START_TIMEOUT_S, what="the local hub")
        yield endpoint
    finally:
        stop(process)
