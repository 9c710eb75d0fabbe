"""Structured logs: one JSON object per line on stderr, for every component of the binary."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

# The LogRecord's own attributes: not extra fields, and ``logging`` refuses them as ``extra=`` keys.
RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """``{"time", "level", "logger", "msg", ...extra}``; extra fields come from ``extra=``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


# Libraries whose debug lines are traffic, not state: pyroute2 dumps every netlink message (the
# device manager's RDMA pass, every 15 s, at the node agents' default -v 2).
NOISY = ("uvicorn.access", "kubernetes.client.rest", "urllib3", "pyroute2")


def quiet_libraries(record: logging.LogRecord) -> bool:
    """The handler's filter: a :data:`NOISY` logger's lines below WARNING are dropped. Their levels
    are set too (no record made), but a library may reset its own on import: pyroute2 sets its
    logger to NOTSET when first imported, which is after :func:`configure` in the device manager."""
    return record.levelno >= logging.WARNING or not record.name.startswith(NOISY)


def configure(verbosity: int = 0, stream: Any = None) -> None:
    """Route every logger to JSON lines; ``-v`` levels map to INFO (0, 1) and DEBUG (2+)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter())
    handler.addFilter(quiet_libraries)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    from kube import debug  # /debug/flags/v changes the level later through the same mapping

    debug.set_verbosity(verbosity)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def apply_vmodule(spec: str) -> dict[str, int]:
    """``--vmodule=controllers.pools=4,webhooks.*=2``: per-logger verbosity (a trailing ``*`` or
    ``.*`` names the logger and every one below it, as the logger tree does anyway)."""
    levels: dict[str, int] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        pattern, sep, number = item.rpartition("=")
        if not sep or not pattern:
            raise ValueError(f"{item!r}: use pattern=N, e.g. controllers.pools=4")
        try:
            verbosity = int(number, 10)
        except ValueError:
            raise ValueError(f"{item!r}: the verbosity must be a number") from None
        name = pattern.removesuffix("*").removesuffix(".")
        logging.getLogger(name or None).setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO)
        levels[name] = verbosity
    return levels
