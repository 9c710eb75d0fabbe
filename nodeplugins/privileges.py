"""What a node agent must be able to do on its host, checked before it serves, and said plainly when
it cannot: a privileged container's process running as a non-root uid holds no capabilities at all,
so the kubelet's root-owned plugin directories refuse it and ``mount`` fails. The agents report the
reason once in their log and on ``/readyz`` and retry, instead of crash-looping."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("nodeplugins.privileges")

CAP_SYS_ADMIN = 21
FIX = "run it as root (securityContext.runAsUser: 0) with that directory mounted"


def socket_dir_problem(socket: str | Path, what: str) -> str | None:
    """Why ``what`` (sockets) cannot be created beside ``socket``, or None."""
    directory = Path(socket).parent
    probe = directory / f".gpustack-probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as error:
        return f"cannot create the {what} in {directory}: {error.strerror} (uid {os.getuid()}); {FIX}"
    return None


def effective_capabilities(status: str | None = None) -> int:
    """CapEff of this process (``/proc/self/status``, or ``status`` given as its text)."""
    text = status if status is not None else Path("/proc/self/status").read_text()
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split(":", 1)[1].strip(), 16)
    return 0


def mount_problem(status: str | None = None) -> str | None:
    """Why this process cannot mount (no CAP_SYS_ADMIN), or None."""
    if effective_capabilities(status) & (1 << CAP_SYS_ADMIN):
        return None
    return (
        f"cannot mount model volumes: no CAP_SYS_ADMIN (uid {os.getuid()}); run it privileged as root "
        "(securityContext: privileged: true, runAsUser: 0)"
    )


def wait_until_able(
    problem: Callable[[], str | None],
    stop: threading.Event,
    blocked: Callable[[str | None], None],
    period: float = 10.0,
) -> None:
    """Until ``problem()`` says nothing (or ``stop``): log each new reason once, hand it to
    ``blocked`` (what the agent's /readyz says), retry every ``period`` seconds; ``blocked(None)`` once able."""
    said = None
    while not stop.is_set() and (reason := problem()):
        if reason != said:
            log.error(reason)
            said = reason
        blocked(reason)
        stop.wait(period)
    blocked(None)
