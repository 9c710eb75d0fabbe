"""The debug endpoints every component serves on its own secure port (operations spec D.2).

- ``GET /debug/flags/v`` — the current verbosity; ``PUT /debug/flags/v`` with the new one as the
  body changes it at once (``-v`` 0-1 is INFO, 2 and more DEBUG, as at start-up).
- ``GET /debug/threads`` — every thread's stack, the Python stand-in for Go's profiling handlers.

Both answer only a caller on the loopback interface: anyone else gets 403, so the port's other
endpoints (webhooks, metrics) can face the cluster while these stay on the node.
"""

from __future__ import annotations

import ipaddress
import logging
import sys
import threading
import traceback

FLAGS_V = "/debug/flags/v"
THREADS = "/debug/threads"
PATHS = (FLAGS_V, THREADS)
MAX_VERBOSITY = 10

_verbosity = 0


def level_for(verbosity: int) -> int:
    return logging.DEBUG if verbosity >= 2 else logging.INFO


def set_verbosity(verbosity: int) -> None:
    """Apply ``-v``'s meaning to the root logger (the quiet third-party loggers stay quiet)."""
    global _verbosity
    _verbosity = verbosity
    logging.getLogger().setLevel(level_for(verbosity))


def verbosity() -> int:
    return _verbosity


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def stacks() -> str:
    frames = sys._current_frames()
    out = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        out.append(f"--- {thread.name} (daemon={thread.daemon})\n")
        if frame is not None:
            out.extend(traceback.format_stack(frame))
    return "".join(out)


def answer(method: str, path: str, peer: str | None, body: bytes) -> tuple[int, str]:
    """(HTTP status, text) for a debug request; the one implementation every server calls."""
    if not is_loopback(peer):
        return 403, f"{path} answers loopback callers only (curl -k https://127.0.0.1:<port>{path})\n"
    if path == THREADS:
        if method != "GET":
            return 405, "GET /debug/threads\n"
        return 200, stacks()
    if path != FLAGS_V:
        return 404, "not found\n"
    if method == "GET":
        return 200, f"{_verbosity}\n"
    if method != "PUT":
        return 405, "GET or PUT /debug/flags/v (the body is the new verbosity, e.g. 4)\n"
    text = body.decode(errors="replace").strip()
    try:
        value = int(text, 10)
    except ValueError:
        return 400, f"the body must be a verbosity from 0 to {MAX_VERBOSITY}, not {text[:40]!r}\n"
    if not 0 <= value <= MAX_VERBOSITY:
        return 400, f"the body must be a verbosity from 0 to {MAX_VERBOSITY}, not {value}\n"
    previous = _verbosity
    set_verbosity(value)
    logging.getLogger("debug").info("verbosity changed", extra={"from": previous, "to": value})
    return 200, f"verbosity set to {value} (was {previous})\n"
